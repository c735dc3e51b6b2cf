"""The audit tasks (django.tasks): they call down into the analysis and import nothing that
enqueues them. Pass ids, never model instances."""

from __future__ import annotations

from django.tasks import task

from audits.execution import execute, processes


@task()
def run_audit(run_id: str) -> str:
    """Audit one stored run; see `audits.execution.execute.execute_run` (in an analysis
    process when the thread backend has them: audits.execution.processes)."""
    if processes.configured():
        return str(processes.execute_runs([run_id]).get(str(run_id), "skipped"))
    return str(execute.execute_run(run_id))


def run_audit_batch(calls: list[list]) -> list[str]:
    """Several queued `run_audit` calls at once (`execute.execute_runs`); a backend that
    batches a deep queue (audits.execution.backend) calls this instead, with each call's args."""
    execute_runs = processes.execute_runs if processes.configured() else execute.execute_runs
    outcome = execute_runs([args[0] for args in calls])
    return [str(outcome.get(str(args[0]), "skipped")) for args in calls]


run_audit.func.batch = run_audit_batch
