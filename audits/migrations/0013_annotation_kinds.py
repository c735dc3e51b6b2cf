"""The list filters and the trends page read one row per (audit, type, severity) with its
count (`AnnotationKind`) instead of three index entries per annotation; the rows are
counted from the stored annotations, then those indexes go."""

import django.db.models.deletion
from django.db import migrations, models


def count_kinds(apps, schema_editor):
    quote = schema_editor.quote_name
    kind = apps.get_model("audits", "AnnotationKind")._meta.db_table
    annotation = apps.get_model("audits", "Annotation")._meta.db_table
    columns = ", ".join(quote(c) for c in ("audit_id", "type", "severity"))
    schema_editor.execute(
        f"INSERT INTO {quote(kind)} ({columns}, {quote('count')}, {quote('audit_created_at')}) "
        f"SELECT {columns}, COUNT(*), MIN({quote('audit_created_at')}) FROM {quote(annotation)} "
        f"GROUP BY {columns}"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("audits", "0012_links_in_one_row"),
    ]

    operations = [
        migrations.CreateModel(
            name="AnnotationKind",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "audit",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="annotation_kinds",
                        to="audits.auditrun",
                    ),
                ),
                ("type", models.CharField(max_length=100)),
                (
                    "severity",
                    models.CharField(
                        choices=[
                            ("info", "Info"),
                            ("warning", "Warning"),
                            ("critical", "Critical"),
                        ],
                        max_length=10,
                    ),
                ),
                ("count", models.PositiveIntegerField()),
                ("audit_created_at", models.DateTimeField(editable=False)),
            ],
            options={
                "indexes": [
                    models.Index(fields=["type", "audit"], name="kind_type_idx"),
                    models.Index(fields=["severity", "audit"], name="kind_severity_idx"),
                    models.Index(
                        fields=["audit_created_at", "type", "severity", "count"],
                        name="kind_trends_idx",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("audit", "type", "severity"), name="kind_per_audit"
                    ),
                ],
            },
        ),
        migrations.RunPython(count_kinds, migrations.RunPython.noop),
        migrations.RemoveIndex(model_name="annotation", name="annotation_type_idx"),
        migrations.RemoveIndex(model_name="annotation", name="annotation_severity_idx"),
        migrations.RemoveIndex(model_name="annotation", name="annotation_trends_idx"),
    ]
