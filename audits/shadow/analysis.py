"""Analysing a stored audit with a candidate configuration, the results kept apart.

The candidate's engine reads the red-flag analyzer's collision digests without recording
any (`ReadOnlyCollisions`), and writes nothing but its `ShadowResult`. New audits are
analysed after their own work, and shadow work yields to audits. With the thread backend
(audits.execution.background) it runs only while no audit task is queued or running,
makes way between analyzers when one arrives, and defers the candidates left when an
audit arrived between two (queued again, behind the audits). Elsewhere it is skipped
(counted on the candidate) while more than `AUDITOR_SHADOW_MAX_WAITING` audits wait.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models import F

from analyzers import candidates
from analyzers.engine.auditor import Auditor
from analyzers.engine.collisions import is_duplicate
from analyzers.engine.contract import AuditInput, AuditReport
from analyzers.models import CandidateConfig
from analyzers.policy import audit_services
from audits.execution import background, people_first, workers
from audits.execution.execute import collision_family, shared_link_checker
from audits.models import AuditRun, CollisionDigest, ShadowResult
from audits.store.collisions import scope_hash

logger = logging.getLogger(__name__)

MAX_FINDINGS = 500  # per shadow result
PAUSE_S = 1.0  # at most, in all, between the analyzers of one shadow analysis
STORE_PAUSE_S = 1.0  # at most, before a shadow result is written while audits run


class ReadOnlyCollisions:
    """The red-flag analyzer's duplicate question answered from the stored digests, as the
    audit's own run left them, recording nothing."""

    def seen_before_sync(self, scope: str, digest: str, family: str | None = None) -> bool:
        row = (
            CollisionDigest.objects.filter(scope_hash=scope_hash(scope), digest=digest[:128])
            .values_list("first_family", "shared")
            .first()
        )
        return row is not None and is_duplicate(row[0], row[1], family)

    async def seen_before(self, scope: str, digest: str, family: str | None = None) -> bool:
        return await sync_to_async(self.seen_before_sync)(scope, digest, family)


def audits_waiting() -> int:
    """Audits stored and not yet analysed or being analysed, counted up to one past the
    shadow limit."""
    limit = settings.AUDITOR_SHADOW_MAX_WAITING
    return AuditRun.objects.filter(status__in=(AuditRun.Status.PENDING, AuditRun.Status.RUNNING))[
        : limit + 1
    ].count()


def should_yield() -> bool:
    return audits_waiting() > settings.AUDITOR_SHADOW_MAX_WAITING


class CandidateEngine:
    """One candidate's auditor (its analyzers, judged ones left out unless asked)."""

    def __init__(self, candidate: CandidateConfig, *, judged: bool) -> None:
        config, registry, self.left_out = candidates.runnable(candidate, judged=judged)
        self.candidate = candidate
        self.auditor = Auditor(
            config,
            registry,
            collision_store=ReadOnlyCollisions(),
            services={
                "link_checker": shared_link_checker(settings.AUDITOR_ALLOW_PRIVATE_NETWORKS),
                **audit_services(),
            },
        )

    def report(self, run: AuditRun) -> AuditReport:
        options = {
            analyzer_id: {k: v for k, v in section.items() if k != "enabled"}
            if analyzer_id in self.left_out
            else section
            for analyzer_id, section in (run.options or {}).items()
            if isinstance(section, dict)
        }
        family = collision_family(run)
        audit = AuditInput(
            user_input=run.user_input,
            response=run.response,
            sources=run.sources,
            metadata=run.metadata,
        )

        # Pauses for audits, in all at most PAUSE_S (and a quarter of the audit's time
        # budget, so its waiting analyzers never time out for them): a steady stream of
        # audits slows shadow work down but never stalls it.
        budget = [min(PAUSE_S, self.auditor.config.limits.audit_timeout_s / 4)]

        async def make_way(event: dict[str, Any]) -> None:
            if event.get("type") == "analyzer_started" and budget[0] > 0:
                budget[0] -= await background.make_way(budget[0])

        async def make() -> AuditReport:
            await people_first.make_way()
            await make_way({"type": "analyzer_started"})
            return await self.auditor.audit(
                audit,
                options=options or None,
                collision_key=run.collision_key,
                collision_family=family,
                progress=make_way,
            )

        return workers.run_engine(make)

    def analyse(self, run: AuditRun, *, source: str) -> ShadowResult:
        """Analyse `run` and store (or replace) the candidate's result on it (the write
        waits, a little, for audits that arrived meanwhile: they write too)."""
        report = self.report(run)
        background.wait_until_idle(STORE_PAUSE_S)
        return store(self.candidate, run, report, left_out=self.left_out, source=source)


