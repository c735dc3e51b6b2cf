"""Writes of the audits app (HackSoft style: keyword-only functions, one transaction each).

- `submit_audit(...)` stores a run, then enqueues `audits.tasks.run_audit` on commit.
- `execute_run(run_id)` (the task body) claims the run, audits it, stores the report.
- `rerun_audit(run)` submits a copy with the current configuration.
- Runs a dead worker left behind are re-queued by `audits.recovery.recover_stale_runs()`.
- `publish(event)` is the one way progress events leave the pipeline (see audits.events).
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import functools
import hashlib
import itertools
import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connections, router, transaction
from django.db.models import F
from django.utils import timezone

from analyzers import lock_wait
from analyzers.engine.contract import AuditInput, AuditReport, Source
from analyzers.engine.linkcheck import LinkChecker
from analyzers.engine.redflag import content_digest

from . import heap, link_rows, people_first, workers
from .bulk import (
    Statement,
    converter,
    db_value,
    insert_rows,
    prepare_insert,
    row_group,
    run_statement,
)
from .collisions import CollisionBatch
from .events import ALL_AUDITS_GROUP, apublish, audit_watched, capturing, has_watchers, publish
from .heartbeats import running_run
from .models import (
    AnalyzerRunRecord,
    Annotation,
    AnnotationKind,
    AuditLinks,
    AuditRun,
    TraceLine,
)
from .queues import LARGE_QUEUE
from .scoring import top_result
from .signals import audit_finished
from .trace_rows import packed

__all__ = [
    "ExternalIdConflict",
    "MAX_ATTEMPTS",
    "apublish",
    "enqueue_audit",
    "enqueue_audits",
    "execute_run",
    "execute_runs",
    "mark_failed",
    "publish",
    "request_fingerprint",
    "rerun_audit",
    "store_report",
    "submit_audit",
    "submit_audits",
    "submit_audits_once",
]

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3


class ExternalIdConflict(Exception):
    """The external_id is already used by this key with a different request body."""

    def __init__(self, existing: AuditRun):
        self.existing = existing
        super().__init__(f"external_id {existing.external_id!r} was used with a different body")


def request_fingerprint(
    *,
    user_input: str,
    response: str,
    sources: list[dict[str, Any]],
    metadata: dict[str, Any],
    collision_key: str | None,
    options: dict[str, Any],
) -> str:
    """SHA-256 of the canonical request body (what makes two submissions "the same")."""
    body = {
        "user_input": user_input,
        "response": response,
        "sources": sources,
        "metadata": metadata,
        "collision_key": collision_key,
        "options": options,
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _stored_fingerprint(external_id: str | None, **body: Any) -> str:
    """The `request_hash` to store: the body's `request_fingerprint` for an audit with an
    `external_id`, "" without one (only a retry with the same external_id compares it)."""
    return "" if external_id is None else request_fingerprint(**body)


def _existing_or_conflict(
    *, api_key: Any, external_id: str, fingerprint: str
) -> AuditRun | None:
    existing = AuditRun.objects.filter(api_key=api_key, external_id=external_id).first()
    if existing is not None and existing.request_hash != fingerprint:
        raise ExternalIdConflict(existing)
    return existing


def submit_audit(
    *,
    user_input: str,
    response: str,
    sources: list[dict[str, Any]] | None = None,
    metadata: dict[str, Any] | None = None,
    external_id: str | None = None,
    collision_key: str | None = None,
    options: dict[str, Any] | None = None,
    api_key: Any = None,
    incomplete: bool = False,
    rerun_of: AuditRun | None = None,
    enqueue: bool = True,
) -> AuditRun:
    """Store a pending run (one transaction) and enqueue its analysis on commit.

    With an `external_id`, the same key and body return the stored run (`was_created` is
    False); another body raises ExternalIdConflict. Concurrent duplicates are resolved by
    the unique constraint.
    """
    from analyzers.config_store import load_config_with_snapshot

    sources = [Source.model_validate(s).model_dump() for s in sources or []]
    metadata = dict(metadata or {})
    options = dict(options or {})
    fingerprint = _stored_fingerprint(
        external_id, user_input=user_input, response=response, sources=sources,
        metadata=metadata, collision_key=collision_key, options=options,
    )
    if external_id is not None:
        existing = _existing_or_conflict(
            api_key=api_key, external_id=external_id, fingerprint=fingerprint
        )
        if existing is not None:
            existing.was_created = False
            return existing

    config, snapshot = load_config_with_snapshot()
    run = AuditRun(
        api_key=api_key,
        external_id=external_id,
        request_hash=fingerprint,
        user_input=user_input,
        response=response,
        cleaned_response="",
        sources=sources,
        metadata=metadata,
        collision_key=collision_key,
        options=options,
        threshold=config.threshold,
        config_snapshot=snapshot,
        incomplete=incomplete,
        rerun_of=rerun_of,
    )
    insert = _runs_insert([run])
    try:
        with transaction.atomic():
            _insert_runs([run], insert)
            if enqueue:
                run_id, large = run.pk, is_large(response)
                transaction.on_commit(lambda: announce([run_id]))
                if _queue_shares_transaction(run._state.db):
                    # A database queue in the same database: the task row commits with
                    # the run (one write transaction, and never one without the other).
                    _insert_queue_rows([(run_id, large)])
                else:
                    transaction.on_commit(lambda: _after_submit(run_id, large))
    except IntegrityError:
        if external_id is None:
            raise
        existing = _existing_or_conflict(
            api_key=api_key, external_id=external_id, fingerprint=fingerprint
        )
        if existing is None:
            raise
        existing.was_created = False
        return existing
    run.was_created = True
    return run


def submit_audits_once(
    items: list[dict[str, Any]], *, api_key: Any = None
) -> list[AuditRun | ExternalIdConflict]:
    """`submit_audits` for audits with an `external_id` (and optionally `rerun_of`): the
    ids this key already used are found with one query per 500 and returned as stored
    (`was_created` False), or as an ExternalIdConflict in the item's place when the body
    differs; the new ones are stored together by `submit_audits`. An id twice in `items`
    is one audit. A concurrent duplicate (the unique constraint) sends the items through
    `submit_audit` one by one."""
    fingerprints = [
        request_fingerprint(
            user_input=item["user_input"], response=item["response"],
            sources=[Source.model_validate(x).model_dump() for x in item.get("sources") or []],
            metadata=dict(item.get("metadata") or {}), collision_key=item.get("collision_key"),
            options=dict(item.get("options") or {}),
        )
        for item in items
    ]
    ids = [item["external_id"] for item in items]
    existing: dict[str, AuditRun] = {}
    for start in range(0, len(ids), 500):
        for run in AuditRun.objects.filter(api_key=api_key, external_id__in=ids[start:start + 500]):
            existing[run.external_id] = run
    out: list[Any] = [None] * len(items)
    new: dict[str, int] = {}  # external_id -> index of its first item
    for i, (external_id, fingerprint) in enumerate(zip(ids, fingerprints, strict=True)):
        stored = existing.get(external_id)
        if stored is not None:
            if stored.request_hash != fingerprint:
                out[i] = ExternalIdConflict(stored)
            else:
                stored.was_created = False
                out[i] = stored
        elif external_id not in new:
            new[external_id] = i
    if new:
        try:
            runs = submit_audits([items[i] for i in new.values()], api_key=api_key,
                                 fingerprints=[fingerprints[i] for i in new.values()])
        except IntegrityError:
            return [_submit_one(item, api_key) for item in items]
        for i, run in zip(new.values(), runs, strict=True):
            out[i] = run
    for i, external_id in enumerate(ids):  # the repeats of an id new in this batch
        if out[i] is None:
            first = out[new[external_id]]
            if first.request_hash != fingerprints[i]:
                out[i] = ExternalIdConflict(first)
            else:
                out[i] = copy.copy(first)
                out[i].was_created = False
    return out


def _submit_one(item: dict[str, Any], api_key: Any) -> AuditRun | ExternalIdConflict:
    try:
        return submit_audit(
            user_input=item["user_input"], response=item["response"],
            sources=item.get("sources"), metadata=item.get("metadata"),
            external_id=item.get("external_id"), collision_key=item.get("collision_key"),
            options=item.get("options"), api_key=api_key,
            incomplete=bool(item.get("incomplete", False)), rerun_of=item.get("rerun_of"),
        )
    except ExternalIdConflict as exc:
        return exc


def submit_audits(
    items: list[dict[str, Any]], *, api_key: Any = None, fingerprints: list[str] | None = None,
) -> list[AuditRun]:
    """`submit_audit` for several audits (a batch request): one transaction and one insert
    for all, each enqueued on commit. An `external_id` is stored as given, unchecked:
    `submit_audits_once` checks them first (and hands over the `fingerprints` it made)."""
    from analyzers.config_store import load_config_with_snapshot

    config, snapshot = load_config_with_snapshot()
    rows = []
    for i, item in enumerate(items):
        sources = [Source.model_validate(x).model_dump() for x in item.get("sources") or []]
        metadata = dict(item.get("metadata") or {})
        options = dict(item.get("options") or {})
        fingerprint = fingerprints[i] if fingerprints is not None else _stored_fingerprint(
            item.get("external_id"), user_input=item["user_input"], response=item["response"],
            sources=sources, metadata=metadata, collision_key=item.get("collision_key"),
            options=options,
        )
        rerun_of = item.get("rerun_of")
        rows.append((
            item.get("external_id"), None if rerun_of is None else rerun_of.pk,
            None if api_key is None else api_key.pk, fingerprint, item["user_input"],
            item["response"], sources, metadata, item.get("collision_key"), options,
            config.threshold, snapshot, bool(item.get("incomplete", False)),
        ))
    runs, values = _new_runs(_SUBMITTED_COLUMNS, rows)
    for item, run in zip(items, runs, strict=True):
        if item.get("rerun_of") is not None:
            _RERUN_OF.set_cached_value(run, item["rerun_of"])
        if api_key is not None:
            _API_KEY.set_cached_value(run, api_key)
    insert = _runs_insert(runs, values)
    with transaction.atomic():
        _insert_runs(runs, insert)
        queued = [(run.pk, is_large(run.response)) for run in runs]
        transaction.on_commit(lambda: announce([run_id for run_id, _ in queued]))
        if runs and _queue_shares_transaction(runs[0]._state.db):
            _insert_queue_rows(queued)
        else:
            transaction.on_commit(lambda: enqueue_audits(queued))
    for run in runs:
        run.was_created = True
    return runs


_SUBMITTED_COLUMNS = ("external_id", "rerun_of_id", "api_key_id", "request_hash", "user_input",
                      "response", "sources", "metadata", "collision_key", "options",
                      "threshold", "config_snapshot", "incomplete")
_RERUN_OF = AuditRun._meta.get_field("rerun_of")
_API_KEY = AuditRun._meta.get_field("api_key")


def _new_runs(
    columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> tuple[list[AuditRun], list[list[Any]]]:
    """`AuditRun(**dict(zip(columns, row)))` for each row (`columns`: attnames), through
    the model's positional path: each field set by its place, not looked up by name (half
    the CPU of the keyword path, which was a third of storing a batch request). Fields
    not in `columns` get their defaults, callable ones (the id, `created_at`) called for
    each run. Returns the runs and their values in field order (`_runs_insert`)."""
    fields = AuditRun._meta.concrete_fields
    place = {field.attname: i for i, field in enumerate(fields)}
    given = [place[name] for name in columns]
    defaults = [(i, field.get_default) for i, field in enumerate(fields)
                if field.attname not in columns]
    runs, full = [], []
    for values in rows:
        row: list[Any] = [None] * len(fields)
        for i, default in defaults:
            row[i] = default()
        for i, value in zip(given, values, strict=True):
            row[i] = value
        runs.append(AuditRun(*row))
        full.append(row)
    return runs, full


def _runs_insert(runs: list[AuditRun], values: list[list[Any]] | None = None) -> Statement:
    """The INSERT of new runs as plain rows, one statement (audits.bulk), converted before
    the transaction (its write lock holds every other writer): `save()` and the ORM's
    bulk_create prepared each of the ~30 fields of each run one by one. No signals are
    sent (nothing listens to an AuditRun's save). `values`: the runs' field values in the
    model's order, when known (`_new_runs`)."""
    columns = [field.attname for field in AuditRun._meta.concrete_fields]
    if values is None:
        values = [[getattr(run, name) for name in columns] for run in runs]
    return prepare_insert(AuditRun, columns, values)


def _insert_runs(runs: list[AuditRun], statement: Statement) -> None:
    """Run the INSERT `_runs_insert(runs)` built; the runs are stored ones from now."""
    run_statement(statement)
    for run in runs:
        run._state.adding = False
        run._state.db = statement.using


def _after_submit(run_id: Any, large: bool = False) -> None:
    enqueue_audit(run_id, large=large)


def announce(run_ids: list[Any]) -> None:
    """`audit_submitted` for new runs, so that their cards show at once even when the
    queue is deep ("audit_started" may be seconds away). Nothing is sent when nobody
    watches the feed (in-memory layer), and the live feed renders a burst in one round."""
    if not has_watchers(ALL_AUDITS_GROUP):
        return
    for run_id in run_ids:
        publish({"type": "audit_submitted", "audit_id": str(run_id), "status": "pending"})


def is_large(response: str) -> bool:
    """Whether an audit of this response goes to the large lane (AUDITOR_LARGE_AUDIT_CHARS)."""
    return len(response) >= getattr(settings, "AUDITOR_LARGE_AUDIT_CHARS", 100_000)


def _audit_task(large: bool):
    """`run_audit`, on the `large` queue when the audit is large and the backend has that
    lane (the thread backend does; a queue no worker serves would strand the audit)."""
    from django.tasks import task_backends

    from .tasks import run_audit

    if large and LARGE_QUEUE in task_backends[run_audit.backend].queues:
        return run_audit.using(queue_name=LARGE_QUEUE)
    return run_audit


def _queue_shares_transaction(using: str | None) -> bool:
    """True when tasks are rows of django-tasks-db in the database of the run."""
    from django.db import router
    from django.tasks import task_backends

    from .tasks import run_audit

    try:
        from django_tasks_db.backend import DatabaseBackend
        from django_tasks_db.models import DBTaskResult
    except ImportError:  # pragma: no cover - an optional dependency
        return False
    backend = task_backends[run_audit.backend]
    return isinstance(backend, DatabaseBackend) and router.db_for_write(DBTaskResult) == (
        using or "default"
    )


def _insert_queue_rows(queued: list[tuple[Any, bool]]) -> None:
    """django-tasks-db's queue rows of `queued` (`(run_id, large)`), in one INSERT inside
    the audits' transaction.

    Its `enqueue` makes each row with `objects.create()` and then a TaskResult for the
    `task_enqueued` signal (whose only receiver logs at debug level): ~1 ms of CPU per
    audit of a batch, several times the audits' own insert. These are the rows `enqueue`
    makes (the fields of its `_task_to_db_task`, `run_after` as its pre_save handler
    sets it, `enqueued_at` as its `auto_now_add`), without the signal, as plain rows
    (audits.bulk: the ORM's `bulk_create` was a sixth of a single submission's CPU)."""
    from django_tasks_db.models import DBTaskResult, get_date_max

    rows = []
    enqueued_at = timezone.now()
    for large in (False, True):
        ids = [str(run_id) for run_id, is_big in queued if is_big == large]
        if not ids:
            continue
        task = _audit_task(large)
        backend = task.get_backend()
        backend.validate_task(task)
        constant = (task.priority, task.module_path, task.queue_name,
                    task.run_after or get_date_max(), backend.alias, enqueued_at)
        rows.extend((backend._get_id(), {"args": [run_id], "kwargs": {}}, *constant)
                    for run_id in ids)
    insert_rows(DBTaskResult, QUEUE_ROW_COLUMNS, rows)
    logger.debug("%d audits queued", len(rows))


QUEUE_ROW_COLUMNS = ("id", "args_kwargs", "priority", "task_path", "queue_name",
                     "run_after", "backend_name", "enqueued_at")


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


def rerun_audit(original: AuditRun, *, enqueue: bool = True) -> AuditRun:
    """A new run of the same input with the current configuration, linked to the original."""
    return submit_audit(
        user_input=original.user_input,
        response=original.response,
        sources=original.sources,
        metadata=original.metadata,
        collision_key=original.collision_key,
        options=original.options,
        api_key=original.api_key,
        incomplete=original.incomplete,
        rerun_of=original,
        enqueue=enqueue,
    )


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
                {"type": "analyzer_started", "audit_id": audit_id,
                 "analyzer_id": event.get("analyzer_id")}
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
    from django.conf import settings

    from analyzers.config_store import current_registry
    from analyzers.engine.auditor import Auditor
    from analyzers.policy import audit_services

    from .collisions import DatabaseCollisionStore

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


def execute_run(run_id: Any) -> str:
    """The body of the `run_audit` task. Returns the final status (or why it did nothing)."""
    if not _claim(run_id):
        return "skipped"

    with running_run(run_id):  # its heartbeat tells recovery this process is alive
        return _execute_claimed(run_id)


def _auditor_for(run: AuditRun):
    """This worker thread's Auditor for the run's configuration snapshot (built once per
    snapshot, configuration version and registry: see audits.workers)."""
    from django.conf import settings

    from analyzers.config_store import config_version, current_registry, load_config
    from analyzers.engine.config import AuditorConfig
    from analyzers.policy import audit_services

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


def _engine_call(run: AuditRun, collisions: CollisionBatch | None = None):
    """A function returning the engine's coroutine auditing `run` (built in this thread:
    the auditor, the input and the collision family)."""
    auditor = _auditor_for(run)
    family = collision_family(run)
    audit = AuditInput(
        user_input=run.user_input,
        response=run.response,
        sources=run.sources,
        metadata=run.metadata,
    )

    audit_id = str(run.pk)

    def make():
        coro = auditor.audit(
            audit,
            options=run.options or None,
            collision_key=run.collision_key,
            collision_family=family,
            # (nobody to see the analyzers' progress: no events made for it)
            progress=_progress_callback(audit_id) if audit_watched(audit_id) else None,
        )
        return coro if collisions is None else collisions.run(run.pk, coro)

    return make


def _collision_batch(runs: list[AuditRun]) -> CollisionBatch | None:
    """The runs' duplicate-output questions, read in one query (audits.collisions): the
    red-flag analyzer asks about the digest of the response in the collision scope (the
    collision key, else the input); a question asked otherwise goes to the database."""
    if not runs or not CollisionBatch.supported():
        return None
    return CollisionBatch(
        (run.user_input if run.collision_key is None else run.collision_key,
         content_digest(run.response))
        for run in runs
    )


def _execute_claimed(run_id: Any) -> str:
    run = AuditRun.objects.get(pk=run_id)
    done = _analyse_and_store([run], {})
    if not done:
        return AuditRun.Status.FAILED
    run, report = done[0]
    if run.status == AuditRun.Status.COMPLETE:
        _finished(run, report)
    return run.status


def _analyse(
    runs: list[AuditRun], outcome: dict[str, str], collisions: CollisionBatch | None,
    *, announce: bool = True,
) -> list[tuple[AuditRun, AuditReport]]:
    """The engine's reports on `runs`, one after another in one trip to this thread's
    engine loop (a trip per audit cost more than the duplicate checks it saved: each hands
    the GIL to the loop's thread and back). A run whose analysis raises is marked failed."""
    calls = []
    for run in runs:
        if announce:
            publish({"type": "audit_started", "audit_id": str(run.pk), "attempt": run.attempts})
        try:
            calls.append((run, _engine_call(run, collisions)))
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
            store_reports(done, fresh=_nothing_stored([run for run, _ in done]),
                          collisions=collisions)
            return done
        except Exception:
            logger.warning("storing %d reports with their batched duplicate checks failed; "
                           "analysing them again", len(done), exc_info=True)
            done = _analyse([run for run, _ in done], outcome, None, announce=False)
    try:
        store_reports(done, fresh=_nothing_stored([run for run, _ in done]))
    except Exception:
        # One bad report must not fail the others: store them one by one.
        logger.warning("storing %d reports at once failed; one by one", len(done),
                       exc_info=True)
        for run, report in done:
            try:
                store_report(run, report, fresh=_nothing_stored([run]))
            except Exception as exc:
                logger.exception("audit %s failed", run.pk)
                mark_failed(run.pk, f"{type(exc).__name__}: {exc}")
                run.status = AuditRun.Status.FAILED
    return done


def _finished(run: AuditRun, report: AuditReport) -> None:
    audit_id = str(run.pk)
    # One event per state change: the trace lines and the card travel with the final
    # event (pages read them from the database once they get it); nothing is read back.
    publish(
        {
            "type": "audit_finished",
            "audit_id": audit_id,
            "status": run.status,
            "overall_score": run.overall_score,
            "has_card": run.has_card,
            "trace_lines": len(report.trace),
        }
    )
    if not capturing():  # an analysis process: its parent sends the signal with the event
        send_finished_signal(audit_id)


def send_finished_signal(audit_id: str) -> None:
    """`audit_finished` for a complete audit (its receivers may queue tasks: alerts)."""
    for receiver, error in audit_finished.send_robust(sender=AuditRun, audit_id=audit_id):
        if isinstance(error, Exception):
            logger.error("%r failed after audit %s", receiver, audit_id, exc_info=error)


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
    trace_lines = (f"EXISTS (SELECT 1 FROM {quote(TraceLine._meta.db_table)} WHERE "
                   f"{quote(TraceLine._meta.get_field('audit').column)} = "
                   f"{table}.{quote(pk.column)})")
    runs: list[AuditRun] = []
    for ids in itertools.batched(run_ids, 500):
        chunk = [pk.get_db_prep_value(pk.to_python(i), connection) for i in ids]
        sql = (f"UPDATE {table} SET status = %s, started_at = %s, attempts = attempts + 1, "
               f"error = '' WHERE {quote(pk.column)} IN ({', '.join(['%s'] * len(chunk))}) "
               f"AND +status = %s RETURNING {columns}, {trace_lines} AS had_trace_lines")
        params = [AuditRun.Status.RUNNING,
                  connection.ops.adapt_datetimefield_value(timezone.now()),
                  *chunk, AuditRun.Status.PENDING]
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
    for run, report in done:
        outcome[str(run.pk)] = run.status
        if run.status == AuditRun.Status.COMPLETE:
            _finished(run, report)


def store_report(run: AuditRun, report: AuditReport, *, fresh: bool = False) -> AuditRun:
    """Write the engine's report to `run` and its child rows, in one transaction.

    `fresh`: the caller knows no rows of an earlier attempt exist (nothing to delete).
    """
    store_reports([(run, report)], fresh=fresh)
    return run


STORE_CHUNK = 8  # audits written between two looks at requests waiting for the lock


def store_reports(
    pairs: list[tuple[AuditRun, AuditReport]], *, fresh: bool = False,
    collisions: CollisionBatch | None = None,
) -> None:
    """`store_report` for several runs: one statement per table (rows as plain tuples
    through `audits.bulk.insert_rows`, no model instance per row), written `STORE_CHUNK`
    runs at a time, and the digests their duplicate checks recorded (`collisions`, which
    may raise CollisionRace: then nothing is stored). All in one transaction unless a
    request of the server waits for SQLite's write lock (`lock_wait.requests_waiting`):
    then what is written so far commits and the request goes first (a batch held the
    lock for 35-60 ms, the tail of a lone audit's POST under load). Runs stored before a
    later chunk fails are complete; the caller's retries store them again from a clean
    slate (`_nothing_stored`).

    Surfacing follows the thresholds current now (audits.surfacing), which may be newer
    than the configuration snapshot the engine ran with."""
    if not pairs:
        return
    from .surfacing import after_store, apply_current, current_policy

    policy = current_policy()
    surfaced = {run.pk: apply_current(run, report.results, policy) for run, report in pairs}
    runs = [run for run, _ in pairs]
    using = runs[0]._state.db or router.db_for_write(AuditRun)
    audit_ids, *inserts = _report_rows(pairs, surfaced, using)
    now = timezone.now()
    for run, report in pairs:
        run.cleaned_response = report.cleaned_response
        run.overall_score = report.overall_score  # threshold, has_card: apply_current
        run.top_score, run.top_analyzer = top_result(report.results)
        run.status = AuditRun.Status.COMPLETE
        run.finished_at = now
        run.error = ""
    finished = _finished_update(runs, using)
    # Each statement's rows, per chunk of runs (the rows come in the runs' order).
    chunks = [audit_ids[i:i + STORE_CHUNK] for i in range(0, len(audit_ids), STORE_CHUNK)]
    chunk_of = {audit_id: i // STORE_CHUNK for i, audit_id in enumerate(audit_ids)}
    pieces = [
        _rows_by_chunk(statement, chunk_of, len(chunks), key)
        for statement, key in [*((insert, 0) for insert in inserts), (finished, -1)]
    ]
    done = 0
    while done < len(chunks):
        with transaction.atomic(using=using):  # the write lock: only the writes in here
            if done == 0 and collisions is not None:
                collisions.flush()
            while done < len(chunks):
                start = done * STORE_CHUNK
                _write_chunk(runs[start:start + STORE_CHUNK], chunks[done],
                             [piece[done] for piece in pieces], fresh, using)
                done += 1
                if lock_wait.requests_waiting():
                    break
    after_store(policy)


def _write_chunk(runs: list[AuditRun], audit_ids: list[Any], statements: list[Statement],
                 fresh: bool, using: str) -> None:
    """The rows of a chunk of runs' reports (`store_reports`), inside its transaction."""
    if not fresh:
        # A retried run starts from a clean slate.
        AnalyzerRunRecord.objects.using(using).filter(audit__in=runs).delete()
        TraceLine.objects.using(using).filter(audit__in=runs).delete()
        AuditLinks.objects.using(using).filter(audit__in=runs).delete()
        AnnotationKind.objects.using(using).filter(audit__in=runs).delete()
    results, annotations, kinds, trace, links, finished = statements
    run_statement(results)
    result_ids = _result_ids(audit_ids, using)
    for row in annotations.rows:
        row[1] = result_ids[row[1]]  # (audit id, position) -> the new result's id
    run_statement(annotations)
    run_statement(kinds)
    run_statement(trace)
    run_statement(links)
    run_statement(finished)


def _rows_by_chunk(statement: Statement, chunk_of: dict[Any, int], chunks: int,
                   key: int) -> list[Statement]:
    """`statement` split into one statement per chunk (`chunk_of`: an audit id's chunk;
    `key`: the column of a row's audit id; rows in the chunks' order)."""
    of_row = [chunk_of[row[key]] for row in statement.rows]
    if of_row != sorted(of_row):  # never write a row with the wrong chunk
        raise ValueError("rows are not in the runs' order")
    bounds = [bisect.bisect_left(of_row, i) for i in range(chunks + 1)]
    return [statement.with_rows(statement.rows[start:end])
            for start, end in itertools.pairwise(bounds)]


def _report_rows(
    pairs: list[tuple[AuditRun, AuditReport]], surfaced: dict[Any, list[bool]], using: str,
) -> tuple[list[Any], Statement, Statement, Statement, Statement, Statement]:
    """The stored audit ids and the INSERTs of the reports' results, annotations, their
    kinds, trace lines and links, built before the transaction (its write lock holds the
    other writers and the requests). An annotation's `result_id` is its result's (audit
    id, position) until the new results' ids are read."""
    # Each audit's id and creation time converted once, not once per row and table.
    keys = [(run, report, db_value(AuditRun, "id", run.pk, using=using),
             db_value(AuditRun, "created_at", run.created_at, using=using))
            for run, report in pairs]
    results, annotations, kinds, trace, links = [], [], [], [], []
    for run, report, audit_id, created_at in keys:
        # one row: audits.link_rows (the links result's copy of it is not stored again)
        table = link_rows.contract_dicts(report.links)
        if table:
            links.append((audit_id, link_rows.row_json(table)))
        shown = surfaced[run.pk]
        for i, r in enumerate(report.results):
            results.append(
                (audit_id, i, r.analyzer_id, r.category, r.status, r.error, r.duration_ms,
                 r.score, r.should_surface, shown[i],
                 link_rows.stored_supplementary(r.analyzer_id, r.supplementary, table),
                 created_at))
            annotations.extend(
                (audit_id, (audit_id, i), j, r.analyzer_id, a.type, a.label, a.severity,
                 a.description, a.evidence, a.start, a.end, created_at)
                for j, a in enumerate(r.annotations)
            )
        counted = AnnotationKind.counted(a for r in report.results for a in r.annotations)
        kinds.extend((audit_id, type_, severity, n, created_at)
                     for (type_, severity), n in counted.items())
        if report.trace:  # one row: audits.trace_rows
            trace.append((audit_id, 0, packed(report.trace)))
    return (
        [audit_id for _, _, audit_id, _ in keys],
        prepare_insert(AnalyzerRunRecord, RESULT_COLUMNS, results, using=using,
                       prepared=PREPARED),
        prepare_insert(Annotation, ANNOTATION_COLUMNS, annotations, using=using,
                       prepared=(*PREPARED, "result_id")),
        prepare_insert(AnnotationKind, ("audit_id", "type", "severity", "count",
                                        "audit_created_at"), kinds, using=using,
                       prepared=PREPARED),
        prepare_insert(TraceLine, ("audit_id", "position", "text"), trace, using=using,
                       prepared=PREPARED),
        prepare_insert(AuditLinks, ("audit_id", "rows"), links, using=using,
                       prepared=("audit_id",)),
    )


PREPARED = ("audit_id", "audit_created_at")  # converted once per audit (db_value)
RESULT_COLUMNS = (
    "audit_id", "position", "analyzer_id", "category", "status", "error", "duration_ms",
    "score", "should_surface", "surfaced", "supplementary", "audit_created_at",
)
ANNOTATION_COLUMNS = (
    "audit_id", "result_id", "position", "analyzer_id", "type", "label", "severity",
    "description", "evidence", "start", "end", "audit_created_at",
)
_FINISHED_FIELDS = (
    "cleaned_response", "threshold", "overall_score", "has_card", "top_score", "top_analyzer",
    "surfacing_policy", "status", "finished_at", "error",
    "started_at",  # the start again (heartbeats refreshed it while running)
)


def _result_ids(audit_ids: list[Any], using: str) -> dict[tuple[Any, int], int]:
    """{(audit id as stored, position): result id} of these audits' results: one query,
    the audit ids compared as the driver gives them (no model, no UUID per row)."""
    from django.db import connections

    connection = connections[using]
    quote = connection.ops.quote_name
    sql = (
        f"SELECT {quote('id')}, {quote('audit_id')}, {quote('position')} "
        f"FROM {quote(AnalyzerRunRecord._meta.db_table)} "
        f"WHERE {quote('audit_id')} IN ({', '.join(['%s'] * len(audit_ids))})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, audit_ids)
        return {(audit_id, position): pk for pk, audit_id, position in cursor.fetchall()}


def _finished_update(runs: list[AuditRun], using: str) -> Statement:
    """The UPDATE writing the finished runs' fields."""
    from django.db import connections

    connection = connections[using]
    fields = [AuditRun._meta.get_field(name) for name in _FINISHED_FIELDS]
    quote = connection.ops.quote_name
    table, pk = quote(AuditRun._meta.db_table), quote(AuditRun._meta.pk.column)
    if connection.vendor == "sqlite":
        # One statement for every run, the values in a VALUES list (SQLite names its
        # columns column1, column2 …): a statement run per row hands the interpreter lock
        # back and forth once per run while the write lock is held (see audits.bulk).
        sets = ", ".join(f"{quote(f.column)} = v.column{i}" for i, f in enumerate(fields, 1))
        return Statement(
            f"UPDATE {table} SET {sets} FROM (VALUES ", _finished_rows(runs, fields, connection),
            using, row_group=row_group(len(fields) + 1),
            tail=f") AS v WHERE {table}.{pk} = v.column{len(fields) + 1}",
        )
    sql = (f"UPDATE {table} SET " + ", ".join(f"{quote(f.column)} = %s" for f in fields)
           + f" WHERE {pk} = %s")
    return Statement(sql, _finished_rows(runs, fields, connection), using)


def _finished_rows(runs: list[AuditRun], fields: list[Any], connection: Any) -> list[list[Any]]:
    """Each run's finished fields and its id, as the driver takes them."""
    # Only the columns whose type needs it are converted (dates, the id), and the same
    # value (the batch's finish time) once.
    converters = [converter(f, connection) for f in [*fields, AuditRun._meta.pk]]
    rows = [
        [value if convert is None else convert(value)
         for value, convert in zip(
             [*(getattr(run, f.attname) for f in fields), run.pk], converters, strict=True)]
        for run in runs
    ]
    return rows


def mark_failed(run_id: Any, error: str) -> None:
    AuditRun.objects.filter(pk=run_id).update(
        status=AuditRun.Status.FAILED, error=error[:10_000], finished_at=timezone.now()
    )
    publish(
        {"type": "audit_finished", "audit_id": str(run_id), "status": "failed",
         "overall_score": None, "has_card": False, "error": error[:500]}
    )
