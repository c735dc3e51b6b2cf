"""An audit's links move from one `LinkCheck` row each to one `AuditLinks` row per audit
(audits.store.link_rows): a JSON array of the contract's link objects, in their old order."""

import json

import django.db.models.deletion
from django.db import migrations, models

FIELDS = ("url", "label", "decision", "reason", "http_status", "healthy")
BATCH = 500  # audits packed per query


def pack(apps, schema_editor):
    db = schema_editor.connection.alias
    LinkCheck = apps.get_model("audits", "LinkCheck")
    AuditLinks = apps.get_model("audits", "AuditLinks")
    audit_ids = (
        LinkCheck.objects.using(db)
        .order_by("audit_id")
        .values_list("audit_id", flat=True)
        .distinct()
    )
    pending = []
    for audit_id in audit_ids.iterator():
        pending.append(audit_id)
        if len(pending) == BATCH:
            _pack(LinkCheck, AuditLinks, db, pending)
            pending = []
    if pending:
        _pack(LinkCheck, AuditLinks, db, pending)


def _pack(LinkCheck, AuditLinks, db, audit_ids):
    tables = {audit_id: [] for audit_id in audit_ids}
    for link in (
        LinkCheck.objects.using(db)
        .filter(audit_id__in=audit_ids)
        .order_by("audit_id", "position", "id")
        .values("audit_id", *FIELDS)
    ):
        tables[link.pop("audit_id")].append(link)
    AuditLinks.objects.using(db).bulk_create(
        AuditLinks(audit_id=audit_id, rows=json.dumps(links, separators=(",", ":")))
        for audit_id, links in tables.items()
    )


def unpack(apps, schema_editor):
    db = schema_editor.connection.alias
    LinkCheck = apps.get_model("audits", "LinkCheck")
    AuditLinks = apps.get_model("audits", "AuditLinks")
    for table in AuditLinks.objects.using(db).iterator(chunk_size=BATCH):
        LinkCheck.objects.using(db).bulk_create(
            LinkCheck(
                audit_id=table.audit_id, position=i, **{name: link.get(name) for name in FIELDS}
            )
            for i, link in enumerate(json.loads(table.rows))
        )


class Migration(migrations.Migration):
    dependencies = [
        ("audits", "0011_trace_lines_without_breaks"),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditLinks",
            fields=[
                (
                    "audit",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="link_table",
                        serialize=False,
                        to="audits.auditrun",
                    ),
                ),
                ("rows", models.TextField()),
            ],
            options={
                "verbose_name": "link table",
            },
        ),
        migrations.RunPython(pack, unpack),
        migrations.DeleteModel(
            name="LinkCheck",
        ),
    ]
