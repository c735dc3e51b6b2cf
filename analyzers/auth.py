"""API key authentication, body size limit and the per-key rate limit for the ninja API.

Hot-path costs are kept off the database:

- A verified key is remembered in this process for `AUTH_CACHE_SECONDS` (keyed by the
  SHA-256 of the whole bearer token, so only the exact token hits the cache). Saving or
  deleting an `ApiKey` clears the cache of the process that did it at once; another
  process notices a revocation (or a new rate limit) within `AUTH_CACHE_SECONDS`.
- The rate limit counts in memory and adds the counts to the shared database counter
  (`RateLimitCounter`, one atomic `UPDATE ... RETURNING`) at least every
  `RATE_SYNC_SECONDS` and whenever `limit / RATE_SYNC_FRACTION` requests are pending. One
  process is exact; with several, a key can exceed its limit by what the other processes
  accepted since their last sync (under 1/20 of the limit each, or half a second of their
  traffic). Small limits (under 20 a minute) sync on every request, so they stay exact.
- The sync never holds a request up on a locked database: it waits at most
  `RATE_SYNC_LOCK_WAIT_MS` for the lock, and if the counter is locked (or the database
  fails), the hits stay pending in memory and this request is decided on what this process
  knows; the next sync adds them.
- Besides the minute, a key has a per-second burst (`AUDITOR_RATE_BURST_PER_S`, a token
  bucket of that many requests refilled at that rate), counted in this process only: a
  flood of one key (pollers) is refused within the second, not after its minute's budget.
  A key without a rate limit (0) has no burst limit either.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.signals import post_delete, post_save
from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer, SessionAuth

from .lock_wait import waiting_at_most
from .models import ApiKey, RateLimitCounter

WINDOW_S = 60
AUTH_CACHE_SECONDS = 5.0
AUTH_CACHE_MAX = 1000
RATE_SYNC_SECONDS = 0.5
RATE_SYNC_FRACTION = 20
RATE_SYNC_LOCK_WAIT_MS = 50


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


# --- verified keys ----------------------------------------------------------------------

_keys: dict[str, tuple[ApiKey, float]] = {}
_keys_lock = threading.Lock()


def _token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def cached_key(token: str) -> ApiKey | None:
    """The key verified for exactly this token less than AUTH_CACHE_SECONDS ago."""
    digest = _token_digest(token)
    with _keys_lock:
        entry = _keys.get(digest)
    if entry is None:
        return None
    key, expires = entry
    if time.monotonic() >= expires:
        with _keys_lock:
            _keys.pop(digest, None)
        return None
    return key


def authenticate_token(token: str) -> ApiKey | None:
    """`ApiKey.authenticate` with the in-process cache of verified keys."""
    key = cached_key(token)
    if key is not None:
        return key
    key = ApiKey.authenticate(token)
    if key is not None:
        remember_key(token, key)
    return key


def remember_key(token: str, key: ApiKey) -> None:
    with _keys_lock:
        if len(_keys) >= AUTH_CACHE_MAX:
            _keys.clear()
        _keys[_token_digest(token)] = (key, time.monotonic() + AUTH_CACHE_SECONDS)


def forget_keys(**kwargs) -> None:
    """Drop every verified key (any ApiKey saved or deleted in this process)."""
    with _keys_lock:
        _keys.clear()


post_save.connect(forget_keys, sender=ApiKey, dispatch_uid="analyzers.auth.forget_keys.save")
post_delete.connect(forget_keys, sender=ApiKey, dispatch_uid="analyzers.auth.forget_keys.delete")


# --- rate limit -------------------------------------------------------------------------


def _add(bucket: str, n: int, window_start: datetime) -> int:
    """Add `n` to the bucket's shared counter (created when missing); the new total."""
    total = _increment(bucket, n)
    if total is not None:
        return total
    try:
        with transaction.atomic():
            RateLimitCounter.objects.create(bucket=bucket, count=n, window_start=window_start)
    except IntegrityError:
        return _increment(bucket, n) or n
    # A new window: forget the old ones.
    RateLimitCounter.objects.filter(window_start__lt=window_start - timedelta(minutes=2)).delete()
    return n


