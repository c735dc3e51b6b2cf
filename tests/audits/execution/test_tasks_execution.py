"""Background execution: the task, failures, recovery of runs left behind, progress events."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from audits.execution import execute
from audits.execution.recovery import recover_stale_runs
from audits.intake.submit import submit_audit
from audits.models import AuditRun
from tests.live_support import child_database_url

BASE_DIR = Path(__file__).resolve().parents[3]
INPUT = {"user_input": "Which retailers use Acme?", "response": "Acme is easy to set up."}


@pytest.mark.django_db
def test_submit_stores_a_pending_run_with_a_config_snapshot():
    run = submit_audit(**INPUT, enqueue=False)
    run.refresh_from_db()
    assert run.status == "pending"
    assert run.threshold == 0.3
    assert run.config_snapshot["threshold"] == 0.3
    assert run.attempts == 0


@pytest.mark.django_db
def test_execute_run_stores_results_and_completes():
    run = submit_audit(**INPUT, enqueue=False)
    assert execute.execute_run(run.pk) == "complete"
    run.refresh_from_db()
    assert run.status == "complete"
    assert run.attempts == 1
    assert run.started_at <= run.finished_at
    assert run.overall_score is not None
    assert run.results.filter(analyzer_id="redflag").exists()
    assert execute.execute_run(run.pk) == "skipped"  # never twice


@pytest.mark.django_db
def test_a_crashing_run_is_marked_failed_with_its_error(monkeypatch):
    run = submit_audit(**INPUT, enqueue=False)

    def boom(config):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(execute, "build_auditor", boom)
    assert execute.execute_run(run.pk) == "failed"
    run.refresh_from_db()
    assert run.status == "failed"
    assert "engine exploded" in run.error
    assert run.finished_at is not None


@pytest.mark.django_db
def test_a_failing_analyzer_does_not_fail_the_audit(settings):
    from analyzers import config_store

    settings.AUDITOR_EXTRA_ANALYZERS = ["tests.slow_analyzer.ExplodingAnalyzer"]
    config_store._cache.pop("registry", None)
    try:
        run = submit_audit(**INPUT, enqueue=False)
        execute.execute_run(run.pk)
        run.refresh_from_db()
        failed = run.results.get(analyzer_id="exploding")
        assert run.status == "complete"
        assert failed.status == "failed" and "kaboom" in failed.error
    finally:
        config_store._cache.pop("registry", None)


@pytest.mark.django_db
def test_recovery_requeues_stale_runs_and_gives_up_after_max_attempts():
    stale = submit_audit(**INPUT, enqueue=False)
    spent = submit_audit(**INPUT, enqueue=False)
    fresh = submit_audit(**INPUT, enqueue=False)
    long_ago = timezone.now() - timedelta(hours=1)
    AuditRun.objects.filter(pk=stale.pk).update(status="running", started_at=long_ago, attempts=1)
    AuditRun.objects.filter(pk=spent.pk).update(status="running", started_at=long_ago, attempts=3)
    AuditRun.objects.filter(pk=fresh.pk).update(status="running", started_at=timezone.now())

    outcome = recover_stale_runs(stale_after=timedelta(minutes=5))

    assert outcome == {"requeued": 1, "failed": 1, "pending_requeued": 0}
    stale.refresh_from_db(), spent.refresh_from_db(), fresh.refresh_from_db()
    assert stale.status == "complete" and stale.attempts == 2  # ran again (immediate backend)
    assert spent.status == "failed" and "gave up after 3 attempts" in spent.error
    assert fresh.status == "running"


@pytest.mark.django_db
def test_old_pending_runs_can_be_requeued():
    run = submit_audit(**INPUT, enqueue=False)
    AuditRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))
    outcome = recover_stale_runs(pending_after=timedelta(minutes=1))
    assert outcome["pending_requeued"] == 1
    run.refresh_from_db()
    assert run.status == "complete"


@pytest.mark.django_db(transaction=True)
def test_the_thread_backend_runs_audits_in_the_background(thread_tasks):
    runs = [submit_audit(**INPUT) for _ in range(5)]
    assert thread_tasks.wait_idle(timeout=30)
    statuses = set(
        AuditRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    )
    assert statuses == {"complete"}


@pytest.mark.django_db(transaction=True)
def test_progress_events_are_published_to_the_groups():
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("audits", channel)
    run = submit_audit(**INPUT, enqueue=False)
    async_to_sync(layer.group_add)(f"audit-{run.pk}", channel)
    execute.execute_run(run.pk)

    events = []

    async def drain():
        import asyncio

        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), timeout=0.5)
            except TimeoutError:
                return
            events.append(message)

    async_to_sync(drain)()
    assert all(m["type"] == "audit.event" for m in events)
    kinds = [m["event"]["type"] for m in events]
    # Every event reaches both groups ("audits" and "audit-<id>"): each appears twice.
    assert kinds.count("audit_started") == 2
    assert "analyzer_started" in kinds and "analyzer_finished" in kinds
    assert kinds[-1] == "audit_finished"
    finished = events[-1]["event"]
    assert finished["audit_id"] == str(run.pk) and finished["status"] == "complete"


def test_publish_never_raises(monkeypatch):
    import audits.events as events

    def broken():
        raise RuntimeError("no layer")

    monkeypatch.setattr(events, "get_channel_layer", broken)
    events.publish({"type": "x", "audit_id": "1"})


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_run_leaves_a_run_completed_on_restart():
    """SIGKILL a real worker process during the analysis; recovery completes the run."""
    run = submit_audit(**INPUT, enqueue=False)
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "AUDITOR_EXTRA_ANALYZERS": "tests.slow_analyzer.SlowAnalyzer",
        "AUDITOR_TASK_BACKEND": "immediate",
        "PYTHONPATH": str(BASE_DIR),
        "DJANGO_SETTINGS_MODULE": "auditor_site.settings",
    }
    worker = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            f"from audits.execution.execute import execute_run; execute_run('{run.pk}')",
        ],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            run.refresh_from_db()
            if run.status == "running":
                break
            assert worker.poll() is None, worker.stderr.read().decode()
            time.sleep(0.05)
        assert run.status == "running"
        time.sleep(0.3)  # well inside the slow analyzer
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    run.refresh_from_db()
    assert run.status == "running"  # left behind by the dead worker

    # The restarted worker (this process) recovers it; the slow analyzer is not installed here.
    outcome = recover_stale_runs(stale_after=timedelta(0))
    assert outcome["requeued"] == 1
    run.refresh_from_db()
    assert run.status == "complete"
    assert run.attempts == 2


@pytest.mark.django_db
def test_create_api_key_command_prints_the_key_once():
    from io import StringIO

    from django.core.management import call_command

    from analyzers.models import ApiKey

    out = StringIO()
    call_command("create_api_key", "ci", "--scope", "admin", stdout=out, stderr=StringIO())
    raw = out.getvalue().strip()
    key = ApiKey.objects.get(name="ci")
    assert key.scope == "admin"
    assert ApiKey.authenticate(raw) == key
    assert raw not in key.secret_hash


@pytest.mark.django_db
def test_every_audit_in_a_process_shares_one_link_checker_and_its_cache(settings):
    from analyzers.engine.config import AuditorConfig
    from audits.execution.execute import build_auditor

    first = build_auditor(AuditorConfig()).services["link_checker"]
    assert build_auditor(AuditorConfig()).services["link_checker"] is first
    assert first.allow_private_networks is settings.AUDITOR_ALLOW_PRIVATE_NETWORKS
    settings.AUDITOR_ALLOW_PRIVATE_NETWORKS = not settings.AUDITOR_ALLOW_PRIVATE_NETWORKS
    other = build_auditor(AuditorConfig()).services["link_checker"]
    assert other.allow_private_networks is settings.AUDITOR_ALLOW_PRIVATE_NETWORKS


@pytest.mark.django_db
def test_pending_runs_no_queue_holds_are_requeued_with_no_flags(settings):
    settings.AUDITOR_RECOVER_PENDING_AFTER_S = 30
    old = submit_audit(**INPUT, enqueue=False)
    new = submit_audit(**INPUT, enqueue=False)
    AuditRun.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(seconds=31))
    outcome = recover_stale_runs()
    assert outcome["pending_requeued"] == 1
    old.refresh_from_db(), new.refresh_from_db()
    assert old.status == "complete" and new.status == "pending"
    # Created before this process started: nobody else can hold it.
    outcome = recover_stale_runs(pending_before=timezone.now())
    new.refresh_from_db()
    assert outcome["pending_requeued"] == 1 and new.status == "complete"


@pytest.mark.django_db(transaction=True)
def test_a_pending_run_the_thread_backend_holds_is_not_queued_again(thread_tasks):
    import threading

    gate = threading.Event()
    thread_tasks._pool.executor.submit(gate.wait, 30)  # both threads busy: the run waits
    thread_tasks._pool.executor.submit(gate.wait, 30)
    run = submit_audit(**INPUT)
    try:
        outcome = recover_stale_runs(pending_before=timezone.now())
        assert outcome["pending_requeued"] == 0
    finally:
        gate.set()
    assert thread_tasks.wait_idle(timeout=30)
    run.refresh_from_db()
    assert run.status == "complete" and run.attempts == 1


@pytest.mark.django_db
def test_the_heartbeat_keeps_a_running_run_from_being_taken_over(settings):
    from audits.execution import heartbeats, recovery

    run = submit_audit(**INPUT, enqueue=False)
    long_ago = timezone.now() - timedelta(minutes=10)
    AuditRun.objects.filter(pk=run.pk).update(status="running", started_at=long_ago, attempts=1)
    with heartbeats.running_run(run.pk):
        recovery.beat()
    assert recover_stale_runs(stale_after=timedelta(seconds=30))["requeued"] == 0
    run.refresh_from_db()
    assert run.status == "running" and run.started_at > long_ago
    recovery.beat()  # no longer running here: not refreshed
    assert recover_stale_runs(stale_after=timedelta(0))["requeued"] == 1


@pytest.mark.django_db
def test_a_claim_that_hits_a_locked_database_leaves_a_run_the_sweep_requeues(monkeypatch):
    from django.db import OperationalError

    run = submit_audit(**INPUT, enqueue=False)

    def locked(run_id):
        raise OperationalError("database is locked")

    monkeypatch.setattr(execute, "_claim", locked)
    with pytest.raises(OperationalError):
        execute.execute_run(run.pk)
    monkeypatch.undo()
    run.refresh_from_db()
    assert run.status == "pending"
    AuditRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(minutes=1))
    assert recover_stale_runs()["pending_requeued"] == 1
    run.refresh_from_db()
    assert run.status == "complete"
