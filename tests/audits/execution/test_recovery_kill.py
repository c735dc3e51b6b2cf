"""Nothing left pending: kill the server mid-batch and a worker mid-run; no command by hand.

Real processes (daphne, `manage.py db_worker`) on this run's file database, SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.tasks.base import TaskResultStatus

from audits.models import AuditRun
from tests.live_support import BASE_DIR, child_database_url, free_port, start_daphne, stop

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {
    "user_input": "Which retailers use Acme?",
    "response": "Acme is easy to set up. Decathlon grew conversion by 50%.",
}


def wait_until(predicate, timeout: float, step: float = 0.2) -> float:
    """Seconds until `predicate()` held; fails after `timeout`."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, "timed out"
        time.sleep(step)
    return time.monotonic() - start


def test_every_accepted_audit_completes_after_the_server_is_killed_mid_batch(
    tmp_path: Path, ingest_key: str
):
    """SIGKILL daphne during 300 submissions, start it again: every 2xx audit completes
    within 60 s of the restart, with the default recovery settings.

    The first server's analysis sleeps 0.2 s per audit, so some accepted audits are surely
    unfinished at the kill however fast the machine; the restarted server runs without it."""
    port = free_port()
    log = tmp_path / "daphne.log"
    server = start_daphne(
        port,
        log,
        AUDITOR_EXTRA_ANALYZERS="tests.slow_analyzer.SlowAnalyzer",
        SLOW_ANALYZER_SECONDS="0.2",
    )
    accepted: list[str] = []

    def submit(i: int) -> None:
        try:
            r = httpx.post(
                f"http://127.0.0.1:{port}/api/audits",
                json={**BODY, "external_id": f"kill-{i}"},
                headers={"Authorization": f"Bearer {ingest_key}"},
                timeout=10,
            )
        except httpx.HTTPError:
            return  # the server died under this request: not accepted, nothing promised
        if 200 <= r.status_code < 300:
            accepted.append(r.json()["id"])

    try:
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(submit, i) for i in range(300)]
            wait_until(lambda: len(accepted) >= 150, timeout=60, step=0.01)
            server.send_signal(signal.SIGKILL)
            server.wait(10)
            for f in futures:
                f.result()
        left = AuditRun.objects.filter(pk__in=accepted).exclude(status="complete").count()
        running = AuditRun.objects.filter(pk__in=accepted, status="running").count()
        assert left > 0, "the server finished everything before it died: kill sooner"

        server = start_daphne(port, log)
        restarted = time.monotonic()

        def all_complete() -> bool:
            return not AuditRun.objects.filter(pk__in=accepted).exclude(status="complete").exists()

        wait_until(all_complete, timeout=60, step=0.5)
        took = time.monotonic() - restarted
        print(
            f"\n{len(accepted)} accepted, {left} unfinished at the kill ({running} running); "
            f"all complete {took:.1f} s after the restart"
        )
    finally:
        stop(server)
    assert AuditRun.objects.filter(pk__in=accepted, attempts__gt=3).count() == 0


@pytest.fixture
def database_tasks(settings):
    from tests.conftest import IMMEDIATE, _reset_task_backends

    value = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    settings.TASKS = value
    _reset_task_backends(value)
    yield
    _reset_task_backends(IMMEDIATE)


