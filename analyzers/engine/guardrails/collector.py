"""A pause of the cyclic garbage collector while a huge paragraph is audited, safe when
several threads audit at once.

`gc.disable()` is process-wide: two threads that each disabled and re-enabled it would
re-enable it under the other's feet, and code that had disabled it on purpose would find
it on again. Here the first pause turns the collector off only if it was on, the last
one to end turns it back on, and only then.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_active = 0  # pauses under way
_turned_off = False  # whether the first of them turned the collector off


@contextmanager
def collector_paused() -> Iterator[None]:
    """Reference counting frees as usual; only the cycle collector waits."""
    global _active, _turned_off
    with _lock:
        if _active == 0:
            _turned_off = gc.isenabled()
            if _turned_off:
                gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _turned_off:
                _turned_off = False
                gc.enable()
