"""Where the red-flag analyzer remembers content hashes to detect duplicate outputs."""

from __future__ import annotations

import threading
from typing import Protocol


class CollisionStore(Protocol):
    async def seen_before(self, scope: str, digest: str) -> bool:
        """Record `digest` in `scope`; True when it was already there. Must be atomic."""
        ...


class InMemoryCollisionStore:
    """Process-local store for the CLI, tests and benchmarks. Bounded per scope."""

    def __init__(self, max_per_scope: int = 100_000) -> None:
        self._scopes: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._max = max_per_scope

    async def seen_before(self, scope: str, digest: str) -> bool:
        with self._lock:
            seen = self._scopes.setdefault(scope, set())
            if digest in seen:
                return True
            if len(seen) >= self._max:
                seen.clear()
            seen.add(digest)
            return False
