"""Background work (tasks below priority 0: shadow analysis, replays) never delays audits.

Audits and background work share this process's task threads and interpreter lock, so
background work runs only while no audit task is queued or running here. The thread
backend counts its audit tasks (`started`/`finished`); its background lane takes a task
only when the count is zero (`wait_until_idle`), and the work itself, between two slices
(an analyzer, a candidate), makes way while an audit arrived (`make_way`, `busy`). Only
there: a pause anywhere else (inside a call, a lock held) could make the audit wait for it.

Backends without this count (the database backend, the immediate one) have no
`counts_audits` attribute: the shadow analysis then asks the database instead.
"""

from __future__ import annotations

import asyncio
import threading
import time

POLL_S = 0.005

_cond = threading.Condition()
_audits = 0  # audit (priority >= 0) tasks queued or running in this process


def is_background(priority: int) -> bool:
    return priority < 0


def started(n: int = 1) -> None:
    """`n` audit tasks were queued (called by the backend that counts)."""
    global _audits
    with _cond:
        _audits += n


def finished(n: int = 1) -> None:
    """`n` audit tasks ended; the background lane wakes when none is left."""
    global _audits
    with _cond:
        _audits = max(0, _audits - n)
        if not _audits:
            _cond.notify_all()


def busy() -> bool:
    """An audit task is queued or running in this process."""
    return _audits > 0


def wait_until_idle(timeout: float | None = None) -> bool:
    """Block until no audit task is queued or running (True), or `timeout` passed."""
    with _cond:
        return _cond.wait_for(lambda: not _audits, timeout)


async def make_way(max_pause: float) -> float:
    """Sleep (the interpreter lock released) while an audit is queued or running, at most
    `max_pause` seconds; the seconds slept. Called by background work between slices."""
    if not _audits:
        return 0.0
    start = time.monotonic()
    deadline = start + max_pause
    while _audits and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
    return time.monotonic() - start
