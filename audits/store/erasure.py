"""Erasure: audits and every row derived from them, gone for good, a batch at a time.

`erase(audits, ...)` deletes the audits of a queryset in batches of `BATCH` ids, each in
its own short transaction (so a purge of many never holds the write lock long): every
row of a model with a foreign key to the audit (results, annotations, kind counts, trace
lines, links, reviews and verdicts, alert deliveries, shadow results, and any added later:
they are found from the model's relations), the duplicate-output records its family
first produced, then the audits; a re-run of an erased audit stays, unlinked. On SQLite
the erasing connection has `secure_delete` on (deleted content overwritten with zeros)
and the WAL is checkpointed (TRUNCATE) after, so no byte of it stays in the files. On
PostgreSQL, `VACUUM` reclaims the dead rows (docs/operations/privacy.md).
Each erasure is logged (`DeletionLog`: who, when, the filter, the count; no content).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.db import connections, router, transaction
from django.db.models import QuerySet

from audits.models import AuditRun, CollisionDigest, DeletionLog

logger = logging.getLogger(__name__)

BATCH = 500  # audits per transaction


def filtered(
    *,
    ids: Iterable[Any] | None = None,
    external_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    before: datetime | None = None,
    api_key: Any = None,
) -> QuerySet[AuditRun]:
    """The audits a filter names (all the given criteria at once)."""
    audits = AuditRun.objects.all()
    if ids is not None:
        audits = audits.filter(pk__in=list(ids))
    if external_id is not None:
        audits = audits.filter(external_id=external_id)
    if api_key is not None:
        audits = audits.filter(api_key=api_key)
    for key, value in (metadata or {}).items():
        audits = audits.filter(**{f"metadata__{key}": value})
    if before is not None:
        audits = audits.filter(created_at__lt=before)
    return audits


def erase(
    audits: QuerySet[AuditRun],
    *,
    actor: str,
    source: str,
    filter: dict[str, Any],
    batch: int = BATCH,
    on_batch: Callable[[float], None] | None = None,
) -> int:
    """Delete `audits` and what derives from them (see the module docstring), log it and
    return the count. `on_batch(seconds)`: each batch's transaction time (the bench)."""
    db = router.db_for_write(AuditRun)
    connection = connections[db]
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA secure_delete = ON")
    count = 0
    try:
        while True:
            ids = list(audits.order_by().values_list("pk", flat=True)[:batch])
            if not ids:
                break
            started = time.perf_counter()
            with transaction.atomic(using=db):
                count += _erase_ids(db, ids)
            if on_batch is not None:
                on_batch(time.perf_counter() - started)
    finally:
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA secure_delete = OFF")
    DeletionLog.objects.using(db).create(
        actor=actor[:200], source=source[:20], filter=filter, count=count
    )
    if count:
        checkpoint(db)
    return count


def _erase_ids(db: str, ids: list[Any]) -> int:
    """One batch, inside the caller's transaction: the dependent rows, then the audits."""
    connection = connections[db]
    quote = connection.ops.quote_name
    values = [AuditRun._meta.pk.get_db_prep_value(i, connection) for i in ids]
    marks = ", ".join(["%s"] * len(values))
    with connection.cursor() as cursor:
        for relation in AuditRun._meta.related_objects:
            if relation.many_to_many:
                continue
            model, column = relation.related_model, relation.field.column
            table = quote(model._meta.db_table)
            if model is AuditRun:  # a re-run of an erased audit: kept, unlinked
                cursor.execute(
                    f"UPDATE {table} SET {quote(column)} = NULL WHERE {quote(column)} IN ({marks})",
                    values,
                )
            else:
                cursor.execute(f"DELETE FROM {table} WHERE {quote(column)} IN ({marks})", values)
        digests = quote(CollisionDigest._meta.db_table)
        cursor.execute(
            f"DELETE FROM {digests} WHERE {quote('first_family')} IN ({marks})",
            [str(i) for i in ids],
        )
        cursor.execute(
            f"DELETE FROM {quote(AuditRun._meta.db_table)} WHERE {quote('id')} IN ({marks})",
            values,
        )
        return cursor.rowcount


def checkpoint(db: str, attempts: int = 20) -> bool:
    """SQLite: copy the WAL into the database and truncate it (retried while readers hold
    it up), so deleted content leaves the WAL file. True when done (or not SQLite)."""
    connection = connections[db]
    if connection.vendor != "sqlite":
        return True
    with connection.cursor() as cursor:
        for _ in range(attempts):
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if cursor.fetchone()[0] == 0:
                return True
            time.sleep(0.05)
    logger.warning("erasure: the WAL checkpoint was held up by readers; it will run later")
    return False
