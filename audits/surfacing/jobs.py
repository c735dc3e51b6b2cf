"""Stored surfacing follows the current thresholds.

Every audit records the `SurfacingPolicy` (the global and per-analyzer thresholds) its
results' `surfaced` flags and its `has_card` follow. When an audit is stored, the current
thresholds apply (`apply_current`); when a threshold changes, a `ResurfaceJob` recomputes
the flags of the stored audits from their stored scores, without analysing anything again
(`run_job`, the body of the `audits.surfacing.jobs.resurface` task). Both decide with the engine's
one rule, `analyzers.engine.surfacing` (an audit's own per-request `options` thresholds
still apply to it).

- "Still shows the old surfacing" is a query: complete audits whose policy is not the
  current one (`stale_audits`).
- The job works in batches of `BATCH` audits, each written in one short transaction (set
  updates by primary key), so SQLite readers are never held and writers only briefly.
- A newer job supersedes a running one: the older stops before its next write (checked
  inside the write transaction), and the newer one re-surfaces every audit that does not
  follow its policy, whoever wrote it last. It repeats passes until one finds nothing
  (audits stored meanwhile with older thresholds), at most `MAX_PASSES`.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any

from django.db import connections, router, transaction
from django.db.models import F
from django.tasks import task
from django.utils import timezone

from analyzers.config_store import invalidate_cache
from analyzers.engine.surfacing import Thresholds
from audits.models import AnalyzerRunRecord, AuditRun, ResurfaceJob, SurfacingPolicy
from audits.queues import LARGE_QUEUE
from audits.surfacing.policies import (
    any_stale,
    current_policy,
    latest_job,
    staleness,
    thresholds_of,
)

logger = logging.getLogger(__name__)

BATCH = 2000  # audits per transaction
MAX_PASSES = 5
# A job without progress for this long belongs to a dead process: a new one may start.
STALL_AFTER = timedelta(minutes=2)
UPDATE_CHUNK = 900  # primary keys per UPDATE ... WHERE pk IN (...)


# --- scheduling -----------------------------------------------------------------------------


def schedule(*, force: bool = False) -> ResurfaceJob | None:
    """Start re-surfacing when the current thresholds differ from the latest job's (or,
    with `force`, whenever audits do not follow them and no job is at work). The task
    is enqueued when the transaction commits."""
    policy = current_policy()
    latest = latest_job()
    if latest is not None and latest.policy_id == policy.pk:
        # No threshold changed since the last job.
        at_work = latest.is_active and timezone.now() - latest.updated_at < STALL_AFTER
        if at_work or not force or not any_stale(policy):
            return None
    job = ResurfaceJob.objects.create(policy=policy)
    job_id = job.pk
    transaction.on_commit(lambda: enqueue(job_id))
    return job


def after_store(policy: SurfacingPolicy) -> None:
    """After audits were stored at `policy`: when the latest job aims at other thresholds,
    this process's configuration cache may have been behind; if the thresholds read
    afresh differ too, re-surface (the job picks these audits up)."""
    target = ResurfaceJob.objects.order_by("-id").values_list("policy_id", flat=True).first()
    if target is None or target == policy.pk:
        return
    invalidate_cache()
    if current_policy().pk != policy.pk:
        schedule(force=True)


def enqueue(job_id: int) -> None:
    """Queue the job on the large lane when the backend has one (it may run for seconds)."""
    from django.tasks import task_backends

    task = resurface
    if LARGE_QUEUE in task_backends[resurface.backend].queues:
        task = resurface.using(queue_name=LARGE_QUEUE)
    try:
        task.enqueue(job_id)
    except Exception:
        logger.exception("could not enqueue re-surfacing job %s", job_id)


def thresholds_saved(**kwargs: Any) -> None:
    """post_save/post_delete of the settings that hold thresholds: once the change
    commits, re-surface if the thresholds moved (audits.apps connects it)."""
    if kwargs.get("raw"):
        return
    transaction.on_commit(_after_threshold_commit)


def _after_threshold_commit() -> None:
    try:
        schedule()
    except Exception:
        logger.exception("could not schedule re-surfacing")


def requeue_abandoned(**kwargs: Any) -> int:
    """At recovery start: queue again the active jobs a dead process left behind."""
    stalled = (
        ResurfaceJob.objects.filter(
            status__in=[ResurfaceJob.Status.PENDING, ResurfaceJob.Status.RUNNING],
            updated_at__lt=timezone.now() - STALL_AFTER,
        )
        .order_by("-id")
        .first()
    )
    if stalled is None or ResurfaceJob.objects.filter(pk__gt=stalled.pk).exists():
        return 0
    enqueue(stalled.pk)
    return 1


# --- the job -------------------------------------------------------------------------------


def run_job(job_id: int) -> str:
    """Re-surface every stored audit that does not follow the job's policy. Returns the
    job's final status ("skipped": no such job, or it was over)."""
    job = ResurfaceJob.objects.select_related("policy").filter(pk=job_id).first()
    if job is None or not job.is_active:
        return "skipped"
    policy = job.policy
    now = timezone.now()
    total = staleness(policy).count
    ResurfaceJob.objects.filter(pk=job.pk).update(
        status=ResurfaceJob.Status.RUNNING,
        started_at=now,
        updated_at=now,
        total=total,
        processed=0,
        changed=0,
    )
    thresholds = thresholds_of(policy)
    try:
        for _ in range(MAX_PASSES):
            if not any_stale(policy):
                break
            after = None
            while True:
                rows, after = _stale_batch(policy, after)
                if after is None:
                    break
                if rows and not _resurface_batch(job, policy, thresholds, rows):
                    _finish(job, ResurfaceJob.Status.SUPERSEDED)
                    return ResurfaceJob.Status.SUPERSEDED
    except Exception as exc:
        logger.exception("re-surfacing job %s failed", job.pk)
        _finish(job, ResurfaceJob.Status.FAILED, error=f"{type(exc).__name__}: {exc}")
        return ResurfaceJob.Status.FAILED
    _finish(job, ResurfaceJob.Status.DONE)
    return ResurfaceJob.Status.DONE


