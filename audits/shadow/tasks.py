"""Shadow tasks (django.tasks), queued at the lowest priority. Pass ids, never instances."""

from __future__ import annotations

from django.tasks import task

from audits.shadow import analysis, replay

LOWEST = -100


@task(priority=LOWEST)
def shadow_audit(audit_id: str, candidate_ids: list[int]) -> int:
    """Analyse a finished audit with the candidates in shadow; see analysis.shadow_audit."""
    return analysis.shadow_audit(audit_id, candidate_ids)


@task(priority=LOWEST)
def replay_chunk(candidate_id: int) -> bool:
    """One step of a replay; queues the next behind what arrived meanwhile."""
    more = replay.run_chunk(candidate_id)
    if more:
        replay_chunk.enqueue(candidate_id)
    return more
