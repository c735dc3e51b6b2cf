"""Nothing left pending: heartbeats of running work, and the sweep that takes over what dead
processes left behind.

- Every process that runs tasks (the server with the thread backend, each `db_worker`)
  beats: every `heartbeat_seconds()` it refreshes `started_at` of the audit runs it is
  executing and of its django-tasks-db task rows. So a `running` row whose `started_at` is
  older than `AUDITOR_RECOVER_RUNNING_AFTER_S` belongs to a process that is gone.
- The sweep (`sweep()`, at start and every `AUDITOR_RECOVERY_INTERVAL` s in those
  processes; conditional UPDATEs, so several processes may sweep at once):
  1. task rows left RUNNING by a dead worker go back to READY, and another worker takes
     them over (FAILED once `MAX_ATTEMPTS` workers claimed them);
  2. runs left running go back to pending (failed after `MAX_ATTEMPTS`);
  3. pending runs that no queue holds (older than `AUDITOR_RECOVER_PENDING_AFTER_S`, or
     created before this process started) are queued again.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import Q
from django.db.models.functions import Length
from django.tasks import task_backends
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone

from audits.execution.execute import MAX_ATTEMPTS
from audits.execution.heartbeats import running_run_ids
from audits.execution.queueing import enqueue_audit
from audits.execution.tasks import run_audit
from audits.models import AuditRun
from audits.signals import recovery_started
from audits.store.erasure import start_retention

logger = logging.getLogger(__name__)

RECOVER_BATCH = 5000  # at most this many pending runs queued again per sweep

_lock = threading.Lock()
_task_rows: Counter[str] = Counter()  # django-tasks-db task rows executing in this process
_loop: threading.Thread | None = None
_stop = threading.Event()
_started_at: datetime | None = None


def heartbeat_seconds() -> float:
    """A quarter of the deadline: three beats may be late before a run is taken over."""
    return max(0.5, settings.AUDITOR_RECOVER_RUNNING_AFTER_S / 4)


# --- what this process is running -------------------------------------------------------


def _task_started(sender, task_result, **kwargs) -> None:
    if _is_database_backend(sender):
        with _lock:
            _task_rows[str(task_result.id)] += 1


def _task_finished(sender, task_result, **kwargs) -> None:
    if _is_database_backend(sender):
        with _lock:
            _task_rows[str(task_result.id)] -= 1
            if _task_rows[str(task_result.id)] <= 0:
                del _task_rows[str(task_result.id)]


def _task_enqueued(sender, task_result, **kwargs) -> None:
    """The thread backend's first enqueue starts this process's sweeper at the backend's
    `SWEEP_INTERVAL` (the backend sends the signal and never imports recovery)."""
    if _loop is not None:
        return
    interval = getattr(task_backends[task_result.backend], "sweep_interval", None)
    if interval is not None:
        start(interval)


def connect_signals() -> None:
    """Track the django-tasks-db task rows this process runs, and start the sweeper with the
    thread backend (called from AppConfig.ready)."""
    task_started.connect(_task_started, dispatch_uid="audits.recovery.task_started")
    task_finished.connect(_task_finished, dispatch_uid="audits.recovery.task_finished")
    task_enqueued.connect(_task_enqueued, dispatch_uid="audits.recovery.task_enqueued")


def _is_database_backend(backend: Any) -> bool:
    try:
        from django_tasks_db.backend import DatabaseBackend
    except ImportError:  # pragma: no cover - an optional dependency
        return False
    cls = backend if isinstance(backend, type) else type(backend)
    return issubclass(cls, DatabaseBackend)


def beat() -> None:
    """Refresh `started_at` of what this process runs (one UPDATE per table at most)."""
    with _lock:
        rows = list(_task_rows)
    runs = running_run_ids()
    now = timezone.now()
    if runs:
        AuditRun.objects.filter(pk__in=runs, status=AuditRun.Status.RUNNING).update(started_at=now)
    if rows:
        from django.tasks.base import TaskResultStatus
        from django_tasks_db.models import DBTaskResult

        DBTaskResult.objects.filter(pk__in=rows, status=TaskResultStatus.RUNNING).update(
            started_at=now
        )


# --- taking over ------------------------------------------------------------------------


def take_over_task_rows(*, stale_after: timedelta, max_attempts: int) -> int:
    """django-tasks-db rows left RUNNING by a dead worker: READY again (or FAILED)."""
    from django.tasks.base import TaskResultStatus

    if not _is_database_backend(task_backends["default"]):
        return 0
    from django_tasks_db.models import DBTaskResult

    now = timezone.now()
    taken = 0
    stale = DBTaskResult.objects.filter(
        status=TaskResultStatus.RUNNING, started_at__lt=now - stale_after
    )
    rows = stale.values_list("pk", "started_at", "worker_ids", "task_path", "args_kwargs")
    for pk, started_at, worker_ids, task_path, args_kwargs in rows[:1000]:
        same = DBTaskResult.objects.filter(
            pk=pk, status=TaskResultStatus.RUNNING, started_at=started_at
        )
        if len(worker_ids or []) >= max_attempts:
            same.update(
                status=TaskResultStatus.FAILED,
                finished_at=now,
                exception_class_path="audits.execution.recovery.WorkerLost",
                traceback=f"{len(worker_ids)} workers stopped while running this task",
            )
        elif same.update(status=TaskResultStatus.READY):
            taken += 1
            if task_path == run_audit.module_path and (args_kwargs or {}).get("args"):
                _release_runs_of_dead_row(args_kwargs["args"], stale_after, now, max_attempts)
    return taken


def _release_runs_of_dead_row(
    run_ids: list[str], stale_after: timedelta, now: datetime, max_attempts: int
) -> None:
    """The runs a dead task row carried go back to pending with the row, so the worker that
    takes the row over runs them (instead of finding it `running` and a later sweep queueing
    it again with a second row).

    The dead worker claimed the run just after the row, so before its first beat the run may
    look a little younger than the row. A run three beats old is not held by a live process
    (each beats every `heartbeat_seconds()`, a quarter of `stale_after`). A run out of
    attempts stays for `recover_stale_runs` to fail."""
    AuditRun.objects.filter(
        pk__in=run_ids,
        status=AuditRun.Status.RUNNING,
        attempts__lt=max_attempts,
        started_at__lt=now - stale_after + timedelta(seconds=heartbeat_seconds()),
    ).update(status=AuditRun.Status.PENDING)


def queued_run_ids() -> set[str] | None:
    """Runs a queue holds (queued or running tasks), or None when that cannot be known."""

    backend = task_backends[run_audit.backend]
    if hasattr(backend, "queued_args"):
        return {str(one) for args in backend.queued_args(run_audit.module_path) for one in args}
    if _is_database_backend(backend):
        from django.tasks.base import TaskResultStatus
        from django_tasks_db.models import DBTaskResult

        rows = DBTaskResult.objects.filter(
            task_path=run_audit.module_path,
            status__in=[TaskResultStatus.READY, TaskResultStatus.RUNNING],
        ).values_list("args_kwargs", flat=True)
        return {str(one) for a in rows for one in a.get("args") or ()}
    return set()  # immediate: nothing waits in a queue


def sweep(*, at_start: bool = False) -> dict[str, int]:
    """One pass of the three steps of the module docstring, with the configured deadlines.

    `at_start` also re-queues alert deliveries a dead process left pending (once per
    process: a delivery has no heartbeat, so only its age says it was lost).
    """

    stale_after = timedelta(seconds=settings.AUDITOR_RECOVER_RUNNING_AFTER_S)
    tasks = take_over_task_rows(stale_after=stale_after, max_attempts=MAX_ATTEMPTS)
    outcome = recover_stale_runs(
        stale_after=stale_after,
        pending_after=timedelta(seconds=settings.AUDITOR_RECOVER_PENDING_AFTER_S),
        pending_before=_started_at,
    )
    outcome["task_rows_taken_over"] = tasks
    if at_start:
        for receiver, requeued in recovery_started.send_robust(sender=None):
            if isinstance(requeued, int):
                outcome[f"{receiver.__module__}.requeued"] = requeued
    if any(outcome.values()):
        logger.warning("recovery: %s", outcome)
    return outcome


# --- the loop ---------------------------------------------------------------------------


def start(interval: float | None = None) -> bool:
    """Start this process's heartbeat and sweep thread (once; a no-op when interval <= 0)."""
    global _loop, _started_at
    interval = settings.AUDITOR_RECOVERY_INTERVAL if interval is None else interval
    if interval <= 0:
        return False
    with _lock:
        if _loop is not None:
            return False
        _started_at = timezone.now()
        _loop = threading.Thread(
            target=_forever, args=(float(interval),), name="audits-recovery", daemon=True
        )
        _loop.start()
    start_retention()  # the other periodic upkeep: audits past `retention_days` erased
    return True


