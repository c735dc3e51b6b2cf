"""Fewer indexes on the rows every stored audit writes (issue 18).

- Results: the audit foreign key's own index and the (analyzer_id, surfaced) index become
  one (audit, analyzer_id, surfaced) index. The "surfaced by this analyzer" filters (list,
  alert rules) are an EXISTS per audit: with the old index the planner walked every
  surfaced result of the analyzer for each audit; now it is one covering seek.
- Trace lines: the audit foreign key's own index goes; the unique (audit, position)
  constraint leads with the same column.

Only indexes are dropped and created (no table is rebuilt, which AlterField would do on
SQLite): the foreign keys' `db_index=False` is a state change here, and their indexes are
dropped by name, as introspection finds them.
"""

import django.db.models.deletion
from django.db import migrations, models


def _single_column_indexes(schema_editor, model, column):
    """Names of the plain (non-unique) indexes on exactly `column` of `model`'s table."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, model._meta.db_table)
    return [
        name
        for name, info in constraints.items()
        if info["index"]
        and not info["unique"]
        and not info["primary_key"]
        and info["columns"] == [column]
    ]


def drop_audit_indexes(apps, schema_editor):
    for name in ("AnalyzerRunRecord", "TraceLine"):
        model = apps.get_model("audits", name)
        for index in _single_column_indexes(schema_editor, model, "audit_id"):
            schema_editor.execute(schema_editor._delete_index_sql(model, index))


def create_audit_indexes(apps, schema_editor):
    for name in ("AnalyzerRunRecord", "TraceLine"):
        model = apps.get_model("audits", name)
        if not _single_column_indexes(schema_editor, model, "audit_id"):
            field = model._meta.get_field("audit")
            schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))


class Migration(migrations.Migration):
    dependencies = [
        ("audits", "0008_surfacing_policies_and_collision_families"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="analyzerrunrecord",
            name="result_analyzer_idx",
        ),
        migrations.AddIndex(
            model_name="analyzerrunrecord",
            index=models.Index(
                fields=["audit", "analyzer_id", "surfaced"], name="result_audit_idx"
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="analyzerrunrecord",
                    name="audit",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="results",
                        to="audits.auditrun",
                    ),
                ),
                migrations.AlterField(
                    model_name="traceline",
                    name="audit",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="trace_lines",
                        to="audits.auditrun",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(drop_audit_indexes, create_audit_indexes),
            ],
        ),
    ]
