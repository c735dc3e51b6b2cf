"""Background work never delays audits: with the thread backend, shadow analysis runs on
its own lane only while no audit is queued or running, a shadow backlog waits behind
audits submitted after it (deferred, not dropped), and past its bound the oldest are
dropped and counted on the candidate."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path

import pytest
from django.tasks import task, task_backends

from analyzers import candidates, config_store
from analyzers.config_store import save_config
from analyzers.models import CandidateConfig
from audits.intake.submit import submit_audit
from audits.models import AuditRun, ShadowResult
from audits.shadow import hooks
from audits.shadow.tasks import shadow_audit
from tests.conftest import IMMEDIATE, _reset_task_backends

SAMPLE = json.loads((Path(__file__).parents[2] / "samples" / "config.json").read_text())
SHADOW_SECONDS = 0.05  # the candidate's slow analyzer, per shadow analysis
BACKLOG = 50


@pytest.fixture
def slow_candidate(settings):
    """The active configuration (the slow analyzer off) and a candidate in shadow whose
    analysis sleeps `SHADOW_SECONDS` (the slow analyzer on)."""
    settings.AUDITOR_EXTRA_ANALYZERS = ["tests.slow_analyzer.SlowAnalyzer"]
    config_store._cache.pop("registry", None)  # built again with the slow analyzer
    active = copy.deepcopy(SAMPLE)
    active["analyzers"]["slow"] = {"enabled": False, "seconds": 60}
    save_config(active, actor="test")
    shadow = copy.deepcopy(active)
    shadow["analyzers"]["slow"] = {"enabled": True, "seconds": SHADOW_SECONDS}
    hooks.invalidate()
    candidate = candidates.create_candidate(name="slow", config=shadow)
    yield candidate
    hooks.invalidate()
    config_store._cache.pop("registry", None)


def wait_complete(run_id, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if AuditRun.objects.filter(pk=run_id, status="complete").exists():
            return
        time.sleep(0.005)
    raise AssertionError(f"audit {run_id} did not complete in {timeout} s")


@pytest.mark.django_db(transaction=True)
def test_an_audit_submitted_after_a_shadow_backlog_finishes_before_the_backlog(
    thread_tasks, slow_candidate
):
    first = submit_audit(user_input="q", response="Acme ships on Tuesdays.")
    assert thread_tasks.wait_idle(30)
    assert ShadowResult.objects.filter(candidate=slow_candidate, audit=first).exists()
    ShadowResult.objects.all().delete()

    backlog = [shadow_audit.enqueue(str(first.pk), [slow_candidate.pk]) for _ in range(BACKLOG)]
    late = submit_audit(user_input="q2", response="Acme ships on Thursdays.")
    wait_complete(late.pk)
    left = sum(thread_tasks.get_result(r.id).status == "READY" for r in backlog)
    # At most one shadow analysis started before the audit arrived; the rest wait for it.
    assert left >= BACKLOG - 2, f"only {left} of {BACKLOG} shadow tasks were still queued"

    assert thread_tasks.wait_idle(60)  # deferred, not dropped: the whole backlog runs after
    assert all(thread_tasks.get_result(r.id).status == "SUCCESSFUL" for r in backlog)
    assert ShadowResult.objects.filter(candidate=slow_candidate, audit=first).exists()
    assert CandidateConfig.objects.get(pk=slow_candidate.pk).shadow_skipped == 0


HOLD: dict = {}


@task()
def hold() -> str:
    """An audit-priority task that runs until the test opens its gate."""
    HOLD["gate"].wait(10)
    return "held"


def wait_status(backend, result_id: str, status: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while backend.get_result(result_id).status != status:
        assert time.monotonic() < deadline, f"task {result_id} never {status}"
        time.sleep(0.002)


@pytest.mark.django_db(transaction=True)
def test_a_shadow_task_defers_the_candidates_left_when_an_audit_arrives(
    thread_tasks, slow_candidate
):
    """An audit arriving during the first candidate's analysis goes before the second's:
    the task analyses one and queues the other again, which runs once the audit is done."""
    longer = copy.deepcopy(slow_candidate.config)
    longer["analyzers"]["slow"]["seconds"] = 0.5
    CandidateConfig.objects.filter(pk=slow_candidate.pk).update(config=longer)
    second = candidates.create_candidate(name="slow 2", config=slow_candidate.config)
    run = submit_audit(user_input="q", response="Acme ships on Tuesdays.")
    assert thread_tasks.wait_idle(30)
    ShadowResult.objects.all().delete()
    HOLD["gate"] = gate = threading.Event()
    result = shadow_audit.enqueue(str(run.pk), [slow_candidate.pk, second.pk])
    wait_status(thread_tasks, result.id, "RUNNING")
    holding = hold.enqueue()  # arrives during the first candidate's half second
    wait_status(thread_tasks, result.id, "SUCCESSFUL")
    assert thread_tasks.get_result(result.id).return_value == 1
    # The second candidate queued again, behind the audit.
    assert [str(run.pk), [second.pk]] in thread_tasks.queued_args(shadow_audit.module_path)
    assert list(ShadowResult.objects.values_list("candidate_id", flat=True)) == [slow_candidate.pk]
    gate.set()
    assert thread_tasks.wait_idle(30)
    assert thread_tasks.get_result(holding.id).status == "SUCCESSFUL"
    assert sorted(ShadowResult.objects.values_list("candidate_id", flat=True)) == sorted(
        [slow_candidate.pk, second.pk]
    )


@pytest.mark.django_db(transaction=True)
def test_a_full_background_queue_drops_the_oldest_and_counts_them(settings, slow_candidate):
    value = {
        "default": {
            "BACKEND": "audits.execution.backend.ThreadPoolBackend",
            "OPTIONS": {"MAX_WORKERS": 2, "SWEEP_INTERVAL": 0, "MAX_BACKGROUND": 5},
        }
    }
    settings.TASKS = value
    _reset_task_backends(value)
    backend = task_backends["default"]
    try:
        run = submit_audit(user_input="q", response="Acme ships on Tuesdays.")
        assert backend.wait_idle(30)
        skipped_before = CandidateConfig.objects.get(pk=slow_candidate.pk).shadow_skipped
        HOLD["gate"] = gate = threading.Event()
        holding = hold.enqueue()  # the lane waits: the queue fills up
        queued = [shadow_audit.enqueue(str(run.pk), [slow_candidate.pk]) for _ in range(8)]
        statuses = [backend.get_result(r.id).status for r in queued]
        assert statuses == ["FAILED"] * 3 + ["READY"] * 5  # the oldest dropped
        assert (
            CandidateConfig.objects.get(pk=slow_candidate.pk).shadow_skipped == skipped_before + 3
        )
        gate.set()
        assert backend.wait_idle(30)
        assert backend.get_result(holding.id).status == "SUCCESSFUL"
        assert all(backend.get_result(r.id).status == "SUCCESSFUL" for r in queued[3:])
    finally:
        backend.close_connections()
        _reset_task_backends(IMMEDIATE)