def start_worker(log: Path, **env_extra: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "auditor_site.settings",
        "DATABASE_URL": child_database_url(),
        "AUDITOR_TASK_BACKEND": "database",
        "AUDITOR_EXTRA_ANALYZERS": "tests.slow_analyzer.SlowAnalyzer",
        "PYTHONPATH": str(BASE_DIR),
        "PYTHONUNBUFFERED": "1",
        **env_extra,
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "db_worker",
                "--no-reload",
                "--no-startup-delay",
                "--interval",
                "0.2",
            ],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_a_db_worker_killed_mid_run_is_taken_over_by_another(tmp_path: Path, database_tasks):
    """The task row a dead worker left RUNNING goes back to READY, the next worker runs it."""
    from django_tasks_db.models import DBTaskResult

    from audits.intake.submit import submit_audit

    run = submit_audit(**BODY)  # its task row commits with it
    task_row = DBTaskResult.objects.get()
    fast = {"AUDITOR_RECOVER_RUNNING_AFTER_S": "3", "AUDITOR_RECOVERY_INTERVAL": "1"}
    log = tmp_path / "worker.log"
    first = start_worker(log, SLOW_ANALYZER_SECONDS="60", **fast)
    try:
        wait_until(lambda: AuditRun.objects.get(pk=run.pk).status == "running", timeout=30)
        time.sleep(0.3)  # inside the slow analyzer
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    task_row.refresh_from_db()
    assert task_row.status == TaskResultStatus.RUNNING  # left behind by the dead worker
    assert AuditRun.objects.get(pk=run.pk).status == "running"

    second = start_worker(log, SLOW_ANALYZER_SECONDS="0.1", **fast)
    started = time.monotonic()
    try:
        wait_until(lambda: AuditRun.objects.get(pk=run.pk).status == "complete", timeout=60)
        print(
            f"\nrun complete {time.monotonic() - started:.1f} s after the second worker started"
            f" (deadline 3 s)"
        )
    finally:
        stop(second)
    task_row.refresh_from_db()
    assert task_row.status == TaskResultStatus.SUCCESSFUL  # the same row, taken over
    assert len(task_row.worker_ids) == 2
    run = AuditRun.objects.get(pk=run.pk)
    assert run.attempts == 2
    assert DBTaskResult.objects.count() == 1  # taken over, not queued twice


def test_a_task_row_that_killed_max_attempts_workers_fails_instead_of_looping(database_tasks):
    from datetime import timedelta

    from django.utils import timezone
    from django_tasks_db.models import DBTaskResult

    from audits.execution.recovery import take_over_task_rows
    from audits.intake.submit import submit_audit

    submit_audit(**BODY)
    submit_audit(**BODY)
    once, thrice = DBTaskResult.objects.all()
    long_ago = timezone.now() - timedelta(minutes=5)
    DBTaskResult.objects.filter(pk=once.pk).update(
        status=TaskResultStatus.RUNNING, started_at=long_ago, worker_ids=["a"]
    )
    DBTaskResult.objects.filter(pk=thrice.pk).update(
        status=TaskResultStatus.RUNNING, started_at=long_ago, worker_ids=["a", "b", "c"]
    )
    assert take_over_task_rows(stale_after=timedelta(seconds=30), max_attempts=3) == 1
    once.refresh_from_db(), thrice.refresh_from_db()
    assert once.status == TaskResultStatus.READY
    assert thrice.status == TaskResultStatus.FAILED


def test_the_run_of_a_dead_task_row_is_taken_over_with_it(database_tasks, settings):
    """A worker killed before its first beat left its row stale before its run (claimed just
    after): the run goes back to pending with the row, unless a live process beats it."""
    from datetime import timedelta

    from django.utils import timezone
    from django_tasks_db.models import DBTaskResult

    from audits.execution.recovery import take_over_task_rows
    from audits.intake.submit import submit_audit

    settings.AUDITOR_RECOVER_RUNNING_AFTER_S = 30  # beats every 7.5 s
    dead, live, spent = (submit_audit(**BODY) for _ in range(3))
    now = timezone.now()
    rows = {str(r.args_kwargs["args"][0]): r.pk for r in DBTaskResult.objects.all()}
    DBTaskResult.objects.update(
        status=TaskResultStatus.RUNNING, started_at=now - timedelta(seconds=31), worker_ids=["a"]
    )
    for run, age, attempts in ((dead, 29, 1), (live, 5, 1), (spent, 29, 3)):
        AuditRun.objects.filter(pk=run.pk).update(
            status="running", started_at=now - timedelta(seconds=age), attempts=attempts
        )

    assert take_over_task_rows(stale_after=timedelta(seconds=30), max_attempts=3) == 3
    assert DBTaskResult.objects.get(pk=rows[str(dead.pk)]).status == TaskResultStatus.READY
    assert AuditRun.objects.get(pk=dead.pk).status == "pending"
    assert AuditRun.objects.get(pk=live.pk).status == "running"  # beaten 5 s ago: alive
    assert AuditRun.objects.get(pk=spent.pk).status == "running"  # left for the run sweep
