"""What a long-lived process holds for good, handed to the collector's permanent generation.

A full collection of the cyclic garbage collector walks every object the process tracks:
the modules, Django's and pydantic's schemas, the engine's caches (and its word-frequency
table, several hundred thousand entries, once a claim needed it). In an analysis process
that walk came back every few hundred audits, a noticeable share of its CPU
(docs/contributing/performance.md). `gc.freeze()` moves
the objects alive now out of the collector's sight, so later collections walk only what
was made since (what the Python documentation advises for long-running servers).

Garbage is collected just before (`gc.collect()`), so nothing already unreachable is kept;
an object frozen here and later dropped is still freed by its reference count, and only a
reference cycle among such objects (none is made by design: see
tests/analyzers/engine/test_engine_no_cycles.py) would stay.

While a batch of audits is analysed and stored (`services.execute_runs`), the collector
does not run at all (`batch_without_collections`, lifted once the batch's runs and reports
are freed): the batch keeps its reports until they are stored, and each young-generation
pass walked them again (a sizeable share of the engine's own time; figures in
docs/contributing/performance.md). The engine and
storing make no reference cycles, so nothing waits for the collector; what another thread
of the process made meanwhile is collected when the batch ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_settled: set[str] = set()
_paused = False  # a batch of this process paused the collector


def settle(stage: str) -> bool:
    """Freeze what is alive now, once per process and `stage` ("start": after the
    process's setup; "analysis": after its first batch, see `after_analysis`). True when
    this call froze."""
    with _lock:
        if stage in _settled:
            return False
        _settled.add(stage)
    gc.collect()
    gc.freeze()
    return True


def after_analysis() -> None:
    """After an analysed batch, in a process that settled at its start (the server, an
    analysis process, a `db_worker`; never a test run or a management command): settle
    once more with the caches the batch filled."""
    if "start" in _settled:
        settle("analysis")


def state() -> tuple[int, list[str]]:
    """(objects frozen, stages settled) of this process."""
    return gc.get_freeze_count(), sorted(_settled)


@contextmanager
def batch_without_collections() -> Iterator[None]:
    """No cyclic collection while the body (a batch of audits) runs. The first thread in
    pauses the collector and its batch's end restarts it: the batches of other threads
    never extend the pause, so it lasts one batch at most. A collector paused by someone
    else stays as it is."""
    global _paused
    with _lock:
        mine = not _paused and gc.isenabled()
        if mine:
            _paused = True
            gc.disable()
    try:
        yield
    finally:
        if mine:
            with _lock:
                _paused = False
                gc.enable()
