"""New audit ids are UUID version 7 (audits.ids). The default lives in Python only, so the
database is left as it is: no table rebuild of a large audits table."""

from django.db import migrations, models

import audits.ids


class Migration(migrations.Migration):
    dependencies = [
        ("audits", "0009_leaner_child_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="auditrun",
                    name="id",
                    field=models.UUIDField(
                        default=audits.ids.new_audit_id,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
