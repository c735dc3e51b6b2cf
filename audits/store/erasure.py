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

Retention: `purge_expired()` erases the audits older than the configuration's
`retention_days`, pausing between batches so that submissions get the write lock in
between; `manage.py purge_audits` runs it, and so does a thread of its own every
`AUDITOR_RETENTION_INTERVAL_S` (`start_retention()`, started with the recovery loop in
every process that runs tasks; a long purge never holds up the loop's heartbeats, and
several processes may purge at once: the deletes are idempotent).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connections, router, transaction
from django.db.models import QuerySet
from django.utils import timezone

from analyzers.config_store import load_config
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
    pause: float = 0.0,
    log_empty: bool = True,
    on_batch: Callable[[float], None] | None = None,
) -> int:
    """Delete `audits` and what derives from them (see the module docstring), log it and
    return the count. `pause`: seconds between two batches (other writers go first);
    `log_empty`: log an erasure that found nothing too; `on_batch(seconds)`: each batch's
    transaction time (the bench)."""
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
            if pause:
                time.sleep(pause)
    finally:
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA secure_delete = OFF")
    if count or log_empty:
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
    if connection.in_atomic_block:  # inside the caller's transaction: its commit comes first
        logger.warning("erasure: no WAL checkpoint inside a transaction; it will run later")
        return False
    with connection.cursor() as cursor:
        for _ in range(attempts):
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            if cursor.fetchone()[0] == 0:
                return True
            time.sleep(0.05)
    logger.warning("erasure: the WAL checkpoint was held up by readers; it will run later")
    return False


def expired(days: int, now: datetime | None = None) -> QuerySet[AuditRun]:
    """The audits created more than `days` days before `now`."""
    return filtered(before=(now or timezone.now()) - timedelta(days=days))


def purge_expired(
    *,
    days: int | None = None,
    actor: str = "retention",
    source: str = "retention",
    pause: float = 0.05,
    on_batch: Callable[[float], None] | None = None,
) -> int:
    """Erase the audits older than `days` (default: the configuration's `retention_days`;
    nothing when that is null); the count. Logged only when it erased something."""
    days = load_config().retention_days if days is None else days
    if days is None:
        return 0
    now = timezone.now()
    return erase(
        expired(days, now),
        actor=actor,
        source=source,
        pause=pause,
        log_empty=False,
        on_batch=on_batch,
        filter={"older_than_days": days, "before": now.isoformat()},
    )


_retention_lock = threading.Lock()
_retention_loop: threading.Thread | None = None
_retention_stop = threading.Event()


def start_retention() -> bool:
    """Start this process's retention thread (once; a no-op when the interval is <= 0)."""
    global _retention_loop
    interval = float(settings.AUDITOR_RETENTION_INTERVAL_S)
    if interval <= 0:
        return False
    with _retention_lock:
        if _retention_loop is not None:
            return False
        _retention_loop = threading.Thread(
            target=_purge_forever, args=(interval,), name="audits-retention", daemon=True
        )
        _retention_loop.start()
    return True


def _purge_forever(interval: float) -> None:
    """Purge, then wait `interval` s, until stopped (the purges log themselves)."""
    stopped = False
    while not stopped:
        try:
            purge_expired()
        except Exception:
            logger.warning("retention purge failed; retrying", exc_info=True)
        connections.close_all()  # this thread's connections only
        stopped = _retention_stop.wait(interval)
