"""Shadow tasks (django.tasks), queued at the lowest priority: background work
(audits.execution.background), after the audits. Pass ids, never instances."""

from __future__ import annotations

from django.tasks import task

from audits.shadow import analysis, replay

LOWEST = -100


@task(priority=LOWEST)
def shadow_audit(audit_id: str, candidate_ids: list[int]) -> int:
    """Analyse a finished audit with the candidates in shadow; see analysis.shadow_audit."""
    counts = getattr(shadow_audit.get_backend(), "counts_audits", False)
    return analysis.shadow_audit(
        audit_id,
        candidate_ids,
        defer=(lambda rest: shadow_audit.enqueue(audit_id, rest)) if counts else None,
    )


def shadow_audits_dropped(calls: list[list]) -> None:
    """Shadow analyses a full background queue dropped: each counted as skipped."""
    for _audit_id, candidate_ids in calls:
        analysis.count_skipped(candidate_ids)


@task(priority=LOWEST)
def replay_chunk(candidate_id: int) -> bool:
    """One step of a replay; queues the next behind what arrived meanwhile."""
    more = replay.run_chunk(candidate_id)
    if more:
        replay_chunk.enqueue(candidate_id)
    return more


def replay_chunks_dropped(calls: list[list]) -> None:
    """Replay steps a full background queue dropped: those replays failed."""
    for (candidate_id,) in calls:
        replay.give_up(candidate_id, "dropped: the background queue was full")


shadow_audit.func.dropped = shadow_audits_dropped
replay_chunk.func.dropped = replay_chunks_dropped
