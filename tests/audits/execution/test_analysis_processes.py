"""The thread backend with analysis processes (AUDITOR_ANALYSIS_PROCESSES): real spawned
children on this run's file database, their events published by this process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.tasks import task_backends

from audits.execution import execute, heap, processes
from audits.execution.recovery import recover_stale_runs
from audits.intake.submit import submit_audit, submit_audits
from audits.models import AnalyzerRunRecord, AuditRun
from audits.signals import audit_finished
from tests.conftest import IMMEDIATE, _reset_task_backends

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _in_memory_layer(settings):
    """These tests read the in-memory layer's groups (the PostgreSQL run sets REDIS_URL)."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


INPUT = {
    "user_input": "Which retailers use Acme?",
    "response": "Acme is easy to set up. Decathlon grew conversion by 50%. "
    "See https://www.acme.example/docs.",
}


def _backend(settings, processes: int = 1, workers: int = 2):
    value = {
        "default": {
            "BACKEND": "audits.execution.backend.ThreadPoolBackend",
            "OPTIONS": {"MAX_WORKERS": workers, "SWEEP_INTERVAL": 0, "PROCESSES": processes},
        }
    }
    settings.TASKS = value
    _reset_task_backends(value)
    return task_backends["default"]


@pytest.fixture
def process_tasks(settings):
    """The thread backend with one analysis process."""
    backend = _backend(settings)
    yield backend
    backend.close_connections()
    processes.shutdown()
    _reset_task_backends(IMMEDIATE)


@pytest.fixture
def not_in_this_process(monkeypatch):
    """Analysis in this process fails the test: only a child may run it."""

    def refuse(*args, **kwargs):
        raise AssertionError("analysed in the server process")

    monkeypatch.setattr(execute, "execute_runs", refuse)
    monkeypatch.setattr(execute, "execute_run", refuse)


def test_audits_are_analysed_and_stored_by_a_child_process(process_tasks, not_in_this_process):
    runs = submit_audits([dict(INPUT) for _ in range(40)])  # batches
    runs.append(submit_audit(**INPUT))  # and one alone
    assert process_tasks.wait_idle(timeout=60)

    ids = [r.pk for r in runs]
    assert set(AuditRun.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"complete"}
    assert AnalyzerRunRecord.objects.filter(audit__in=ids).count() >= len(ids)
    pids = processes.child_pids()
    assert len(pids) == 1 and os.getpid() not in pids  # bounded: PROCESSES children
    # the child froze what it holds for good at its start and after its first batch
    frozen, stages = processes._submit(heap.state)
    assert frozen > 0 and stages == ["analysis", "start"]
    assert heap.state()[1] == []  # this process (a test run) never does


def test_the_children_run_at_the_configured_niceness(settings, monkeypatch):
    monkeypatch.setenv("AUDITOR_ANALYSIS_NICE", "5")  # read by the children's settings
    _backend(settings)
    try:
        (child,) = {processes._submit(os.getpid)}
        nice = int(open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[16])  # noqa: SIM115
        assert nice == min(19, os.nice(0) + 5)
    finally:
        processes.shutdown()
        _reset_task_backends(IMMEDIATE)


def test_the_large_lane_analyses_in_the_server_and_small_audits_in_the_child(
    process_tasks, settings, monkeypatch
):
    settings.AUDITOR_LARGE_AUDIT_CHARS = 500
    here: list[str] = []
    original = execute.execute_run

    def recording(run_id):
        here.append(str(run_id))
        return original(run_id)

    monkeypatch.setattr(execute, "execute_run", recording)
    huge = submit_audit(user_input="q", response="Acme is fine. " * 100)
    small = submit_audit(**INPUT)
    assert process_tasks.wait_idle(timeout=60)
    assert here == [str(huge.pk)]  # the small one went to the child
    assert set(
        AuditRun.objects.filter(pk__in=[huge.pk, small.pk]).values_list("status", flat=True)
    ) == {"complete"}


