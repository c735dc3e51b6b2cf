"""Background tasks (django.tasks). Pass ids, never model instances."""

from __future__ import annotations

from django.tasks import task

from . import analysis_processes, services, surfacing


@task()
def run_audit(run_id: str) -> str:
    """Audit one stored run; see `audits.services.execute_run` (in an analysis process
    when the thread backend has them: audits.analysis_processes)."""
    if analysis_processes.configured():
        return str(analysis_processes.execute_runs([run_id]).get(str(run_id), "skipped"))
    return str(services.execute_run(run_id))


def run_audit_batch(calls: list[list]) -> list[str]:
    """Several queued `run_audit` calls at once (`services.execute_runs`); a backend that
    batches a deep queue (audits.task_backends) calls this instead, with each call's args."""
    execute = (analysis_processes.execute_runs if analysis_processes.configured()
               else services.execute_runs)
    outcome = execute([args[0] for args in calls])
    return [str(outcome.get(str(args[0]), "skipped")) for args in calls]


run_audit.func.batch = run_audit_batch


@task()
def resurface(job_id: int) -> str:
    """Re-surface the stored audits at a job's thresholds; see `audits.surfacing.run_job`."""
    return str(surfacing.run_job(job_id))
