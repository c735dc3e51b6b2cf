"""People first: background analysis makes way while a person waits for a page.

Analysis and the pages share one process and, in CPython, one interpreter lock. Under a
deep queue the analysis threads hold it most of the time, and a dashboard page took many
times its own CPU time to answer (docs/contributing/performance.md). So a page request (`waiting()`, entered by the ASGI app for
dashboard pages and by the live feed while it renders cards) is counted, and the
analysis, between two audits (`make_way()`), sleeps while the count is not zero: at most
`MAX_PAUSE_S` per audit, so a steady stream of pages slows the queue down but never
stalls it. An audit already under way is never interrupted.

Analysis processes (audits.analysis_processes) do not share the lock, but they share the
cores: two of them on two cores left a page a third of a core's time. So the count is
mirrored into shared memory (`shared_count`, handed to each child when it starts), and
the children that make way (`follow`: as many as leave a page a core) do so between their
audits exactly as a thread does.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

MAX_PAUSE_S = 0.1  # per audit
POLL_S = 0.002

_lock = threading.Lock()
_waiting = 0
_shared: Any = None  # a multiprocessing RawValue("i"): the parent's count, for its children


@contextmanager
def waiting() -> Iterator[None]:
    """A person waits for what runs inside (from any thread or loop)."""
    global _waiting
    with _lock:
        _waiting += 1
        if _shared is not None:
            _shared.value = _waiting
    try:
        yield
    finally:
        with _lock:
            _waiting -= 1
            if _shared is not None:
                _shared.value = _waiting


def shared_count(context: Any) -> Any:
    """The count in shared memory (made once, with `context`'s RawValue), for `follow`."""
    global _shared
    with _lock:
        if _shared is None:
            _shared = context.RawValue("i", _waiting)
        return _shared


def follow(shared: Any) -> None:
    """In an analysis process: make way when the parent's count (`shared_count`) says."""
    global _shared
    _shared = shared


def someone_waiting() -> bool:
    return _waiting > 0 or (_shared is not None and _shared.value > 0)


async def make_way(max_pause: float = MAX_PAUSE_S) -> float:
    """Sleep (the lock released) while someone waits, at most `max_pause` seconds; the
    seconds slept. Called by the analysis between audits."""
    if not someone_waiting():
        return 0.0
    start = time.monotonic()
    deadline = start + max_pause
    while someone_waiting() and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
    return time.monotonic() - start
