"""The red-flag analyzer's collision store in the database (engine protocol CollisionStore)."""

from __future__ import annotations

import hashlib

from asgiref.sync import sync_to_async
from django.db import IntegrityError, connections, router, transaction
from django.utils import timezone

from .models import CollisionDigest


def scope_hash(scope: str) -> str:
    return hashlib.sha256(scope.encode()).hexdigest()


class DatabaseCollisionStore:
    """`seen_before(scope, digest)`: atomic across threads and processes (unique constraint)."""

    def seen_before_sync(self, scope: str, digest: str) -> bool:
        db = router.db_for_write(CollisionDigest)
        conn = connections[db]
        if conn.vendor in ("sqlite", "postgresql"):
            # One statement, no savepoint: the row count says whether it was new.
            created = conn.ops.adapt_datetimefield_value(timezone.now())
            with conn.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {CollisionDigest._meta.db_table} (scope_hash, digest, "
                    "created_at) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                    [scope_hash(scope), digest[:128], created],
                )
                return cursor.rowcount == 0
        try:
            with transaction.atomic(using=db):
                CollisionDigest.objects.create(scope_hash=scope_hash(scope), digest=digest[:128])
        except IntegrityError:
            return True
        return False

    async def seen_before(self, scope: str, digest: str) -> bool:
        return await sync_to_async(self.seen_before_sync, thread_sensitive=True)(scope, digest)
