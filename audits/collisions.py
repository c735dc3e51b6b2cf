"""The red-flag analyzer's collision store in the database (engine protocol CollisionStore).

One row per digest and scope: the family (root audit id) that first produced it and
whether another family did too (analyzers.engine.collisions explains the rule)."""

from __future__ import annotations

import hashlib

from asgiref.sync import sync_to_async
from django.db import IntegrityError, connections, router, transaction
from django.utils import timezone

from analyzers.engine.collisions import is_duplicate

from .models import CollisionDigest


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
        return await sync_to_async(self.seen_before_sync, thread_sensitive=True)(
            scope, digest, family
        )
