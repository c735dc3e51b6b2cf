"""The audit tasks (django.tasks): they call down into the analysis and import nothing that
enqueues them. Pass ids, never model instances."""

from __future__ import annotations

from django.tasks import task

from audits.execution import execute, processes


@task()
def run_audit(run_id: str, *more: str) -> str:
    """Audit one stored run, or several (a database queue row carries a submitted batch's
    runs: one claim and one transaction for them); see `audits.execution.execute` (in an
    analysis process when the thread backend has them: audits.execution.processes)."""
    if processes.configured() or more:
        execute_runs = processes.execute_runs if processes.configured() else execute.execute_runs
        outcome = execute_runs([run_id, *more])
        return ",".join(str(outcome.get(str(one), "skipped")) for one in (run_id, *more))
    return str(execute.execute_run(run_id))


def run_audit_batch(calls: list[list]) -> list[str]:
    """Several queued `run_audit` calls at once (`execute.execute_runs`); a backend that
    batches a deep queue (audits.execution.backend) calls this instead, with each call's args."""
    execute_runs = processes.execute_runs if processes.configured() else execute.execute_runs
    outcome = execute_runs([one for args in calls for one in args])
    return [",".join(str(outcome.get(str(one), "skipped")) for one in args) for args in calls]


run_audit.func.batch = run_audit_batch