def _finish(job: ResurfaceJob, status: str, error: str = "") -> None:
    now = timezone.now()
    ResurfaceJob.objects.filter(pk=job.pk).update(
        status=status, finished_at=now, updated_at=now, error=error[:2000]
    )


def _superseded(job: ResurfaceJob) -> bool:
    return ResurfaceJob.objects.filter(pk__gt=job.pk).exists()


def _stale_batch(
    policy: SurfacingPolicy, after: tuple[Any, Any] | None
) -> tuple[list[tuple[Any, dict, bool]], tuple[Any, Any] | None]:
    """The stale audits among the next `BATCH` audits, newest first (the ones people look
    at first), as (database key, options, has_card); and where the next batch starts
    (None: the end).

    A range scan of the creation-time index, as the list's pages: audits are stored in
    about that order, so one batch's rows, and its writes, sit together on disk.
    Filtering stale rows in SQL would let SQLite sort every audit for every batch. A plain
    cursor: keys stay as the database stores them, without per-value conversions.
    """
    ops = _connection().ops
    q = ops.quote_name
    sql = (
        f"SELECT {q('id')}, {q('created_at')}, {q('status')}, {q(_POLICY_COLUMN)}, "
        f"{q('options')}, {q('has_card')} FROM {q(AuditRun._meta.db_table)}"
    )
    params: list[Any] = []
    if after is not None:
        sql += f" WHERE {q('created_at')} <= %s AND ({q('created_at')} < %s OR {q('id')} < %s)"
        params = [after[0], after[0], after[1]]
    sql += f" ORDER BY {q('created_at')} DESC, {q('id')} DESC LIMIT %s"
    with _connection().cursor() as cursor:
        cursor.execute(sql, [*params, BATCH])
        rows = cursor.fetchall()
    if not rows:
        return [], None
    stale = [
        (key, _options(options), bool(has_card))
        for key, _, status, policy_id, options, has_card in rows
        if status == AuditRun.Status.COMPLETE and policy_id != policy.pk
    ]
    return stale, (rows[-1][1], rows[-1][0])


