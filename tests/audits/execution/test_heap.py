"""audits.execution.heap: a long-lived process freezes what it holds for good, once per stage,
after collecting what is already garbage; a test run or a command never does. A batch of
audits runs without the cyclic collector."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from audits.execution import heap

ROOT = Path(__file__).resolve().parents[3]


def test_settle_collects_then_freezes_once_per_stage():
    script = textwrap.dedent("""
        import gc, weakref
        from audits.execution import heap

        before = heap.state()[0]  # (the interpreter may have frozen a few at its start)
        heap.after_analysis()  # not a settled process: nothing
        assert heap.state() == (before, []), heap.state()

        class Node: pass
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle, garbage once dropped
        dead = weakref.ref(a)
        del a, b
        kept = Node()

        assert heap.settle("start") is True
        assert dead() is None  # collected, not frozen for good
        frozen, stages = heap.state()
        assert frozen > before + 1000 and stages == ["start"], (before, frozen, stages)
        assert gc.is_tracked(kept)
        assert heap.settle("start") is False  # once
        assert heap.state()[0] == frozen

        heap.after_analysis()
        assert heap.state()[1] == ["analysis", "start"]
        print("ok")
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_test_run_is_never_settled():
    heap.after_analysis()
    assert heap.state()[1] == []


def test_a_batch_runs_without_collections_and_only_its_own_end_restarts_them():
    assert gc.isenabled()
    inside, entered, leave = [], threading.Event(), threading.Event()

    def other_batch():
        with heap.batch_without_collections():
            entered.set()
            leave.wait(10)
            inside.append(gc.isenabled())

    with heap.batch_without_collections():
        assert not gc.isenabled()
        other = threading.Thread(target=other_batch)
        other.start()
        assert entered.wait(10)
    # The first batch ended: the collector runs again although the other is still inside
    # (a pause lasts one batch at most, however the batches of threads overlap).
    assert gc.isenabled()
    leave.set()
    other.join(10)
    assert inside == [True] and gc.isenabled()


def test_a_collector_paused_by_someone_else_stays_paused():
    gc.disable()
    try:
        with heap.batch_without_collections():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.django_db
def test_a_batch_of_audits_is_analysed_and_stored_without_collections(monkeypatch):
    from audits.execution import execute
    from audits.intake import submit

    seen = []
    analyse_and_store = execute._analyse_and_store

    def recording(runs, outcome):
        seen.append(gc.isenabled())
        return analyse_and_store(runs, outcome)

    monkeypatch.setattr(execute, "_analyse_and_store", recording)
    runs = [
        submit.submit_audit(user_input=f"q{i}", response=f"Answer {i}.", enqueue=False)
        for i in range(2)
    ]
    assert set(execute.execute_runs([run.pk for run in runs]).values()) == {"complete"}
    assert seen == [False] and gc.isenabled()