def _forever(interval: float) -> None:
    beat_every = min(heartbeat_seconds(), interval)
    next_sweep = 0.0  # at once: what the previous process left is taken over now
    clock = 0.0
    while True:
        try:
            beat()
            if clock >= next_sweep:
                sweep(at_start=next_sweep == 0.0)
                next_sweep = clock + interval
        except Exception:
            logger.warning("audit recovery failed; retrying", exc_info=True)
        finally:
            connections.close_all()  # this thread's connections only
        if _stop.wait(beat_every):
            return
        clock += beat_every


def recover_stale_runs(
    *,
    stale_after: timedelta | None = None,
    pending_after: timedelta | None = None,
    pending_before: datetime | None = None,
    max_attempts: int = MAX_ATTEMPTS,
    enqueue: bool = True,
) -> dict[str, int]:
    """Re-queue runs a dead worker left `running`, and `pending` runs that no queue holds.

    A running run is dead when its `started_at` (kept fresh by the heartbeat of the process
    running it, see audits.execution.recovery) is older than `stale_after`; one that already used
    `max_attempts` is marked failed instead. A pending run is queued again when it is older
    than `pending_after` or was created before `pending_before` (the start of this process)
    and no queue holds it. Deadlines default to the settings `AUDITOR_RECOVER_*`. Safe to run
    from several processes at once: every state change is a conditional UPDATE, and a run
    queued twice is audited once (`execute_run` claims it).
    """
    if stale_after is None:
        stale_after = timedelta(seconds=settings.AUDITOR_RECOVER_RUNNING_AFTER_S)
    if pending_after is None:
        pending_after = timedelta(seconds=settings.AUDITOR_RECOVER_PENDING_AFTER_S)
    now = timezone.now()
    requeued, failed = [], 0
    stale = AuditRun.objects.filter(
        status=AuditRun.Status.RUNNING, started_at__lt=now - stale_after
    )
    for run_id, attempts, started_at in stale.values_list("pk", "attempts", "started_at"):
        same = AuditRun.objects.filter(
            pk=run_id, status=AuditRun.Status.RUNNING, started_at=started_at
        )
        if attempts >= max_attempts:
            if same.update(
                status=AuditRun.Status.FAILED,
                finished_at=now,
                error=f"the worker stopped during the run; gave up after {attempts} attempts",
            ):
                failed += 1
        elif same.update(
            status=AuditRun.Status.PENDING,
            # Never claimed: a stream whose server went away (its heartbeat stopped). What
            # arrived is audited, marked incomplete.
            **({"incomplete": True} if attempts == 0 else {}),
        ):
            requeued.append(run_id)
    old = Q(created_at__lt=now - pending_after)
    if pending_before is not None:
        old |= Q(created_at__lt=pending_before)
    pending = list(
        AuditRun.objects.filter(old, status=AuditRun.Status.PENDING)
        .exclude(pk__in=requeued)
        .order_by("created_at")
        .values_list("pk", flat=True)[:RECOVER_BATCH]
    )
    if pending or requeued:
        queued = queued_run_ids() or set()
        requeued_unqueued = [r for r in requeued if str(r) not in queued]
        pending = [r for r in pending if str(r) not in queued]
    else:
        requeued_unqueued = []
    if enqueue:
        again = [*requeued_unqueued, *pending]
        large = (
            set(
                AuditRun.objects.filter(pk__in=again)
                .annotate(chars=Length("response"))
                .filter(chars__gte=settings.AUDITOR_LARGE_AUDIT_CHARS)
                .values_list("pk", flat=True)
            )
            if again
            else set()
        )
        for run_id in again:
            enqueue_audit(run_id, large=run_id in large)  # large ones keep their own lane
    return {"requeued": len(requeued), "failed": failed, "pending_requeued": len(pending)}