def engine_for(candidate: CandidateConfig, *, judged: bool) -> CandidateEngine:
    """The candidate's engine, kept by this thread while its configuration is unchanged
    (building one parses the whole configuration again)."""
    key = ("candidate", candidate.pk, judged, workers.snapshot_text(candidate.config))
    engine = workers.cached_auditor(key, lambda: CandidateEngine(candidate, judged=judged))
    engine.candidate = candidate
    return engine


def findings_of(report: AuditReport) -> list[dict[str, Any]]:
    out = []
    for result in report.results:
        for a in result.annotations:
            out.append(
                {
                    "analyzer": result.analyzer_id,
                    "type": a.type,
                    "severity": a.severity,
                    "label": a.label,
                    "evidence": a.evidence,
                    "start": a.start,
                    "end": a.end,
                }
            )
            if len(out) >= MAX_FINDINGS:
                return out
    return out


def store(
    candidate: CandidateConfig,
    run: AuditRun,
    report: AuditReport,
    *,
    left_out: set[str],
    source: str,
) -> ShadowResult:
    ok = [r for r in report.results if r.status == "ok"]
    top = max(ok, key=lambda r: r.score, default=None)
    row, _ = ShadowResult.objects.update_or_create(
        candidate=candidate,
        audit=run,
        defaults={
            "source": source,
            "score": top.score if top is not None else None,
            "surfaced": report.has_card,
            "findings": findings_of(report),
            "results": [
                {
                    "analyzer": r.analyzer_id,
                    "status": r.status,
                    "score": r.score,
                    "surfaced": r.surfaced,
                }
                for r in report.results
            ],
            "left_out": sorted(left_out),
            "cleaned_digest": hashlib.sha256(report.cleaned_response.encode()).hexdigest(),
        },
    )
    return row


def count_skipped(candidate_ids: list[int]) -> None:
    CandidateConfig.objects.filter(pk__in=candidate_ids).update(
        shadow_skipped=F("shadow_skipped") + 1
    )


def shadow_audit(
    audit_id: str,
    candidate_ids: list[int],
    *,
    defer: Callable[[list[int]], None] | None = None,
) -> int:
    """The body of the shadow task: analyse one finished audit with each candidate still
    in shadow. How many ran. Given `defer` (a task backend that counts audit tasks:
    audits.execution.background), the candidates left when an audit arrives are handed
    to it (queued again); without, while audits wait, each is counted as skipped."""
    rows = list(
        CandidateConfig.objects.filter(
            pk__in=candidate_ids, status=CandidateConfig.Status.SHADOW
        ).order_by("pk")
    )
    if not rows:
        return 0
    lane = defer is not None
    if not lane and should_yield():
        count_skipped([c.pk for c in rows])
        return 0
    run = AuditRun.objects.filter(pk=audit_id, status=AuditRun.Status.COMPLETE).first()
    if run is None:
        return 0
    done = 0
    for i, candidate in enumerate(rows):
        if defer is not None and i and background.busy():
            defer([c.pk for c in rows[i:]])
            return done
        try:
            engine_for(candidate, judged=candidate.shadow_judged).analyse(
                run, source=ShadowResult.Source.SHADOW
            )
            done += 1
        except Exception:  # a bad candidate never fails another, nor the audit
            logger.exception(
                "shadow analysis of audit %s with candidate %s failed", audit_id, candidate.pk
            )
    return done
