"""Background tasks (django.tasks). Pass ids, never model instances."""

from __future__ import annotations

from django.tasks import task

from . import services


@task()
def run_audit(run_id: str) -> str:
    """Audit one stored run; see `audits.services.execute_run`."""
    return str(services.execute_run(run_id))
