"""Replay: the latest stored audits analysed with a candidate, in the background.

A replay is a chain of small tasks (`CHUNK` audits each, the next queued behind whatever
arrived meanwhile), so it never holds a worker while audits wait. Its progress is on the
candidate (`replay_done` of `replay_total`). Judged analyzers run only when asked.
"""

from __future__ import annotations

import logging

from analyzers.models import CandidateConfig
from audits.models import AuditRun, ShadowResult
from audits.shadow.analysis import engine_for

logger = logging.getLogger(__name__)

CHUNK = 20
RUNNING = "running"
DONE = "done"
FAILED = "failed"
STOPPED = "stopped"


def audits_until(until):
    """The audits a replay may take: complete ones stored until then, newest first."""
    return AuditRun.objects.filter(status=AuditRun.Status.COMPLETE, created_at__lte=until).order_by(
        "-created_at", "-id"
    )


def run_chunk(candidate_id: int) -> bool:
    """Replay the next `CHUNK` audits of the candidate's replay; True while more remain."""
    candidate = CandidateConfig.objects.filter(pk=candidate_id).first()
    if candidate is None or candidate.replay_status != RUNNING:
        return False
    if candidate.status != CandidateConfig.Status.SHADOW:
        _set(candidate_id, replay_status=STOPPED)
        return False
    start_at = candidate.replay_done
    end_at = min(candidate.replay_total, start_at + CHUNK)
    runs = list(audits_until(candidate.replay_until)[start_at:end_at])
    try:
        engine = engine_for(candidate, judged=candidate.replay_judged)
        for run in runs:
            engine.analyse(run, source=ShadowResult.Source.REPLAY)
    except Exception as exc:
        logger.exception("replay of candidate %s failed", candidate_id)
        _set(candidate_id, replay_status=FAILED, replay_error=f"{type(exc).__name__}: {exc}"[:2000])
        return False
    more = bool(runs) and end_at < candidate.replay_total
    _set(
        candidate_id,
        replay_done=end_at if runs else candidate.replay_total,
        replay_status=RUNNING if more else DONE,
    )
    return more


def give_up(candidate_id: int, error: str) -> None:
    """A running replay that cannot go on: failed, with why."""
    CandidateConfig.objects.filter(pk=candidate_id, replay_status=RUNNING).update(
        replay_status=FAILED, replay_error=error[:2000]
    )


def _set(candidate_id: int, **fields) -> None:
    CandidateConfig.objects.filter(pk=candidate_id).update(**fields)
