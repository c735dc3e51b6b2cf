"""What this process is running right now, for the recovery heartbeat (audits.execution.recovery).

Kept apart from the sweep so that the services, which run audits, can say so without
importing the recovery that re-queues them.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

_lock = threading.Lock()
_runs: Counter[str] = Counter()  # audit runs executing in this process


def running_run_ids() -> list[str]:
    with _lock:
        return list(_runs)


class running_run:
    """Context manager: `run_id` executes here; the heartbeat keeps its `started_at` fresh."""

    def __init__(self, run_id: Any) -> None:
        self.key = str(run_id)

    def __enter__(self) -> None:
        with _lock:
            _runs[self.key] += 1

    def __exit__(self, *exc: object) -> None:
        with _lock:
            _runs[self.key] -= 1
            if _runs[self.key] <= 0:
                del _runs[self.key]
