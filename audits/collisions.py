"""The red-flag analyzer's collision store in the database (engine protocol CollisionStore)."""

from __future__ import annotations

import hashlib

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction

from .models import CollisionDigest


def scope_hash(scope: str) -> str:
    return hashlib.sha256(scope.encode()).hexdigest()


class DatabaseCollisionStore:
    """`seen_before(scope, digest)`: atomic across threads and processes (unique constraint)."""

    def seen_before_sync(self, scope: str, digest: str) -> bool:
        try:
            with transaction.atomic():
                CollisionDigest.objects.create(scope_hash=scope_hash(scope), digest=digest[:128])
        except IntegrityError:
            return True
        return False

    async def seen_before(self, scope: str, digest: str) -> bool:
        return await sync_to_async(self.seen_before_sync, thread_sensitive=True)(scope, digest)
