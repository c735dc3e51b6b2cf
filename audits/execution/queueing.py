"""A stored run's analysis queued: `run_audit` on the default or the large lane, as a task row
in the audits' own transaction when the queue is django-tasks-db in the same database. A
failure to queue leaves the run pending for the recovery sweep (audits.execution.recovery).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import router
from django.utils import timezone

from audits.execution.tasks import run_audit
from audits.queues import LARGE_QUEUE
from audits.store.bulk import (
    insert_rows,
)

logger = logging.getLogger(__name__)


def is_large(response: str) -> bool:
    """Whether an audit of this response goes to the large lane (AUDITOR_LARGE_AUDIT_CHARS)."""
    return len(response) >= getattr(settings, "AUDITOR_LARGE_AUDIT_CHARS", 100_000)


def _audit_task(large: bool):
    """`run_audit`, on the `large` queue when the audit is large and the backend has that
    lane (the thread backend does; a queue no worker serves would strand the audit)."""
    from django.tasks import task_backends

    if large and LARGE_QUEUE in task_backends[run_audit.backend].queues:
        return run_audit.using(queue_name=LARGE_QUEUE)
    return run_audit


def queue_shares_transaction(using: str | None) -> bool:
    """True when tasks are rows of django-tasks-db in the database of the run."""
    from django.tasks import task_backends

    try:
        from django_tasks_db.backend import DatabaseBackend
        from django_tasks_db.models import DBTaskResult
    except ImportError:  # pragma: no cover - an optional dependency
        return False
    backend = task_backends[run_audit.backend]
    return isinstance(backend, DatabaseBackend) and router.db_for_write(DBTaskResult) == (
        using or "default"
    )


def insert_queue_rows(queued: list[tuple[Any, bool]]) -> None:
    """django-tasks-db's queue rows of `queued` (`(run_id, large)`), in one INSERT inside
    the audits' transaction; a row carries up to RUNS_PER_ROW runs (`run_audit`'s args).

    Its `enqueue` makes each row with `objects.create()` and then a TaskResult for the
    `task_enqueued` signal (whose only receiver logs at debug level): several times the
    audits' own insert (docs/contributing/performance.md). These are the rows `enqueue`
    makes (the fields of its `_task_to_db_task`, `run_after` as its pre_save handler
    sets it, `enqueued_at` as its `auto_now_add`), without the signal, as plain rows
    (audits.store.bulk: the ORM's `bulk_create` was a sixth of a single submission's CPU)."""
    from django_tasks_db.models import DBTaskResult, get_date_max

    rows: list[tuple[Any, ...]] = []
    enqueued_at = timezone.now()
    for large in (False, True):
        ids = [str(run_id) for run_id, is_big in queued if is_big == large]
        if not ids:
            continue
        task = _audit_task(large)
        backend = task.get_backend()
        backend.validate_task(task)
        constant = (
            task.priority,
            task.module_path,
            task.queue_name,
            task.run_after or get_date_max(),
            backend.alias,
            enqueued_at,
        )
        groups = [[one] for one in ids] if large else row_groups(ids)
        rows.extend(
            (backend._get_id(), {"args": group, "kwargs": {}}, *constant) for group in groups
        )
    insert_rows(DBTaskResult, QUEUE_ROW_COLUMNS, rows)
    logger.debug("%d audits queued in %d rows", len(queued), len(rows))


# Runs of a submitted batch carried by one queue row: a worker claims, analyses and stores
# them together (one claim, one transaction), and several rows let several workers share
# a big batch. Large audits keep a row each (their lane's point is to run alone).
RUNS_PER_ROW = 32


def row_groups(ids: list[str]) -> list[list[str]]:
    """`ids` in the fewest rows of at most RUNS_PER_ROW, of even sizes."""
    rows = -(-len(ids) // RUNS_PER_ROW)
    size = -(-len(ids) // rows) if rows else 0
    return [ids[i : i + size] for i in range(0, len(ids), size)] if size else []


QUEUE_ROW_COLUMNS = (
    "id",
    "args_kwargs",
    "priority",
    "task_path",
    "queue_name",
    "run_after",
    "backend_name",
    "enqueued_at",
)


def enqueue_audit(run_id: Any, *, large: bool = False) -> None:
    """Queue the analysis; a failure leaves the run pending for `recovery.recover_stale_runs`."""
    try:
        _audit_task(large).enqueue(str(run_id))
    except Exception:
        logger.exception("could not enqueue audit %s; it stays pending", run_id)


def enqueue_audits(queued: list[tuple[Any, bool]]) -> None:
    """`enqueue_audit` for several `(run_id, large)`: through the backend's `enqueue_many`
    when it has one (the thread backend: one lock and a thread woken per idle thread,
    not per audit); a failure leaves the runs pending for recovery."""
    for large in (False, True):
        ids = [str(run_id) for run_id, is_big in queued if is_big == large]
        if not ids:
            continue
        task = _audit_task(large)
        enqueue_many = getattr(task.get_backend(), "enqueue_many", None)
        if enqueue_many is None:
            for run_id in ids:
                enqueue_audit(run_id, large=large)
            continue
        try:
            enqueue_many(task, [(run_id,) for run_id in ids])
        except Exception:
            logger.exception("could not enqueue %d audits; they stay pending", len(ids))
