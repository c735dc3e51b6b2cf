"""audits.heap: a long-lived process freezes what it holds for good, once per stage,
after collecting what is already garbage; a test run or a command never does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from audits import heap

ROOT = Path(__file__).resolve().parents[1]


def test_settle_collects_then_freezes_once_per_stage():
    script = textwrap.dedent("""
        import gc, weakref
        from audits import heap

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
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_test_run_is_never_settled():
    heap.after_analysis()
    assert heap.state()[1] == []
