"""A `TraceLine` row may now hold several lines joined by "\\n" (audits.store.trace_rows): a
line break inside a line stored before is kept as a space, so that it reads as one line."""

from django.db import migrations
from django.db.models import Value
from django.db.models.functions import Replace


def breaks_to_spaces(apps, schema_editor):
    TraceLine = apps.get_model("audits", "TraceLine")
    TraceLine.objects.using(schema_editor.connection.alias).filter(text__contains="\n").update(
        text=Replace("text", Value("\n"), Value(" "))
    )


class Migration(migrations.Migration):
    dependencies = [("audits", "0010_audit_ids_ordered_by_time")]

    operations = [migrations.RunPython(breaks_to_spaces, migrations.RunPython.noop)]