def _increment(bucket: str, n: int) -> int | None:
    """One `UPDATE ... RETURNING` where supported (SQLite >= 3.35, PostgreSQL)."""
    if connection.features.can_return_columns_from_insert:
        table = connection.ops.quote_name(RateLimitCounter._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET count = count + %s WHERE bucket = %s RETURNING count",
                [n, bucket],
            )
            row = cursor.fetchone()
        return row[0] if row else None
    counters = RateLimitCounter.objects.filter(bucket=bucket)
    if not counters.update(count=F("count") + n):
        return None
    return counters.values_list("count", flat=True).first()


@dataclass
class _Bucket:
    tokens: float
    at: float  # time.monotonic() of the last refill


@dataclass
class _Window:
    window: int
    shared: int = 0  # the database count at the last sync (every process's hits)
    pending: int = 0  # hits of this process not yet added to it
    last_sync: float = -math.inf
    syncing: bool = False


class RateLimiter:
    """Requests per key and minute, and per second (the burst); see the module docstring
    for the sharing rules."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}  # by key prefix (unique, never reused)
        self._buckets: dict[str, _Bucket] = {}  # the per-second burst, by key prefix

    def reset(self) -> None:
        with self._lock:
            self._windows.clear()
            self._buckets.clear()

    def _take_burst(self, prefix: str) -> None:
        """One token of the key's burst bucket (under `_lock`); RateLimited when empty."""
        rate = settings.AUDITOR_RATE_BURST_PER_S
        if rate <= 0:
            return
        now = time.monotonic()
        bucket = self._buckets.get(prefix)
        if bucket is None:
            if len(self._buckets) >= AUTH_CACHE_MAX:  # bounded, as the verified keys
                self._buckets.clear()
            bucket = self._buckets[prefix] = _Bucket(float(rate), now)
        bucket.tokens = min(float(rate), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1:
            raise RateLimited(max(1, math.ceil((1 - bucket.tokens) / rate)))
        bucket.tokens -= 1

    def hit(self, key: ApiKey) -> tuple[_Window, int, float] | None:
        """Count one request. Returns None when allowed with no sync due, else a
        `(window, limit, now)` ticket for `settle` (which syncs and decides)."""
        limit = key.rate_limit_per_minute or settings.AUDITOR_RATE_LIMIT_PER_MINUTE
        if not limit:
            return None
        now = time.time()
        window = int(now // WINDOW_S)
        with self._lock:
            self._take_burst(key.prefix)
            state = self._windows.get(key.prefix)
            if state is None or state.window != window:
                state = self._windows[key.prefix] = _Window(window)
            state.pending += 1
            due = (
                state.pending >= max(1, limit // RATE_SYNC_FRACTION)
                or time.monotonic() - state.last_sync >= RATE_SYNC_SECONDS
            )
            if due and not state.syncing:
                state.syncing = True
                return state, limit, now
            over = state.shared + state.pending > limit
        if over:
            raise RateLimited(_retry_after(window, now))
        return None

    def settle(self, key: ApiKey, ticket: tuple[_Window, int, float]) -> None:
        """Add this process's pending hits to the shared counter; 429 over the limit."""
        state, limit, now = ticket
        with self._lock:
            n, state.pending = state.pending, 0
        try:
            start = datetime.fromtimestamp(state.window * WINDOW_S, tz=UTC)
            with waiting_at_most(RATE_SYNC_LOCK_WAIT_MS):
                total = _add(f"{key.pk}:{state.window}", n, start) if n else state.shared
        except DatabaseError:
            # Locked (or down): keep the hits for the next sync, decide on local counts.
            with self._lock:
                state.pending += n
                state.syncing = False
                state.last_sync = time.monotonic()
                over = state.shared + state.pending > limit
            if over:
                raise RateLimited(_retry_after(state.window, now)) from None
            return
        except BaseException:
            with self._lock:
                state.pending += n
                state.syncing = False
            raise
        with self._lock:
            state.shared = max(state.shared, total)
            state.last_sync = time.monotonic()
            state.syncing = False
            over = state.shared + state.pending > limit
        if over:
            raise RateLimited(_retry_after(state.window, now))


def _retry_after(window: int, now: float) -> int:
    return max(1, math.ceil((window + 1) * WINDOW_S - now))


rate_limiter = RateLimiter()


def hit_rate_limit(key: ApiKey) -> None:
    """Count one request for `key` in the current minute and second; RateLimited over
    either limit."""
    ticket = rate_limiter.hit(key)
    if ticket is not None:
        rate_limiter.settle(key, ticket)


# --- the ninja auth ---------------------------------------------------------------------


class ApiKeyAuth(HttpBearer):
    """`Authorization: Bearer ra_...` with at least `scope` (ingest < read < review < admin).

    `is_async=True` makes an instance for async operations: a cached key and a rate limit
    without a due sync cost no thread hop and no query.
    """

    def __init__(self, scope: str, *, is_async: bool = False):
        super().__init__()
        self.scope = scope
        self.is_async = is_async  # read by ninja to await the call

    def __call__(self, request: HttpRequest):
        check_body_size(request)
        if self.is_async:
            return self._acall(request)
        return super().__call__(request)

    def _token(self, request: HttpRequest) -> str | None:
        value = request.headers.get(self.header)
        if not value:
            return None
        scheme, _, token = value.partition(" ")
        return token if scheme.lower() == self.openapi_scheme else None

    def _check_scope(self, key: ApiKey) -> None:
        if not key.allows(self.scope):
            raise HttpError(
                403, f"this API key has the {key.scope!r} scope; this call needs {self.scope!r}"
            )

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        key = authenticate_token(token)
        if key is None:
            return None
        self._check_scope(key)
        hit_rate_limit(key)
        return key

    async def _acall(self, request: HttpRequest) -> ApiKey | None:
        token = self._token(request)
        if token is None:
            return None
        key = cached_key(token)
        if key is None:
            key = await sync_to_async(authenticate_token)(token)
            if key is None:
                return None
        self._check_scope(key)
        await count_request(key)
        return key

    def cached(self, request: HttpRequest) -> ApiKey | None:
        """The request's key when its token was verified recently (`cached_key`) and it
        has the scope; else None. Nothing is counted or queried: for a caller that leaves
        every other case to this auth (audits.api.submit_asgi)."""
        token = self._token(request)
        key = cached_key(token) if token else None
        return key if key is not None and key.allows(self.scope) else None


async def count_request(key: ApiKey) -> None:
    """Count one request of `key` against its rate limit (RateLimited past it); a query
    only when the shared counter is due (`RateLimiter.hit`)."""
    ticket = rate_limiter.hit(key)
    if ticket is not None:
        await sync_to_async(rate_limiter.settle)(key, ticket)


ingest_auth = ApiKeyAuth("ingest")
ingest_auth_async = ApiKeyAuth("ingest", is_async=True)
read_auth = ApiKeyAuth("read")
read_auth_async = ApiKeyAuth("read", is_async=True)
review_auth = ApiKeyAuth("review")
admin_auth = ApiKeyAuth("admin")


class StaffSessionAuth(SessionAuth):
    """The dashboard's signed-in staff with `permission`, for read calls it links to (the
    Export menu). Machines keep using keys; GET is safe, so no CSRF token is needed (ninja
    checks it for other methods)."""

    def __init__(self, permission: str):
        super().__init__()
        self.permission = permission

    def authenticate(self, request: HttpRequest, key: str | None):
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated or not user.is_staff:
            return None
        if not user.has_perm(self.permission):
            raise HttpError(403, f"your account lacks the {self.permission!r} permission")
        return user


staff_export_auth = StaffSessionAuth("audits.view_auditrun")
