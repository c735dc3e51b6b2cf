"""`GET /api/audits/{id}`, cheap for pollers: a finished audit from memory, an ETag, a wait.

- A finished audit (complete or failed) is kept serialised, as the bytes sent, in a small
  per-process LRU (`AUDITOR_POLL_CACHE_ENTRIES`, `AUDITOR_POLL_CACHE_BYTES`). Each GET
  still reads the audit's version (one query by primary key: `VERSION_FIELDS`, the columns
  every later change of a finished audit writes: a verdict sets `reviewed_at`, a new
  surfacing policy `surfacing_policy`, `threshold` and `has_card`, a late store of a run
  `status`, `finished_at` and `attempts`); another version serialises it again. So a
  change made by any process is seen by every process at its next GET.
- The `ETag` is a digest of the bytes (strong); `If-None-Match` with it gets 304.
- `?wait=SECONDS` (or `true`: the longest, `AUDITOR_WAIT_TIMEOUT_S`) holds a pending or
  running audit's GET until it finishes or the time is up, then answers its state then.
  The audits waited for in a process are looked at together, one query per look
  (`_Watch`), whatever the number of waiters; at most `AUDITOR_POLL_WAIT_PER_KEY` GETs of
  one key wait at once, others are answered at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import uuid
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.utils.http import parse_etags
from ninja.errors import HttpError
from ninja.renderers import JSONRenderer

from audits.intake.schemas import AuditOut
from audits.models import AuditRun
from audits.store import queries
from audits.store.db_threads import run_in_db_thread

VERSION_FIELDS = (
    "status",
    "finished_at",
    "attempts",
    "reviewed_at",
    "surfacing_policy",
    "threshold",
    "has_card",
)
FINISHED = frozenset({AuditRun.Status.COMPLETE, AuditRun.Status.FAILED})
CONTENT_TYPE = "application/json; charset=utf-8"
CACHE_CONTROL = "private, no-cache"  # any copy is checked with us first (If-None-Match)
WAIT_PAUSES_S = (0.01, 0.25)  # the first and the longest pause between two looks
_renderer = JSONRenderer()


@dataclass(frozen=True)
class Answer:
    version: tuple
    body: bytes
    etag: str

    @property
    def finished(self) -> bool:
        return self.version[0] in FINISHED


class AnswerCache:
    """Serialised finished audits by id, least recently used out first, bounded in
    entries and bytes; shared by the database threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[uuid.UUID, Answer] = OrderedDict()
        self._bytes = 0

    def get(self, run_id: uuid.UUID, version: tuple) -> Answer | None:
        with self._lock:
            answer = self._items.get(run_id)
            if answer is None or answer.version != version:
                return None
            self._items.move_to_end(run_id)
            return answer

    def put(self, run_id: uuid.UUID, answer: Answer) -> None:
        max_entries = settings.AUDITOR_POLL_CACHE_ENTRIES
        max_bytes = settings.AUDITOR_POLL_CACHE_BYTES
        with self._lock:
            old = self._items.pop(run_id, None)
            if old is not None:
                self._bytes -= len(old.body)
            if len(answer.body) > max_bytes or max_entries <= 0:
                return
            self._items[run_id] = answer
            self._bytes += len(answer.body)
            while len(self._items) > max_entries or self._bytes > max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= len(evicted.body)

    def discard(self, run_id: uuid.UUID) -> None:
        """Forget an audit (it was erased)."""
        with self._lock:
            old = self._items.pop(run_id, None)
            if old is not None:
                self._bytes -= len(old.body)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


cache = AnswerCache()


_version_sql: dict[str, str] = {}  # by database alias: the ORM's SQL, built once


def _version(run_id: uuid.UUID) -> tuple | None:
    """`VERSION_FIELDS` of the audit as the driver returns them (compared, never shown),
    or None. The statement is the ORM's, built once and run directly: building it cost
    more than running it."""
    sql = _version_sql.get(connection.alias)
    if sql is None:
        query = AuditRun.objects.filter(pk=run_id).order_by().values_list(*VERSION_FIELDS)
        sql = _version_sql[connection.alias] = query.query.sql_with_params()[0]
    with connection.cursor() as cursor:
        cursor.execute(sql, [AuditRun._meta.pk.get_db_prep_value(run_id, connection)])
        row = cursor.fetchone()
    return tuple(row) if row is not None else None


def current(run_id: uuid.UUID) -> Answer:
    """The audit as sent now (HttpError 404 when there is none): from the cache when it is
    finished and its version unchanged, else serialised (and cached when finished).

    The version is read before the audit: a change in between makes the stored version
    older than the bytes, so the next GET serialises again (never the other way round)."""
    version = _version(run_id)
    if version is None:  # never stored, or erased (by any process): not kept either
        cache.discard(run_id)
        raise HttpError(404, "audit not found")
    finished = version[0] in FINISHED
    if finished and (hit := cache.get(run_id, version)) is not None:
        return hit
    rows = list(AuditRun.objects.filter(pk=run_id).values(*queries.RUN_FIELDS))
    if not rows:
        raise HttpError(404, "audit not found")
    data = AuditOut.model_validate(queries.serialize_runs(rows)[0]).model_dump()
    body = _renderer.render(None, data, response_status=200).encode()
    answer = Answer(version, body, f'"{hashlib.blake2b(body, digest_size=16).hexdigest()}"')
    if finished:
        cache.put(run_id, answer)
    return answer


