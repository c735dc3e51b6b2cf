"""Writes of the audits app (HackSoft style: keyword-only functions, one transaction each).

- `submit_audit(...)` stores a run, then enqueues `audits.tasks.run_audit` on commit.
- `execute_run(run_id)` (the task body) claims the run, audits it, stores the report.
- `rerun_audit(run)` submits a copy with the current configuration.
- Runs a dead worker left behind are re-queued by `audits.recovery.recover_stale_runs()`.
- `publish(event)` is the one way progress events leave the pipeline (see audits.events).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from analyzers.engine.contract import AuditInput, AuditReport, Source
from analyzers.engine.linkcheck import LinkChecker

from . import workers
from .events import apublish, publish
from .heartbeats import running_run
from .models import AnalyzerRunRecord, Annotation, AuditRun, LinkCheck, TraceLine
from .signals import audit_finished

__all__ = [
    "ExternalIdConflict",
    "MAX_ATTEMPTS",
    "apublish",
    "enqueue_audit",
    "execute_run",
    "mark_failed",
    "publish",
    "request_fingerprint",
    "rerun_audit",
    "store_report",
    "submit_audit",
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
    fingerprint = request_fingerprint(
        user_input=user_input,
        response=response,
        sources=sources,
        metadata=metadata,
        collision_key=collision_key,
        options=options,
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
    try:
        with transaction.atomic():
            run.save(force_insert=True)
            if enqueue:
                run_id = run.pk
                if _queue_shares_transaction(run._state.db):
                    # A database queue in the same database: the task row commits with
                    # the run (one write transaction, and never one without the other).
                    enqueue_task(run_id)
                else:
                    transaction.on_commit(lambda: _after_submit(run_id))
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


def _after_submit(run_id: Any) -> None:
    # No event here: the request path stays cheap; "audit_started" follows at once.
    enqueue_audit(run_id)


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


def enqueue_task(run_id: Any) -> None:
    """Queue the analysis; errors propagate (inside a transaction, they roll it back)."""
    from .tasks import run_audit

    run_audit.enqueue(str(run_id))


def enqueue_audit(run_id: Any) -> None:
    """Queue the analysis; a failure leaves the run pending for `recovery.recover_stale_runs`."""
    from .tasks import run_audit

    try:
        run_audit.enqueue(str(run_id))
    except Exception:
        logger.exception("could not enqueue audit %s; it stays pending", run_id)


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

    from .collisions import DatabaseCollisionStore

    services = {"link_checker": shared_link_checker(settings.AUDITOR_ALLOW_PRIVATE_NETWORKS)}
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

    snapshot = dict(run.config_snapshot or {})
    snapshot.pop("custom_judges", None)
    key = (
        json.dumps(snapshot, sort_keys=True, default=str),
        config_version(),
        id(current_registry()),
        settings.AUDITOR_ALLOW_PRIVATE_NETWORKS,
        build_auditor,  # replaced in tests
    )

    def build():
        return build_auditor(AuditorConfig.model_validate(snapshot) if snapshot else load_config())

    return workers.cached_auditor(key, build)


def _execute_claimed(run_id: Any) -> str:
    run = AuditRun.objects.get(pk=run_id)
    audit_id = str(run.pk)
    publish({"type": "audit_started", "audit_id": audit_id, "attempt": run.attempts})
    try:
        auditor = _auditor_for(run)
        audit = AuditInput(
            user_input=run.user_input,
            response=run.response,
            sources=run.sources,
            metadata=run.metadata,
        )
        report = workers.run_engine(
            lambda: auditor.audit(
                audit,
                options=run.options or None,
                collision_key=run.collision_key,
                progress=_progress_callback(audit_id),
            )
        )
        # The first attempt (claims count them): no earlier rows to delete.
        store_report(run, report, fresh=run.attempts <= 1)
    except Exception as exc:
        logger.exception("audit %s failed", audit_id)
        mark_failed(run_id, f"{type(exc).__name__}: {exc}")
        return AuditRun.Status.FAILED
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
    for receiver, error in audit_finished.send_robust(sender=AuditRun, audit_id=audit_id):
        if isinstance(error, Exception):
            logger.error("%r failed after audit %s", receiver, audit_id, exc_info=error)
    return run.status


def store_report(run: AuditRun, report: AuditReport, *, fresh: bool = False) -> AuditRun:
    """Write the engine's report to `run` and its child rows, in one transaction.

    `fresh`: the caller knows no rows of an earlier attempt exist (nothing to delete).
    """
    with transaction.atomic():
        if not fresh:
            # A retried run starts from a clean slate.
            run.results.all().delete()
            run.trace_lines.all().delete()
            run.links.all().delete()
        records = AnalyzerRunRecord.objects.bulk_create(
            [
                AnalyzerRunRecord(
                    audit=run,
                    position=i,
                    analyzer_id=r.analyzer_id,
                    category=r.category,
                    status=r.status,
                    error=r.error,
                    duration_ms=r.duration_ms,
                    score=r.score,
                    should_surface=r.should_surface,
                    surfaced=r.surfaced,
                    supplementary=r.supplementary,
                )
                for i, r in enumerate(report.results)
            ]
        )
        if any(rec.pk is None for rec in records):  # backends without RETURNING
            records = list(run.results.order_by("position"))
        Annotation.objects.bulk_create(
            [
                Annotation(
                    audit=run,
                    result=record,
                    position=j,
                    analyzer_id=r.analyzer_id,
                    type=a.type,
                    label=a.label,
                    severity=a.severity,
                    description=a.description,
                    evidence=a.evidence,
                    start=a.start,
                    end=a.end,
                )
                for record, r in zip(records, report.results, strict=True)
                for j, a in enumerate(r.annotations)
            ]
        )
        TraceLine.objects.bulk_create(
            [TraceLine(audit=run, position=i, text=t) for i, t in enumerate(report.trace)]
        )
        LinkCheck.objects.bulk_create(
            [LinkCheck(audit=run, position=i, **link.model_dump())
             for i, link in enumerate(report.links)]
        )
        run.cleaned_response = report.cleaned_response
        run.threshold = report.threshold
        run.overall_score = report.overall_score
        run.has_card = report.has_card
        run.status = AuditRun.Status.COMPLETE
        run.finished_at = timezone.now()
        run.error = ""
        run.save(
            update_fields=[
                "cleaned_response", "threshold", "overall_score", "has_card",
                "status", "finished_at", "error",
                "started_at",  # the start again (heartbeats refreshed it while running)
            ]
        )
    return run


def mark_failed(run_id: Any, error: str) -> None:
    AuditRun.objects.filter(pk=run_id).update(
        status=AuditRun.Status.FAILED, error=error[:10_000], finished_at=timezone.now()
    )
    publish(
        {"type": "audit_finished", "audit_id": str(run_id), "status": "failed",
         "overall_score": None, "has_card": False, "error": error[:500]}
    )
