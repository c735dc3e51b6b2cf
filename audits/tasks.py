"""Background tasks (django.tasks). Pass ids, never model instances."""

from __future__ import annotations

from django.tasks import task

from . import services, surfacing


@task()
def run_audit(run_id: str) -> str:
    """Audit one stored run; see `audits.services.execute_run`."""
    return str(services.execute_run(run_id))


def run_audit_batch(calls: list[list]) -> list[str]:
    """Several queued `run_audit` calls at once (`services.execute_runs`); a backend that
    batches a deep queue (audits.task_backends) calls this instead, with each call's args."""
    outcome = services.execute_runs([args[0] for args in calls])
    return [str(outcome.get(str(args[0]), "skipped")) for args in calls]


run_audit.func.batch = run_audit_batch


@task()
def resurface(job_id: int) -> str:
    """Re-surface the stored audits at a job's thresholds; see `audits.surfacing.run_job`."""
    return str(surfacing.run_job(job_id))
