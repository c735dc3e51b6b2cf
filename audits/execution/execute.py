"""A pending run becomes a stored report: claimed (one worker wins), analysed by the engine
on this thread's loop, surfaced at the current thresholds (audits.surfacing) and written
(audits.store.reports); then its final event and `audit_finished`.

- `execute_run(run_id)` / `execute_runs(run_ids)` are the task bodies (audits.execution.tasks).
- `store_report(s)` surface and store reports (also used by the demo data).
- Runs a dead worker left behind are re-queued by `audits.execution.recovery`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
from typing import Any

from django.conf import settings
from django.db import connections, router, transaction
from django.db.models import F
from django.utils import timezone

from analyzers.config_store import config_version, current_registry, load_config
from analyzers.engine.auditor import Auditor
from analyzers.engine.builtin.redflag import content_digest
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AuditInput, AuditReport
from analyzers.engine.linkcheck import LinkChecker
from analyzers.policy import audit_services
from audits.events import (
    apublish,
    capturing,
    publish_many,
    watched_audits,
)
from audits.execution import heap, people_first, workers
from audits.execution.heartbeats import running_run
from audits.models import (
    AuditRun,
    TraceLine,
)
from audits.signals import send_finished_signal
from audits.store import reports
from audits.store.collisions import CollisionBatch, DatabaseCollisionStore
from audits.store.reports import mark_failed
from audits.surfacing.jobs import after_store
from audits.surfacing.policies import apply_current, current_policy

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3


# --- running ----------------------------------------------------------------------------


def _claim(run_id: Any) -> bool:
    """Atomically move a pending run to running (only one worker wins)."""
    return bool(
        AuditRun.objects.filter(pk=run_id, status=AuditRun.Status.PENDING).update(
            status=AuditRun.Status.RUNNING,
            started_at=timezone.now(),
            attempts=F("attempts") + 1,
            error="",
        )
    )


def _progress_callback(audit_id: str):
    async def progress(event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "analyzer_started":
            await apublish(
                {
                    "type": "analyzer_started",
                    "audit_id": audit_id,
                    "analyzer_id": event.get("analyzer_id"),
                }
            )
        elif kind == "analyzer_finished":
            run = event.get("run")
            await apublish(
                {
                    "type": "analyzer_finished",
                    "audit_id": audit_id,
                    "analyzer_id": event.get("analyzer_id"),
                    "status": getattr(run, "status", None),
                    "score": getattr(run, "score", None),
                    "surfaced": getattr(run, "surfaced", None),
                    "duration_ms": getattr(run, "duration_ms", None),
                }
            )

    return progress


@functools.cache
def shared_link_checker(allow_private_networks: bool) -> LinkChecker:
    """One link checker per process, so its health cache serves every audit."""
    return LinkChecker(allow_private_networks=allow_private_networks)


def build_auditor(config):
    """An engine Auditor for `config` with the database collision store and services."""

    services = {
        "link_checker": shared_link_checker(settings.AUDITOR_ALLOW_PRIVATE_NETWORKS),
        **audit_services(),  # the operator's limits: model key/URL, validator modules
    }
    return Auditor(
        config,
        current_registry(),
        collision_store=DatabaseCollisionStore(),
        services=services,
    )


# Run id -> what the engine's analyzers share, computed already (execute_run's `memo`).
_MEMOS: dict[str, dict[str, Any]] = {}


def execute_run(run_id: Any, memo: dict[str, Any] | None = None) -> str:
    """The body of the `run_audit` task. Returns the final status (or why it did nothing).
    `memo`: given to the engine for this run (a stream's pipeline result, for one)."""
    if not _claim(run_id):
        return "skipped"
    if memo:
        _MEMOS[str(run_id)] = memo
    try:
        with running_run(run_id):  # its heartbeat tells recovery this process is alive
            return _execute_claimed(run_id)
    finally:
        _MEMOS.pop(str(run_id), None)


def _auditor_for(run: AuditRun):
    """This worker thread's Auditor for the run's configuration snapshot (built once per
    snapshot, configuration version and registry: see audits.execution.workers)."""

    snapshot = dict(run.config_snapshot or {})
    snapshot.pop("custom_judges", None)
    key = (
        workers.snapshot_text(snapshot),
        config_version(),
        id(current_registry()),
        settings.AUDITOR_ALLOW_PRIVATE_NETWORKS,
        tuple(sorted(audit_services().items())),  # the operator's limits (analyzers.policy)
        build_auditor,  # replaced in tests
    )

    def build():
        return build_auditor(AuditorConfig.model_validate(snapshot) if snapshot else load_config())

    return workers.cached_auditor(key, build)


MAX_RERUN_DEPTH = 1000  # bounded walk up a chain of re-runs


def collision_family(run: AuditRun) -> str:
    """The original audit of `run`'s chain of re-runs (itself when it is no re-run):
    duplicate detection leaves out the outputs of its own family."""
    root, parent = run.pk, run.rerun_of_id
    for _ in range(MAX_RERUN_DEPTH):
        if parent is None:
            break
        root = parent
        parent = AuditRun.objects.filter(pk=parent).values_list("rerun_of_id", flat=True).first()
    return str(root)


def _audit(run: AuditRun, collisions: CollisionBatch | None = None) -> AuditReport:
    """The engine's report on `run`, on this worker thread's engine loop (its duplicate
    checks answered by `collisions` when given)."""
    return workers.run_engine(_engine_call(run, collisions))


def _engine_call(
    run: AuditRun, collisions: CollisionBatch | None = None, watched: bool | None = None
):
    """A function returning the engine's coroutine auditing `run` (built in this thread:
    the auditor, the input and the collision family). `watched`: whether someone sees its
    progress (asked here when not given)."""
    auditor = _auditor_for(run)
    family = collision_family(run)
    audit = AuditInput(
        user_input=run.user_input,
        response=run.response,
        sources=run.sources,
        metadata=run.metadata,
    )

    audit_id = str(run.pk)
    memo = _MEMOS.pop(audit_id, None)
    if watched is None:
        watched = audit_id in watched_audits([audit_id])

    def make():
        coro = auditor.audit(
            audit,
            options=run.options or None,
            collision_key=run.collision_key,
            collision_family=family,
            # (nobody to see the analyzers' progress: no events made for it)
            progress=_progress_callback(audit_id) if watched else None,
            memo=memo,
        )
        return coro if collisions is None else collisions.run(run.pk, coro)

    return make


def _collision_batch(runs: list[AuditRun]) -> CollisionBatch | None:
    """The runs' duplicate-output questions, read in one query (audits.store.collisions): the
    red-flag analyzer asks about the digest of the response in the collision scope (the
    collision key, else the input); a question asked otherwise goes to the database."""
    if not runs or not CollisionBatch.supported():
        return None
    return CollisionBatch(
        (
            run.user_input if run.collision_key is None else run.collision_key,
            content_digest(run.response),
        )
        for run in runs
    )


def _execute_claimed(run_id: Any) -> str:
    run = AuditRun.objects.get(pk=run_id)
    done = _analyse_and_store([run], {})
    if not done:
        return AuditRun.Status.FAILED
    run, report = done[0]
    if run.status == AuditRun.Status.COMPLETE:
        _finished([(run, report)])
    return run.status


def _analyse(
    runs: list[AuditRun],
    outcome: dict[str, str],
    collisions: CollisionBatch | None,
    *,
    announce: bool = True,
) -> list[tuple[AuditRun, AuditReport]]:
    """The engine's reports on `runs`, one after another in one trip to this thread's
    engine loop (a trip per audit cost more than the duplicate checks it saved: each hands
    the GIL to the loop's thread and back). A run whose analysis raises is marked failed."""
    calls = []
    watched = watched_audits([str(run.pk) for run in runs])  # one question for the batch
    if announce:
        publish_many(
            [{"type": "audit_started", "audit_id": str(r.pk), "attempt": r.attempts} for r in runs]
        )
    for run in runs:
        try:
            calls.append((run, _engine_call(run, collisions, str(run.pk) in watched)))
        except Exception as exc:
            _analysis_failed(run, exc, outcome)

    async def each() -> list[Any]:
        results: list[Any] = []
        for _, make in calls:
            await people_first.make_way()
            try:
                results.append(await make())
            except Exception as exc:  # this audit fails alone
                results.append(exc)
        return results

    done: list[tuple[AuditRun, AuditReport]] = []
    for (run, _), result in zip(calls, workers.run_engine(each) if calls else [], strict=True):
        if isinstance(result, Exception):
            _analysis_failed(run, result, outcome)
        else:
            done.append((run, result))
    return done


def _analysis_failed(run: AuditRun, exc: Exception, outcome: dict[str, str]) -> None:
    logger.error("audit %s failed", run.pk, exc_info=exc)
    mark_failed(run.pk, f"{type(exc).__name__}: {exc}")
    outcome[str(run.pk)] = AuditRun.Status.FAILED


def _analyse_and_store(
    runs: list[AuditRun], outcome: dict[str, str]
) -> list[tuple[AuditRun, AuditReport]]:
    """Analyse `runs` with their duplicate checks batched and store the reports in one
    transaction. When that transaction fails (a bad report, or CollisionRace: another
    process recorded a digest meanwhile), nothing of it is kept: the runs are analysed
    again asking one question at a time, and stored together or, failing that, alone."""
    collisions = _collision_batch(runs)
    done = _analyse(runs, outcome, collisions)
    if collisions is not None:
        try:
            store_reports(
                done, fresh=_nothing_stored([run for run, _ in done]), collisions=collisions
            )
            return done
        except Exception:
            logger.warning(
                "storing %d reports with their batched duplicate checks failed; "
                "analysing them again",
                len(done),
                exc_info=True,
            )
            done = _analyse([run for run, _ in done], outcome, None, announce=False)
    try:
        store_reports(done, fresh=_nothing_stored([run for run, _ in done]))
    except Exception:
        # One bad report must not fail the others: store them one by one.
        logger.warning("storing %d reports at once failed; one by one", len(done), exc_info=True)
        for run, report in done:
            try:
                store_report(run, report, fresh=_nothing_stored([run]))
            except Exception as exc:
                logger.exception("audit %s failed", run.pk)
                mark_failed(run.pk, f"{type(exc).__name__}: {exc}")
                run.status = AuditRun.Status.FAILED
    return done


def _finished(done: list[tuple[AuditRun, AuditReport]]) -> None:
    """The complete runs' final events, then their signals."""
    # One event per state change: the trace lines and the card travel with the final
    # event (pages read them from the database once they get it); nothing is read back.
    publish_many(
        [
            {
                "type": "audit_finished",
                "audit_id": str(run.pk),
                "status": run.status,
                "overall_score": run.overall_score,
                "has_card": run.has_card,
                "trace_lines": len(report.trace),
            }
            for run, report in done
        ]
    )
    if not capturing():  # an analysis process: its parent sends the signal with the event
        for run, _ in done:
            send_finished_signal(str(run.pk))


def _nothing_stored(runs: list[AuditRun]) -> bool:
    """True when no child rows of these runs can exist, so storing needs no deletes: first
    attempts (claims count them) and no trace lines (a stream writes them as it goes;
    known from the claim when it returned the rows, see `_claim_returning`)."""
    if any(run.attempts > 1 for run in runs):
        return False
    known = [getattr(run, "had_trace_lines", None) for run in runs]
    if None not in known:
        return not any(known)
    return not TraceLine.objects.filter(audit__in=runs).exists()


def _claim_many(run_ids: list[Any]) -> list[AuditRun]:
    """Move the pending runs among `run_ids` to running in one transaction; those runs, as
    stored now, newest first (the order of AuditRun's listing, the order they are analysed
    in: the first of two equal outputs is the one not flagged as a duplicate)."""
    using = router.db_for_write(AuditRun)
    if connections[using].vendor == "sqlite":
        return _claim_returning(run_ids, using)
    with transaction.atomic(using=using):
        # The status is checked here, not in SQL: with `status = ?` beside the ids, SQLite's
        # planner walks the status index (every pending run of a deep queue) instead of
        # seeking the ids.
        rows = AuditRun.objects.filter(pk__in=run_ids).order_by()
        if _supports_row_locks():
            rows = rows.select_for_update(skip_locked=True)
        pending = AuditRun.Status.PENDING
        claimed = [pk for pk, status in rows.values_list("pk", "status") if status == pending]
        AuditRun.objects.filter(pk__in=claimed).update(
            status=AuditRun.Status.RUNNING,
            started_at=timezone.now(),
            attempts=F("attempts") + 1,
            error="",
        )
    return list(AuditRun.objects.filter(pk__in=claimed)) if claimed else []


def _claim_returning(run_ids: list[Any], using: str) -> list[AuditRun]:
    """`_claim_many` on SQLite: one UPDATE … RETURNING claims the runs and reads them back
    with whether each has trace lines already (`_nothing_stored`); it was four statements
    per batch (the statuses read, the UPDATE, the runs read, an EXISTS for trace lines).
    `+status` keeps the planner on the ids: `status = ?` would take the status index and
    walk every pending run of a deep queue."""
    connection = connections[using]
    quote = connection.ops.quote_name
    table = quote(AuditRun._meta.db_table)
    pk = AuditRun._meta.pk
    columns = ", ".join(quote(field.column) for field in AuditRun._meta.concrete_fields)
    trace_lines = (
        f"EXISTS (SELECT 1 FROM {quote(TraceLine._meta.db_table)} WHERE "
        f"{quote(TraceLine._meta.get_field('audit').column)} = "
        f"{table}.{quote(pk.column)})"
    )
    runs: list[AuditRun] = []
    for ids in itertools.batched(run_ids, 500):
        chunk = [pk.get_db_prep_value(pk.to_python(i), connection) for i in ids]
        sql = (
            f"UPDATE {table} SET status = %s, started_at = %s, attempts = attempts + 1, "
            f"error = '' WHERE {quote(pk.column)} IN ({', '.join(['%s'] * len(chunk))}) "
            f"AND +status = %s RETURNING {columns}, {trace_lines} AS had_trace_lines"
        )
        params = [
            AuditRun.Status.RUNNING,
            connection.ops.adapt_datetimefield_value(timezone.now()),
            *chunk,
            AuditRun.Status.PENDING,
        ]
        with transaction.atomic(using=using):
            runs += AuditRun.objects.using(using).raw(sql, params)
    runs.sort(key=lambda run: (run.created_at, run.pk), reverse=True)
    return runs


def _supports_row_locks() -> bool:
    from django.db import connection

    return connection.features.has_select_for_update_skip_locked


def execute_runs(run_ids: list[Any]) -> dict[str, str]:
    """`execute_run` for several runs (a worker taking a deep queue in small batches):
    one claim (which reads the runs), and the reports stored in one transaction. Returns
    each id's final status ("skipped": another worker had it).

    The collector stays off until the batch's runs and reports are freed (by their
    reference counts): a collection at its end would walk them all first."""
    if len(run_ids) == 1:
        return {str(run_ids[0]): execute_run(run_ids[0])}
    runs = _claim_many(run_ids)
    outcome = {str(run_id): "skipped" for run_id in run_ids}
    if not runs:
        return outcome
    with heap.batch_without_collections():
        _execute_batch(runs, outcome)
        del runs
    return outcome


def _execute_batch(runs: list[AuditRun], outcome: dict[str, str]) -> None:
    with contextlib.ExitStack() as stack:
        for run in runs:
            stack.enter_context(running_run(run.pk))
        done = _analyse_and_store(runs, outcome)
    for run, _ in done:
        outcome[str(run.pk)] = run.status
    _finished([(run, report) for run, report in done if run.status == AuditRun.Status.COMPLETE])


def store_report(run: AuditRun, report: AuditReport, *, fresh: bool = False) -> AuditRun:
    """Write the engine's report to `run` and its child rows, in one transaction.

    `fresh`: the caller knows no rows of an earlier attempt exist (nothing to delete).
    """
    store_reports([(run, report)], fresh=fresh)
    return run


def store_reports(
    pairs: list[tuple[AuditRun, AuditReport]],
    *,
    fresh: bool = False,
    collisions: CollisionBatch | None = None,
) -> None:
    """`store_report` for several runs, written by `audits.store.reports.write_reports`
    (one statement per table, in chunks, with the digests of their duplicate checks).

    Surfacing follows the thresholds current now (audits.surfacing), which may be newer
    than the configuration snapshot the engine ran with."""
    if not pairs:
        return
    policy = current_policy()
    surfaced = {run.pk: apply_current(run, report.results, policy) for run, report in pairs}
    reports.write_reports(pairs, surfaced, fresh=fresh, collisions=collisions)
    after_store(policy)