def response(answer: Answer, if_none_match: str | None) -> HttpResponse:
    """200 with the audit, or 304 when `If-None-Match` names its ETag (weak comparison,
    as HTTP has it for GET)."""
    if if_none_match:
        tags = {tag.removeprefix("W/") for tag in parse_etags(if_none_match)}
        if answer.etag in tags or "*" in tags:
            sent: HttpResponse = HttpResponseNotModified()
        else:
            sent = HttpResponse(answer.body, content_type=CONTENT_TYPE)
    else:
        sent = HttpResponse(answer.body, content_type=CONTENT_TYPE)
    sent["ETag"] = answer.etag
    sent["Cache-Control"] = CACHE_CONTROL
    return sent


def wait_seconds(value: str | None) -> float:
    """`?wait=`: seconds (up to `AUDITOR_WAIT_TIMEOUT_S`; more is that), `true` (that) or
    `false`; ValueError otherwise."""
    longest = float(settings.AUDITOR_WAIT_TIMEOUT_S)
    if value is None:
        return 0.0
    text = value.strip().lower()
    if text == "true":
        return longest
    if text in ("false", ""):
        return 0.0
    seconds = float(text)  # ValueError for anything else
    if not seconds >= 0:  # also NaN
        raise ValueError("wait: seconds must be 0 or more")
    return min(seconds, longest)


class WaitSlots:
    """Waiting requests in progress per API key, in this process (touched only on the event
    loop: no lock needed)."""

    def __init__(self, setting: str) -> None:
        self.setting = setting
        self.counts: dict[object, int] = {}

    def acquire(self, key: object) -> bool:
        key_id = getattr(key, "pk", key)
        if self.counts.get(key_id, 0) >= getattr(settings, self.setting):
            return False
        self.counts[key_id] = self.counts.get(key_id, 0) + 1
        return True

    def release(self, key: object) -> None:
        key_id = getattr(key, "pk", key)
        left = self.counts.get(key_id, 0) - 1
        if left > 0:
            self.counts[key_id] = left
        else:
            self.counts.pop(key_id, None)


_poll_slots = WaitSlots("AUDITOR_POLL_WAIT_PER_KEY")


def _unfinished(run_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these audits are still pending or running (a deleted one is not)."""
    return set(
        AuditRun.objects.filter(pk__in=run_ids)
        .exclude(status__in=FINISHED)
        .order_by()
        .values_list("pk", flat=True)
    )


class _Watch:
    """The audits waited for on one event loop, looked at together: one query per look,
    the pause between looks doubling from the first to the longest of `WAIT_PAUSES_S` (a
    new audit to wait for starts again from the first)."""

    def __init__(self) -> None:
        self.waiting: dict[uuid.UUID, set[asyncio.Future]] = {}
        self.pause = WAIT_PAUSES_S[0]
        self.task: asyncio.Task | None = None

    async def until_finished(self, request: Any, run_id: uuid.UUID, timeout: float) -> None:
        done = asyncio.get_running_loop().create_future()
        if run_id not in self.waiting:
            self.pause = WAIT_PAUSES_S[0]
        self.waiting.setdefault(run_id, set()).add(done)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._look(request))
        try:
            await asyncio.wait_for(done, timeout)
        except TimeoutError:
            pass
        finally:
            futures = self.waiting.get(run_id)
            if futures is not None:
                futures.discard(done)
                if not futures:
                    del self.waiting[run_id]

    async def _look(self, request: Any) -> None:
        while self.waiting:
            await asyncio.sleep(self.pause)
            self.pause = min(self.pause * 2, WAIT_PAUSES_S[1])
            ids = list(self.waiting)
            if not ids:
                return
            try:
                unfinished = await run_in_db_thread(request, _unfinished, ids)
            except Exception:  # the database is away: look again later
                continue
            for run_id in ids:
                if run_id not in unfinished:
                    for future in self.waiting.pop(run_id, ()):
                        if not future.done():
                            future.set_result(None)


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()


def _watch() -> _Watch:
    loop = asyncio.get_running_loop()
    watch = _watches.get(loop)
    if watch is None:
        watch = _watches[loop] = _Watch()
    return watch


async def respond(request: HttpRequest, run_id: uuid.UUID, wait: float) -> HttpResponse:
    """The answer to `GET /api/audits/{run_id}` (`wait`: seconds, see `wait_seconds`) for
    the request's key (`request.auth`)."""
    answer = await run_in_db_thread(request, current, run_id)
    if wait > 0 and not answer.finished and _poll_slots.acquire(request.auth):
        try:
            await _watch().until_finished(request, run_id, wait)
        finally:
            _poll_slots.release(request.auth)
        answer = await run_in_db_thread(request, current, run_id)
    return response(answer, request.headers.get("If-None-Match"))