def test_the_live_feed_and_the_finished_signal_come_from_this_process(process_tasks):
    layer = get_channel_layer()
    async_to_sync(layer.flush)()
    feed = async_to_sync(layer.new_channel)()
    page = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("audits", feed)
    runs = [submit_audit(**INPUT, enqueue=False) for _ in range(3)]
    watched = str(runs[0].pk)
    async_to_sync(layer.group_add)(f"audit-{watched}", page)
    finished_here: list[tuple[str, int]] = []

    def receiver(sender, audit_id, **kwargs):
        finished_here.append((audit_id, os.getpid()))

    audit_finished.connect(receiver, weak=False)
    try:
        outcome = processes.execute_runs([r.pk for r in runs])
    finally:
        audit_finished.disconnect(receiver)

    ids = {str(r.pk) for r in runs}
    assert outcome == {i: "complete" for i in ids}
    assert sorted(finished_here) == sorted((i, os.getpid()) for i in ids)

    def drain(channel: str) -> list[dict]:
        async def receive_all() -> list[dict]:
            got = []
            with contextlib.suppress(TimeoutError):
                while True:
                    message = await asyncio.wait_for(layer.receive(channel), 0.5)
                    got.append(message["event"])
            return got

        return async_to_sync(receive_all)()

    feed_events = drain(feed)
    kinds = {(e["type"], e["audit_id"]) for e in feed_events}
    for i in ids:
        assert ("audit_started", i) in kinds and ("audit_finished", i) in kinds
    assert all(e["type"] in {"audit_started", "audit_finished"} for e in feed_events)
    progress = drain(page)
    # The watched audit's page also gets the analyzers' progress; the others' is dropped.
    assert {e["audit_id"] for e in progress} == {watched}
    assert any(e["type"] == "analyzer_finished" for e in progress)


def _someone_waiting_in_the_child() -> bool:
    """(In a child.) Whether it sees someone waiting (it follows the count only when it
    is one of the children that make way)."""
    from audits.execution import people_first

    return people_first.someone_waiting()


def test_enough_children_make_way_to_leave_a_page_a_core():
    assert processes.children_making_way(2, 2) == 1
    assert processes.children_making_way(1, 2) == 0
    assert processes.children_making_way(1, 1) == 1
    assert processes.children_making_way(4, 2) == 3
    assert processes.children_making_way(2, 8) == 0


@pytest.fixture
def one_core(monkeypatch):
    """This machine has one core, so the one analysis process makes way for pages."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)


def test_a_child_makes_way_between_its_audits_while_a_page_is_served(one_core, process_tasks):
    """People first across processes: a child follows this process's count of people
    waiting (shared memory) and makes way before each audit, as a task thread does."""
    from django.utils import timezone

    from audits.execution import people_first

    run = submit_audit(**INPUT, enqueue=False)
    assert processes._submit(_someone_waiting_in_the_child) is False  # and it is up
    with people_first.waiting():
        assert processes._submit(_someone_waiting_in_the_child) is True
    started, page_done = threading.Event(), []

    def page() -> None:
        with people_first.waiting():
            started.set()
            time.sleep(0.05)  # well under the 100 ms an audit waits at most
            page_done.append(timezone.now())

    thread = threading.Thread(target=page)
    thread.start()
    started.wait(5)
    assert processes.execute_runs([run.pk]) == {str(run.pk): "complete"}
    thread.join()
    run.refresh_from_db()
    assert run.finished_at >= page_done[0]  # analysed once the page was served


def _requests_waiting_seen_by_the_child() -> tuple[bool, int]:
    """(In a child.) Whether it defers its transactions, and the count it sees."""
    from analyzers import lock_wait

    return lock_wait._deferring, lock_wait._requests_waiting.value


def test_a_child_sees_the_server_s_requests_waiting_for_the_write_lock(process_tasks):
    from analyzers import lock_wait

    assert processes._submit(_requests_waiting_seen_by_the_child) == (True, 0)
    shared = lock_wait._requests_waiting  # made with the pool
    shared.value += 1
    try:
        assert processes._submit(_requests_waiting_seen_by_the_child) == (True, 1)
    finally:
        shared.value -= 1
    assert lock_wait._deferring is False  # the server itself never defers


def test_a_child_killed_mid_batch_leaves_its_runs_to_recovery_and_the_pool_is_rebuilt(
    settings, monkeypatch
):
    monkeypatch.setenv("AUDITOR_EXTRA_ANALYZERS", "tests.slow_analyzer.SlowAnalyzer")
    monkeypatch.setenv("SLOW_ANALYZER_SECONDS", "60")  # in the child only: it hangs there
    backend = _backend(settings)
    runs = [submit_audit(**INPUT, enqueue=False) for _ in range(2)]
    ids = [r.pk for r in runs]
    failure: list[BaseException] = []

    def dispatch() -> None:
        try:
            processes.execute_runs(ids)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=dispatch)
    try:
        thread.start()
        deadline = time.monotonic() + 60
        while AuditRun.objects.filter(pk__in=ids, status="running").count() < 2:
            assert time.monotonic() < deadline, "the child never claimed the runs"
            time.sleep(0.05)
        (child,) = processes.child_pids()
        time.sleep(0.3)  # inside the slow analyzer
        os.kill(child, signal.SIGKILL)
        thread.join(30)
        assert not thread.is_alive()
        assert failure and isinstance(failure[0], BrokenProcessPool)
        assert set(AuditRun.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
            "running"
        }  # left behind, not lost

        # A new child (without the slow analyzer) takes them over through the recovery.
        monkeypatch.delenv("AUDITOR_EXTRA_ANALYZERS")
        outcome = recover_stale_runs(stale_after=timedelta(0))
        assert outcome["requeued"] == 2
        assert backend.wait_idle(timeout=60)
        done = AuditRun.objects.filter(pk__in=ids)
        assert {(r.status, r.attempts) for r in done} == {("complete", 2)}
        new_children = processes.child_pids()
        assert new_children and child not in new_children
    finally:
        backend.close_connections()
        processes.shutdown()
        _reset_task_backends(IMMEDIATE)


def test_a_child_orphaned_by_its_parent_exits():
    """A child checks its parent: the server's `os._exit` leaves no analysis process."""
    import subprocess
    import sys

    from tests.live_support import BASE_DIR

    code = (
        "import os, django\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'auditor_site.settings')\n"
        "django.setup()\n"
        "from audits.execution import processes as ap\n"
        "ap.configure(1)\n"
        "print(ap._submit(os.getpid), flush=True)\n"
        "os._exit(0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=BASE_DIR, capture_output=True, timeout=60, text=True
    )
    child = int(out.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}"):
        stat = open(f"/proc/{child}/stat").read().split()  # noqa: SIM115
        if stat[2] == "Z":
            break
        assert time.monotonic() < deadline, "the analysis process outlived its parent"
        time.sleep(0.1)


