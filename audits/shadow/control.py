"""What the API and the dashboard do with a candidate's evidence: start a replay, and
promote it unless it would lose a finding reviewers confirmed (or forced, with a reason)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from analyzers import candidates
from analyzers.models import CandidateConfig, ConfigChange
from audits.shadow import replay
from audits.shadow.compare import compare, summary
from audits.shadow.tasks import replay_chunk


class ReplayBusy(Exception):
    """A replay of this candidate is under way."""


class WouldLoseConfirmed(Exception):
    """Promotion would lose findings reviewers confirmed; `comparison` lists them."""

    def __init__(self, comparison: dict[str, Any]):
        self.comparison = comparison
        n = comparison["counts"]["confirmed_findings_lost"]
        super().__init__(f"promoting would lose {n} finding(s) reviewers confirmed")


class ReasonRequired(ValueError):
    """A forced promotion must say why."""


def start_replay(candidate: CandidateConfig, *, limit: int, judged: bool) -> CandidateConfig:
    """Reset the candidate's replay to the latest `limit` complete audits and queue it."""
    if candidate.status != CandidateConfig.Status.SHADOW:
        raise candidates.CandidateClosed(f"the candidate is {candidate.status}")
    with transaction.atomic():
        candidate = CandidateConfig.objects.select_for_update().get(pk=candidate.pk)
        if candidate.replay_status == replay.RUNNING:
            raise ReplayBusy(f"a replay of candidate {candidate.pk} is under way")
        until = timezone.now()
        total = replay.audits_until(until)[:limit].count()
        candidate.replay_status = replay.RUNNING if total else replay.DONE
        candidate.replay_done = 0
        candidate.replay_total = total
        candidate.replay_judged = judged
        candidate.replay_until = until
        candidate.replay_error = ""
        candidate.save(
            update_fields=[
                "replay_status",
                "replay_done",
                "replay_total",
                "replay_judged",
                "replay_until",
                "replay_error",
            ]
        )
        if total:
            pk = candidate.pk
            transaction.on_commit(lambda: replay_chunk.enqueue(pk))
    return candidate


def promote_on_evidence(
    candidate: CandidateConfig,
    *,
    actor: str,
    force: bool = False,
    reason: str = "",
    user: Any = None,
) -> tuple[ConfigChange | None, dict[str, Any]]:
    """Promote the candidate (analyzers.candidates.promote) with its comparison as the
    evidence; WouldLoseConfirmed unless it loses no confirmed finding or `force` with a
    reason. Returns the change recorded and the comparison."""
    comparison = compare(candidate)
    lost = comparison["counts"]["confirmed_findings_lost"]
    reason = (reason or "").strip()
    if lost and not force:
        raise WouldLoseConfirmed(comparison)
    if force and not reason:
        raise ReasonRequired("a forced promotion needs a reason")
    evidence = {**summary(comparison), "forced": bool(force and lost)}
    change = candidates.promote(candidate, actor=actor, reason=reason, evidence=evidence, user=user)
    return change, comparison
