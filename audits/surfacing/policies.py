"""Surfacing policies: the current thresholds as a stored `SurfacingPolicy`, applied to an
audit when it is stored (`apply_current`), and which stored audits still follow older ones
(`stale_audits`, `staleness`). Reads only; the re-surfacing jobs: audits.surfacing.jobs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Min, Q, QuerySet

from analyzers.config_store import load_config
from analyzers.engine.surfacing import Thresholds
from audits.models import AuditRun, ResurfaceJob, SurfacingPolicy

logger = logging.getLogger(__name__)


# --- policies ------------------------------------------------------------------------------


def current_thresholds() -> Thresholds:
    return Thresholds.from_config(load_config())


def policy_for(thresholds: Thresholds) -> SurfacingPolicy:
    """The stored policy of these thresholds (created on first use)."""
    key = thresholds.key()
    policy = SurfacingPolicy.objects.filter(key=key).first()
    if policy is not None:
        return policy
    try:
        with transaction.atomic():
            return SurfacingPolicy.objects.create(key=key, thresholds=thresholds.as_dict())
    except IntegrityError:  # created meanwhile
        return SurfacingPolicy.objects.get(key=key)


def current_policy() -> SurfacingPolicy:
    return policy_for(current_thresholds())


def thresholds_of(policy: SurfacingPolicy) -> Thresholds:
    return Thresholds.from_dict(policy.thresholds)


# --- at analysis time ----------------------------------------------------------------------


def apply_current(run: AuditRun, results: list[Any], policy: SurfacingPolicy) -> list[bool]:
    """Decide each result's surfacing at `policy` (and the run's own options); set the
    run's `has_card`, `threshold` and `surfacing_policy`. `results` need `analyzer_id`,
    `status`, `score` and `should_surface` (engine runs or stored records)."""
    thresholds = thresholds_of(policy).with_options(run.options)
    flags = [
        thresholds.surfaced(
            analyzer_id=r.analyzer_id,
            status=r.status,
            score=r.score,
            should_surface=r.should_surface,
        )
        for r in results
    ]
    run.has_card = any(flags)
    run.threshold = thresholds.default
    run.surfacing_policy = policy
    return flags


def applied_thresholds(run: AuditRun) -> Thresholds:
    """The thresholds `run`'s stored surfacing follows: its policy's (before policies were
    recorded: its configuration snapshot's), with its own per-audit options."""
    if run.surfacing_policy_id is not None:
        thresholds = thresholds_of(run.surfacing_policy)
    else:
        snapshot = run.config_snapshot or {}
        thresholds = Thresholds.from_dict(
            {"threshold": run.threshold, "analyzers": {}}
        ).with_options(snapshot.get("analyzers") or {})
    return thresholds.with_options(run.options)


def is_outdated(run: AuditRun) -> bool:
    """Whether `run` still shows the surfacing of thresholds older than the latest saved
    ones (one seek in the jobs table; False before any threshold change)."""
    target = ResurfaceJob.objects.order_by("-id").values_list("policy_id", flat=True).first()
    return target is not None and run.surfacing_policy_id != target


# --- what still shows old surfacing -------------------------------------------------------


def _stale_ranges(policy: SurfacingPolicy) -> list[QuerySet[AuditRun]]:
    """The complete audits not at `policy`, as three ranges of audit_surfacing_idx (an
    OR of them, or a "!=", makes SQLite scan every audit)."""
    complete = AuditRun.objects.filter(status=AuditRun.Status.COMPLETE)
    return [
        complete.filter(surfacing_policy__isnull=True),
        complete.filter(surfacing_policy__lt=policy.pk),
        complete.filter(surfacing_policy__gt=policy.pk),
    ]


def stale_audits(policy: SurfacingPolicy) -> QuerySet[AuditRun]:
    """Complete audits whose surfacing does not follow `policy`."""
    return AuditRun.objects.filter(status=AuditRun.Status.COMPLETE).filter(
        Q(surfacing_policy__isnull=True) | ~Q(surfacing_policy=policy)
    )


@dataclass(frozen=True, slots=True)
class Staleness:
    count: int
    oldest: datetime | None
    newest: datetime | None


def staleness(policy: SurfacingPolicy) -> Staleness:
    """How many audits still show older surfacing, and their creation time range (three
    index-only aggregates: next to nothing when every audit is up to date)."""
    count, oldest, newest = 0, None, None
    for qs in _stale_ranges(policy):
        agg = qs.aggregate(n=Count("*"), oldest=Min("created_at"), newest=Max("created_at"))
        if agg["n"]:
            count += agg["n"]
            oldest = agg["oldest"] if oldest is None else min(oldest, agg["oldest"])
            newest = agg["newest"] if newest is None else max(newest, agg["newest"])
    return Staleness(count=count, oldest=oldest, newest=newest)


def any_stale(policy: SurfacingPolicy) -> bool:
    return any(qs.exists() for qs in _stale_ranges(policy))


def latest_job() -> ResurfaceJob | None:
    return ResurfaceJob.objects.select_related("policy").order_by("-id").first()


def generation() -> str:
    """Changes whenever a re-surfacing starts or ends (for caches of surfaced counts)."""
    job = ResurfaceJob.objects.order_by("-id").values_list("id", "status").first()
    return "0" if job is None else f"{job[0]}.{job[1]}"