def _spawned_children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])  # noqa: SIM115
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read()  # noqa: SIM115
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            out.append(int(entry))
    return out


def test_the_server_default_is_two_processes_where_there_are_two_cores(monkeypatch):
    from auditor_site import serve

    for cores, expected in ((None, 0), (1, 0), (2, 2), (16, 2)):
        monkeypatch.setattr(serve.os, "cpu_count", lambda cores=cores: cores)
        assert serve.default_analysis_processes() == expected


def test_a_server_with_analysis_processes_completes_audits_and_they_end_with_it(
    tmp_path, ingest_key, monkeypatch
):
    """The shipped server (uvicorn) with its default (AUDITOR_ANALYSIS_PROCESSES unset: 2
    on this machine): its children start with it, analyse a batch posted over HTTP, and
    exit when it is SIGKILLed."""
    import httpx

    from auditor_site.serve import default_analysis_processes
    from tests.live_support import free_port, start_server, stop

    expected = default_analysis_processes()
    if expected < 2:
        pytest.skip("one core: the server's default is to analyse in its threads")
    monkeypatch.delenv("AUDITOR_ANALYSIS_PROCESSES", raising=False)  # the shipped default
    port = free_port()
    server = start_server(port, tmp_path / "server.log")
    try:
        deadline = time.monotonic() + 60
        while len(_spawned_children(server.pid)) < expected:  # started with the server
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.1)
        children = _spawned_children(server.pid)
        r = httpx.post(
            f"http://127.0.0.1:{port}/api/audits/batch",
            json={"audits": [dict(INPUT) for _ in range(30)]},
            headers={"Authorization": f"Bearer {ingest_key}"},
            timeout=30,
        )
        assert r.status_code == 202, r.text
        ids = [a["id"] for a in r.json()["items"]]
        deadline = time.monotonic() + 60
        while AuditRun.objects.filter(pk__in=ids).exclude(status="complete").exists():
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.1)
        assert AnalyzerRunRecord.objects.filter(audit__in=ids).count() >= len(ids)
        assert sorted(_spawned_children(server.pid)) == sorted(children)  # none died
        time.sleep(3)  # a child's own task backend, had it started children, has by now
        assert [grandchild for c in children for grandchild in _spawned_children(c)] == []
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        deadline = time.monotonic() + 10
        for child in children:
            while os.path.exists(f"/proc/{child}"):
                assert time.monotonic() < deadline, "an analysis process outlived the server"
                time.sleep(0.1)
    finally:
        stop(server)
