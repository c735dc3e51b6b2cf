"""People first: background analysis makes way while a person waits for a page.

Analysis and the pages share one process and, in CPython, one interpreter lock. Under a
deep queue the analysis threads hold it most of the time, and a dashboard page that needs
20 ms of CPU took 250 ms. So a page request (`waiting()`, entered by the ASGI app for
dashboard pages and by the live feed while it renders cards) is counted, and the
analysis, between two audits (`make_way()`), sleeps while the count is not zero: at most
`MAX_PAUSE_S` per audit, so a steady stream of pages slows the queue down but never
stalls it. An audit already under way is never interrupted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_PAUSE_S = 0.1  # per audit
POLL_S = 0.002

_lock = threading.Lock()
_waiting = 0


@contextmanager
def waiting() -> Iterator[None]:
    """A person waits for what runs inside (from any thread or loop)."""
    global _waiting
    with _lock:
        _waiting += 1
    try:
        yield
    finally:
        with _lock:
            _waiting -= 1


def someone_waiting() -> bool:
    return _waiting > 0


async def make_way(max_pause: float = MAX_PAUSE_S) -> float:
    """Sleep (the lock released) while someone waits, at most `max_pause` seconds; the
    seconds slept. Called by the analysis between audits."""
    if not _waiting:
        return 0.0
    start = time.monotonic()
    deadline = start + max_pause
    while _waiting and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
    return time.monotonic() - start


def make_way_sync(max_pause: float = MAX_PAUSE_S) -> float:
    """`make_way` for a thread without a loop (one that hands batches to an analysis
    process, audits.analysis_processes: there the pause is per batch)."""
    if not _waiting:
        return 0.0
    start = time.monotonic()
    deadline = start + max_pause
    while _waiting and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return time.monotonic() - start
