"""A restarted PostgreSQL ends no `db_worker`: it reconnects and analyses what was queued,
before and during the restart, each audit once (on the throwaway cluster of `make
test-postgres`; skipped elsewhere)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
from django.db import connection
from django.db.models import Count

from audits.models import AnalyzerRunRecord, AuditRun
from bench.services import PgCluster
from tests.live_support import BASE_DIR, child_database_url, live_server

pytestmark = pytest.mark.django_db(transaction=True)

# Recovery on a short clock: a batch cut by the restart is taken over within seconds.
FAST_RECOVERY = {
    "AUDITOR_RECOVER_RUNNING_AFTER_S": "4",
    "AUDITOR_RECOVERY_INTERVAL": "1",
    "AUDITOR_RECOVER_PENDING_AFTER_S": "4",
}


@pytest.fixture
def cluster() -> PgCluster:
    found = PgCluster.from_environment()
    if found is None or connection.vendor != "postgresql":
        pytest.skip("needs the throwaway cluster of `make test-postgres`")
    return found


def start_worker(log) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "AUDITOR_TASK_BACKEND": "database",
        "PYTHONUNBUFFERED": "1",
        **FAST_RECOVERY,
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "db_worker", "--interval", "0.1"],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def submit(host: str, key: str, n: int, tag: str) -> list[str]:
    ids = []
    with httpx.Client(
        base_url=f"http://{host}", timeout=30, headers={"Authorization": f"Bearer {key}"}
    ) as http:
        for i in range(n):
            for _ in range(50):  # the server's own connection may be the one cut: retry
                r = http.post(
                    "/api/audits",
                    json={
                        "user_input": f"{tag} {i}",
                        "response": "Acme is easy to use.",
                        "external_id": f"{tag}-{i}",
                    },
                )
                if r.status_code in (200, 201, 202):
                    break
                time.sleep(0.2)
            assert r.status_code in (200, 201, 202), r.text
            ids.append(r.json()["id"])
    return ids


def wait_analysed(ids: list[str], worker: subprocess.Popen, log, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        done = AuditRun.objects.filter(pk__in=ids, status=AuditRun.Status.COMPLETE).count()
        connection.close()
        if done == len(ids):
            return
        assert worker.poll() is None, f"the worker died: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{done}/{len(ids)} analysed: {log.read_text()[-3000:]}"
        time.sleep(0.3)


def test_a_db_worker_survives_a_postgresql_restart_and_analyses_each_audit_once(
    cluster, ingest_key, tmp_path
):
    log = tmp_path / "worker.log"
    with live_server(tmp_path, AUDITOR_TASK_BACKEND="database", **FAST_RECOVERY) as host:
        worker = start_worker(log)
        try:
            first = submit(host, ingest_key, 10, "before")
            wait_analysed(first, worker, log)

            idle = tmp_path / "idle"  # the worker waits for work: its claim is cut
            connection.close()
            cluster.restart()
            time.sleep(1.5)
            assert worker.poll() is None, log.read_text()[-3000:]
            second = submit(host, ingest_key, 10, idle.name)
            wait_analysed(second, worker, log)

            busy = submit(host, ingest_key, 150, "busy")  # mid-batch this time
            connection.close()
            cluster.restart()
            third = submit(host, ingest_key, 10, "after")
            wait_analysed(busy + third, worker, log)
            assert worker.poll() is None
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    assert "lost the database" in log.read_text()
    twice = (
        AnalyzerRunRecord.objects.values("audit_id", "analyzer_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    assert not twice.exists()
    assert AuditRun.objects.filter(status=AuditRun.Status.COMPLETE).count() == 180
