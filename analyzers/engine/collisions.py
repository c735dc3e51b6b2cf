"""Where the red-flag analyzer remembers content hashes to detect duplicate outputs.

A digest is recorded with the family of the audit that first produced it (an audit and
its re-runs share the original's family) and whether another family produced it too.
Asking again from the first family is a duplicate only when another family produced it;
asking from any other family always is. So re-running an audit never collides with
itself, while a different audit with the same output still does.
"""

from __future__ import annotations

import threading
from typing import Protocol


class CollisionStore(Protocol):
    async def seen_before(self, scope: str, digest: str, family: str | None = None) -> bool:
        """Record `digest` in `scope` for `family`; True when another family (or, without
        a family, anyone) produced it before. Must be atomic."""
        ...


def is_duplicate(first_family: str, shared: bool, family: str | None) -> bool:
    """The rule for a digest already recorded by `first_family` (`shared`: by others too)."""
    if family is None or family != first_family:
        return True
    return shared


class InMemoryCollisionStore:
    """Process-local store for the CLI, tests and benchmarks. Bounded per scope."""

    # `seen_before` answers without waiting: the red-flag analyzer may run inline
    never_waits = True

    def __init__(self, max_per_scope: int = 100_000) -> None:
        self._scopes: dict[str, dict[str, list]] = {}  # digest -> [first family, shared]
        self._lock = threading.Lock()
        self._max = max_per_scope

    async def seen_before(self, scope: str, digest: str, family: str | None = None) -> bool:
        with self._lock:
            seen = self._scopes.setdefault(scope, {})
            entry = seen.get(digest)
            if entry is not None:
                duplicate = is_duplicate(entry[0], entry[1], family)
                if family != entry[0]:
                    entry[1] = True
                return duplicate
            if len(seen) >= self._max:
                seen.clear()
            seen[digest] = [family or "", False]
            return False