_POLICY_COLUMN = "surfacing_policy_id"


def _connection():
    return connections[router.db_for_write(AuditRun)]


def _options(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    if not value or value == "{}":
        return {}
    parsed = json.loads(value)
    return parsed if isinstance(parsed, dict) else {}


def _result_rows(audit_keys: list[Any]):
    """(id, audit key, analyzer_id, status, score, should_surface, surfaced) of the results
    of these audits: six rows per audit, read with a plain cursor."""
    q = _connection().ops.quote_name
    with _connection().cursor() as cursor:
        for chunk in _chunks(audit_keys):
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(
                f"SELECT {q('id')}, {q('audit_id')}, {q('analyzer_id')}, {q('status')}, "
                # Integers: no per-value boolean converter on 600,000 rows.
                f"{q('score')}, CAST({q('should_surface')} AS INTEGER), "
                f"CAST({q('surfaced')} AS INTEGER) "
                f"FROM {q(AnalyzerRunRecord._meta.db_table)} WHERE {q('audit_id')} IN ({marks})",
                chunk,
            )
            yield from cursor.fetchall()


def _update(cursor, table: str, sets: dict[str, Any], ids: list[Any]) -> None:
    """UPDATE table SET ... WHERE id IN (ids), in chunks the database accepts."""
    q = _connection().ops.quote_name
    assignments = ", ".join(f"{q(column)} = %s" for column in sets)
    for chunk in _chunks(ids):
        marks = ", ".join(["%s"] * len(chunk))
        cursor.execute(
            f"UPDATE {q(table)} SET {assignments} WHERE {q('id')} IN ({marks})",
            [*sets.values(), *chunk],
        )


def _resurface_batch(
    job: ResurfaceJob,
    policy: SurfacingPolicy,
    thresholds: Thresholds,
    rows: list[tuple[Any, dict, bool]],
) -> bool:
    """Re-surface one batch; False (nothing written) when a newer job exists."""
    own = {key: thresholds.with_options(options) for key, options, _ in rows}
    had = {key: has_card for key, _, has_card in rows}
    card = dict.fromkeys(own, False)
    to_true: list[int] = []
    to_false: list[int] = []
    for pk, key, analyzer_id, status, score, should_surface, old in _result_rows(list(own)):
        new = own[key].surfaced(
            analyzer_id=analyzer_id,
            status=status,
            score=score,
            should_surface=bool(should_surface),
        )
        if new:
            card[key] = True
        if new != bool(old):
            (to_true if new else to_false).append(pk)
    gained = [key for key, has in card.items() if has and not had[key]]
    lost = [key for key, has in card.items() if had[key] and not has]
    same = [key for key, has in card.items() if has == had[key]]
    audits, results = AuditRun._meta.db_table, AnalyzerRunRecord._meta.db_table
    policy_sets = {_POLICY_COLUMN: policy.pk, "threshold": thresholds.default}
    conn = _connection()
    with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
        if _superseded(job):
            return False
        # Only where the card changes is has_card (in three indexes) written.
        _update(cursor, audits, {"has_card": True, **policy_sets}, gained)
        _update(cursor, audits, {"has_card": False, **policy_sets}, lost)
        _update(cursor, audits, policy_sets, same)
        _update(cursor, results, {"surfaced": True}, to_true)
        _update(cursor, results, {"surfaced": False}, to_false)
        ResurfaceJob.objects.filter(pk=job.pk).update(
            processed=F("processed") + len(rows),
            changed=F("changed") + len(gained) + len(lost),
            updated_at=timezone.now(),
        )
    return True


def _chunks(ids: list[Any]):
    for i in range(0, len(ids), UPDATE_CHUNK):
        yield ids[i : i + UPDATE_CHUNK]


# --- the task (defined beside its body: its enqueuers above import nothing upward) ---------


@task()
def resurface(job_id: int) -> str:
    """Re-surface the stored audits at a job's thresholds; see `run_job`."""
    return str(run_job(job_id))
