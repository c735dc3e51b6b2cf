"""Results and annotations carry their audit's created_at, with covering indexes (and one
on AuditRun), so the trends page aggregates with index range scans instead of joins."""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def fill_audit_created_at(apps, schema_editor):
    AuditRun = apps.get_model("audits", "AuditRun")
    created = AuditRun.objects.filter(pk=OuterRef("audit_id")).values("created_at")[:1]
    for name in ("AnalyzerRunRecord", "Annotation"):
        apps.get_model("audits", name).objects.update(audit_created_at=Subquery(created))


class Migration(migrations.Migration):
    dependencies = [
        ("audits", "0003_alerts"),
    ]

    operations = [
        migrations.AddField(
            model_name="analyzerrunrecord",
            name="audit_created_at",
            field=models.DateTimeField(editable=False, null=True),
        ),
        migrations.AddField(
            model_name="annotation",
            name="audit_created_at",
            field=models.DateTimeField(editable=False, null=True),
        ),
        migrations.RunPython(fill_audit_created_at, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name="analyzerrunrecord",
            name="audit_created_at",
            field=models.DateTimeField(editable=False),
        ),
        migrations.AlterField(
            model_name="annotation",
            name="audit_created_at",
            field=models.DateTimeField(editable=False),
        ),
        migrations.AddIndex(
            model_name="auditrun",
            index=models.Index(
                fields=["created_at", "status", "has_card", "overall_score"],
                name="audit_trends_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="analyzerrunrecord",
            index=models.Index(
                fields=["audit_created_at", "analyzer_id", "status", "surfaced", "duration_ms"],
                name="result_trends_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="annotation",
            index=models.Index(
                fields=["audit_created_at", "type", "severity"], name="annotation_trends_idx"
            ),
        ),
    ]
