"""Fair scheduling: huge audits have their own lane, `?wait=true` is bounded in time and
per key, and small submissions are not starved by big ones."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from django.tasks import task

from audits.models import AuditRun
from audits.queues import LARGE_QUEUE
from tests.live_support import daphne

GATE = threading.Event()
RAN: list[str] = []


@task()
def blocking_job(name: str) -> str:
    """Waits for the test to open the gate (a huge audit holding its thread)."""
    GATE.wait(10)
    RAN.append(name)
    return name


@task()
def quick_job(name: str) -> str:
    RAN.append(name)
    return name


def test_large_tasks_run_on_their_own_lane_and_never_hold_the_small_one(thread_tasks):
    GATE.clear()
    RAN.clear()
    large = blocking_job.using(queue_name=LARGE_QUEUE)
    # Twice as many huge jobs as the small lane has threads.
    for i in range(2 * thread_tasks.max_workers):
        large.enqueue(f"large {i}")
    small = [quick_job.enqueue(f"small {i}") for i in range(3)]
    deadline = time.monotonic() + 5
    while len(RAN) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(RAN) == ["small 0", "small 1", "small 2"]  # while every large one waits
    assert all(thread_tasks.get_result(r.id).status == "SUCCESSFUL" for r in small)
    GATE.set()
    assert thread_tasks.wait_idle(10)
    assert len(RAN) == 3 + 2 * thread_tasks.max_workers


@pytest.mark.django_db
def test_wait_true_answers_202_when_the_audit_takes_longer_than_the_bound(
    api_client, ingest_key, settings
):
    from tests.conftest import _reset_task_backends

    dummy = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
    settings.TASKS = dummy
    _reset_task_backends(dummy)  # queued, never run: the audit cannot finish in time
    settings.AUDITOR_WAIT_TIMEOUT_S = 0.3
    r = api_client.post(
        "/api/audits?wait=true", {"user_input": "q", "response": "r"}, key=ingest_key
    )
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["status"] == "pending"
    assert AuditRun.objects.get(pk=body["id"]).status == "pending"  # stored, not lost


@pytest.mark.django_db(transaction=True)
def test_huge_waits_of_one_key_do_not_starve_others(tmp_path, make_key):
    """On a real server: one key's huge `wait=true` audits are bounded (one waits, the
    others are queued with 202 at once) and run on the large lane, while another key's
    small `wait=true` audit completes at once."""
    big_key, small_key = make_key("ingest", "big"), make_key("ingest", "small")
    env = {
        "AUDITOR_EXTRA_ANALYZERS": "tests.slow_analyzer.SlowOnLargeAnalyzer",
        "SLOW_ANALYZER_SECONDS": "4",
        "AUDITOR_WAIT_TIMEOUT_S": "2",
        "AUDITOR_WAIT_PER_KEY": "1",
        "AUDITOR_LARGE_AUDIT_CHARS": "1000",
        "AUDITOR_RATE_LIMIT_PER_MINUTE": "0",
    }
    huge = {"user_input": "q", "response": "Acme is fine. " * 200}
    with daphne(tmp_path, **env) as host:
        url = f"http://{host}/api/audits?wait=true"
        outcomes: list[tuple[int, float, str]] = []

        def post_huge() -> None:
            started = time.monotonic()
            r = httpx.post(
                url, json=huge, headers={"Authorization": f"Bearer {big_key}"}, timeout=30
            )
            outcomes.append((r.status_code, time.monotonic() - started, r.json()["id"]))

        threads = [threading.Thread(target=post_huge) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        started = time.monotonic()
        small = httpx.post(
            url,
            json={"user_input": "q", "response": "Acme is fine."},
            headers={"Authorization": f"Bearer {small_key}"},
            timeout=30,
        )
        small_s = time.monotonic() - started
        for t in threads:
            t.join()
        assert small.status_code == 201 and small.json()["status"] == "complete"
        assert small_s < 1.5
        assert sorted(code for code, _, _ in outcomes) == [202, 202, 202]
        quick = sorted(seconds for _, seconds, _ in outcomes)
        assert quick[1] < 1.5  # no wait slot left for the key: queued at once
        assert 1.5 < quick[2] < 4  # the one that waited, for the bound and not longer
        # Nothing is lost: every huge audit completes in the background.
        deadline = time.monotonic() + 30
        ids = [audit_id for _, _, audit_id in outcomes]
        while time.monotonic() < deadline:
            if AuditRun.objects.filter(pk__in=ids, status="complete").count() == 3:
                break
            time.sleep(0.2)
        assert AuditRun.objects.filter(pk__in=ids, status="complete").count() == 3


@pytest.mark.django_db(transaction=True)
def test_recovery_requeues_a_large_audit_on_its_own_lane(thread_tasks, settings):
    from django.tasks.signals import task_enqueued
    from django.utils import timezone

    from audits.execution.recovery import recover_stale_runs
    from audits.intake.submit import submit_audit

    settings.AUDITOR_LARGE_AUDIT_CHARS = 50
    small = submit_audit(user_input="q", response="A short answer.", enqueue=False)
    big = submit_audit(user_input="q", response="A long answer. " * 10, enqueue=False)
    queues: dict[str, str] = {}

    def seen(sender, task_result, **kwargs):
        queues[str(task_result.args[0])] = task_result.task.queue_name

    task_enqueued.connect(seen)
    try:
        recover_stale_runs(pending_before=timezone.now())
    finally:
        task_enqueued.disconnect(seen)
    assert thread_tasks.wait_idle(timeout=30)
    assert queues == {str(small.pk): "default", str(big.pk): LARGE_QUEUE}
