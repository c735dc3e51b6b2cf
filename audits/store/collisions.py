"""The red-flag analyzer's collision store in the database (engine protocol CollisionStore).

One row per digest and scope: the family (root audit id) that first produced it and
whether another family did too (analyzers.engine.collisions explains the rule).

Asked one question at a time, each answer is a hop from the engine's loop to the worker
thread and a write transaction of its own. A batch of audits asks through a
`CollisionBatch` instead (`services.execute_runs`): the questions it expects (each audit's
scope and the digest of its response) are read with one query before the analysis, the
answers computed in memory in the order asked, and what they recorded written with one
statement in the transaction that stores the batch's reports. A question it did not expect
goes to the database as before.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Coroutine, Iterable
from contextvars import ContextVar
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, connections, router, transaction
from django.utils import timezone

from analyzers.engine.collisions import is_duplicate
from audits.models import CollisionDigest


def scope_hash(scope: str) -> str:
    return hashlib.sha256(scope.encode()).hexdigest()


class DatabaseCollisionStore:
    """`seen_before(scope, digest, family)`: atomic across threads and processes (the
    unique constraint decides who was first)."""

    def seen_before_sync(self, scope: str, digest: str, family: str | None = None) -> bool:
        db = router.db_for_write(CollisionDigest)
        scope_h, digest = scope_hash(scope), digest[:128]
        if not self._insert(db, scope_h, digest, family or ""):
            return False
        row = (
            CollisionDigest.objects.using(db)
            .filter(scope_hash=scope_h, digest=digest)
            .values_list("first_family", "shared")
            .first()
        )
        if row is None:  # deleted meanwhile: as good as new
            return False
        first_family, shared = row
        if family != first_family and not shared:
            CollisionDigest.objects.using(db).filter(scope_hash=scope_h, digest=digest).update(
                shared=True
            )
        return is_duplicate(first_family, shared, family)

    @staticmethod
    def _insert(db: str, scope_h: str, digest: str, family: str) -> bool:
        """Record the digest for `family`; True when it was already there."""
        conn = connections[db]
        if conn.vendor in ("sqlite", "postgresql"):
            # One statement, no savepoint: the row count says whether it was new.
            created = conn.ops.adapt_datetimefield_value(timezone.now())
            with conn.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {CollisionDigest._meta.db_table} (scope_hash, digest, "
                    "created_at, first_family, shared) VALUES (%s, %s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING",
                    [scope_h, digest, created, family, False],
                )
                return cursor.rowcount == 0
        try:
            with transaction.atomic(using=db):
                CollisionDigest.objects.using(db).create(
                    scope_hash=scope_h, digest=digest, first_family=family
                )
        except IntegrityError:
            return True
        return False

    async def seen_before(self, scope: str, digest: str, family: str | None = None) -> bool:
        current = _current_batch.get()
        if current is not None:
            batch, run_id = current
            answer = batch.answer(run_id, scope, digest, family)
            if answer is not None:
                return answer
        return await sync_to_async(self.seen_before_sync, thread_sensitive=True)(
            scope, digest, family
        )


# The batch and run id of the audit being analysed (set by `CollisionBatch.run`).
_current_batch: ContextVar[tuple[CollisionBatch, Any] | None] = ContextVar(
    "collision_batch", default=None
)


class CollisionRace(Exception):
    """Another process recorded a digest a batch was told was new: its answers may be wrong."""


class CollisionBatch:
    """The duplicate-output questions of a batch of audits (see the module docstring).

    Atomic as the one-by-one store is: `flush` inserts the digests the batch saw first with
    `ON CONFLICT DO NOTHING`; when another writer got one in between (its row exists now),
    `flush` raises CollisionRace, the transaction rolls back and the caller analyses the
    batch again one question at a time. Answers never expected are never recorded."""

    def __init__(self, expected: Iterable[tuple[str, str]], *, using: str | None = None):
        self.using = using or router.db_for_write(CollisionDigest)
        keys = {(scope_hash(scope), digest[:128]) for scope, digest in expected}
        # key -> [first_family, shared] as last read or answered; None: no row.
        self.state: dict[tuple[str, str], list | None] = dict.fromkeys(keys)
        for chunk in itertools.batched(keys, 500):
            for scope_h, digest, first_family, shared in self._read(chunk):
                self.state[(scope_h, digest)] = [first_family, bool(shared)]
        self.inserted: dict[tuple[str, str], Any] = {}  # key -> the run that recorded it
        self.shared: set[tuple[str, str]] = set()  # existing rows another family produced

    def _read(self, keys: tuple[tuple[str, str], ...]) -> list[tuple]:
        """The rows of `keys` ((scope hash, digest) pairs): the pairs joined to the table,
        each a search of its unique index. (A filter on the digests alone used no index:
        it read every digest ever recorded, once per batch.)"""
        conn = connections[self.using]
        table = conn.ops.quote_name(CollisionDigest._meta.db_table)
        pairs = ", ".join(["(%s, %s)"] * len(keys))
        with conn.cursor() as cursor:
            cursor.execute(
                f"WITH asked (scope_hash, digest) AS (VALUES {pairs}) "
                f"SELECT t.scope_hash, t.digest, t.first_family, t.shared FROM asked "
                f"JOIN {table} t ON t.scope_hash = asked.scope_hash AND t.digest = asked.digest",
                [value for key in keys for value in key],
            )
            return cursor.fetchall()

    @staticmethod
    def supported(using: str | None = None) -> bool:
        db = using or router.db_for_write(CollisionDigest)
        return connections[db].vendor in ("sqlite", "postgresql")

    async def run(self, run_id: Any, coro: Coroutine) -> Any:
        """Await `coro` (an engine audit) with its questions answered by this batch."""
        token = _current_batch.set((self, run_id))
        try:
            return await coro
        finally:
            _current_batch.reset(token)

    def answer(self, run_id: Any, scope: str, digest: str, family: str | None) -> bool | None:
        """`seen_before` from memory, or None for a question the batch did not expect."""
        key = (scope_hash(scope), digest[:128])
        if key not in self.state:
            return None
        row = self.state[key]
        if row is None:
            self.state[key] = [family or "", False]
            self.inserted[key] = run_id
            return False
        first_family, shared = row
        if family != first_family and not shared:
            row[1] = True
            if key not in self.inserted:
                self.shared.add(key)
        return is_duplicate(first_family, shared, family)

    def flush(self) -> None:
        """Write what the answers recorded (inside the caller's transaction)."""
        conn = connections[self.using]
        table = conn.ops.quote_name(CollisionDigest._meta.db_table)
        if self.inserted:
            created = conn.ops.adapt_datetimefield_value(timezone.now())
            keys = list(self.inserted)
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                rows = ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk))
                params: list[Any] = []
                for key in chunk:
                    row = self.state[key]
                    assert row is not None  # `answer` set the row of every key it inserted
                    first_family, shared = row
                    params += [key[0], key[1], created, first_family, shared]
                with conn.cursor() as cursor:
                    cursor.execute(
                        f"INSERT INTO {table} (scope_hash, digest, created_at, first_family, "
                        f"shared) VALUES {rows} ON CONFLICT DO NOTHING "
                        "RETURNING scope_hash, digest",
                        params,
                    )
                    written = len(cursor.fetchall())
                if written != len(chunk):
                    raise CollisionRace(f"{len(chunk) - written} digests recorded meanwhile")
        if self.shared:
            with conn.cursor() as cursor:
                cursor.executemany(
                    f"UPDATE {table} SET shared = %s WHERE scope_hash = %s AND digest = %s",
                    [(True, scope_h, digest) for scope_h, digest in self.shared],
                )
