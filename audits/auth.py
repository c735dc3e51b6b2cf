"""API key authentication, body size limit and the per-key rate limit for the ninja API."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer

from analyzers.models import ApiKey

from .models import RateLimitCounter

WINDOW_S = 60


class PayloadTooLarge(Exception):
    def __init__(self, size: int | None, limit: int):
        self.size, self.limit = size, limit
        super().__init__(f"request body is larger than the limit of {limit} bytes")


class RateLimited(Exception):
    def __init__(self, retry_after: int):
        self.retry_after = retry_after
        super().__init__(f"rate limit exceeded; retry in {retry_after} s")


def check_body_size(request: HttpRequest) -> None:
    """413 before the body is parsed (by Content-Length, else by the body read so far)."""
    limit = settings.AUDITOR_MAX_BODY_BYTES
    length = request.META.get("CONTENT_LENGTH")
    try:
        size = int(length) if length not in (None, "") else None
    except ValueError:
        size = None
    if size is None and request.method in ("POST", "PUT", "PATCH"):
        size = len(request.body)
    if size is not None and size > limit:
        raise PayloadTooLarge(size, limit)


def _increment(bucket: str) -> int | None:
    """Add one to the bucket's counter and return the new count (None: no such bucket).

    One `UPDATE ... RETURNING` where the database supports it (SQLite >= 3.35, PostgreSQL).
    """
    if connection.features.can_return_columns_from_insert:
        table = connection.ops.quote_name(RateLimitCounter._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET count = count + 1 WHERE bucket = %s RETURNING count",
                [bucket],
            )
            row = cursor.fetchone()
        return row[0] if row else None
    counters = RateLimitCounter.objects.filter(bucket=bucket)
    if not counters.update(count=F("count") + 1):
        return None
    return counters.values_list("count", flat=True).first()


def hit_rate_limit(key: ApiKey) -> None:
    """Count one request for `key` in the current minute (atomic UPDATE); 429 over the limit."""
    limit = key.rate_limit_per_minute or settings.AUDITOR_RATE_LIMIT_PER_MINUTE
    if not limit:
        return
    now = time.time()
    window = int(now // WINDOW_S)
    bucket = f"{key.pk}:{window}"
    count = _increment(bucket)
    if count is None:
        start = datetime.fromtimestamp(window * WINDOW_S, tz=UTC)
        try:
            with transaction.atomic():
                RateLimitCounter.objects.create(bucket=bucket, count=1, window_start=start)
            count = 1
            # A new window: forget the old ones.
            RateLimitCounter.objects.filter(window_start__lt=start - timedelta(minutes=2)).delete()
        except IntegrityError:
            count = _increment(bucket) or 0
    if count > limit:
        raise RateLimited(max(1, math.ceil((window + 1) * WINDOW_S - now)))


class ApiKeyAuth(HttpBearer):
    """`Authorization: Bearer ra_...` with at least `scope` (ingest < read < admin)."""

    def __init__(self, scope: str):
        super().__init__()
        self.scope = scope

    def __call__(self, request: HttpRequest):
        check_body_size(request)
        return super().__call__(request)

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        key = ApiKey.authenticate(token)
        if key is None:
            return None
        if not key.allows(self.scope):
            raise HttpError(403, f"this API key has the {key.scope!r} scope; "
                                 f"this call needs {self.scope!r}")
        hit_rate_limit(key)
        return key


ingest_auth = ApiKeyAuth("ingest")
read_auth = ApiKeyAuth("read")
admin_auth = ApiKeyAuth("admin")
