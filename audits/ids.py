"""Audit ids that sort by creation time: UUID version 7 (RFC 9562, section 5.7).

An audit's id keys its own row and an index of every child table (results, annotations,
trace lines, links). A random (version 4) id puts each new row on a random page of each
of those b-trees, so a batch of audits rewrites pages all over the database file; a
version 7 id starts with the Unix time in milliseconds, so new rows land on the last
pages (about half the pages written per stored audit, `bench/bench_store.py`), and the
gap grows with the database. The remaining 74 bits are random, so ids stay unguessable.

Python 3.14 has `uuid.uuid7`; on older versions this module builds the same layout.
"""

from __future__ import annotations

import os
import time
import uuid

_RANDOM_BITS = 74  # rand_a (12 bits) and rand_b (62 bits)
_stdlib_uuid7 = getattr(uuid, "uuid7", None)


def new_audit_id() -> uuid.UUID:
    """A new audit id: a UUID version 7 (the standard library's from Python 3.14)."""
    if _stdlib_uuid7 is not None:
        return _stdlib_uuid7()
    millis = time.time_ns() // 1_000_000 & (1 << 48) - 1
    rand = int.from_bytes(os.urandom(10)) & (1 << _RANDOM_BITS) - 1
    rand_a, rand_b = rand >> 62, rand & (1 << 62) - 1
    return uuid.UUID(int=millis << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b)
