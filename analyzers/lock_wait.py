"""How long a database call may wait for SQLite's write lock, per context.

SQLite makes a writer wait for the lock up to the connection's busy timeout (the `timeout`
of the database settings, 20 s: right for analysis threads and workers). A request should
not hang that long: the server sets `lock_wait` to `AUDITOR_REQUEST_LOCK_WAIT_MS` for
every HTTP request and WebSocket (auditor_site/asgi.py), so a locked database gives a 503
with Retry-After in about that time, and code that must not wait at all (the rate
limiter's counter sync) narrows it further with `waiting_at_most`.

`lock_wait` is a ContextVar, so asgiref carries it into the threads that run a request's
sync code. A wrapper on every SQLite connection (installed when it is created) sets
`PRAGMA busy_timeout` when the wanted wait differs from the connection's current one, so
a pooled connection serves a request and a task with their own waits. Other databases
keep their own lock handling.

Requests go first. The server's analysis processes (audits.analysis_processes) write in
batches that hold the lock for tens of ms; a request polling beside two of them could
lose several turns in a row. So the server counts its requests waiting for the lock in
shared memory (`shared_requests_waiting`, handed to each child), and a child that
`defers_to` it holds its own BEGIN while the count is not zero (before its first try and
between its tries while another connection holds the lock), at most `MAX_DEFER_S` per
transaction, so a stream of requests slows the analysis but never stalls it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import OperationalError
from django.db.backends.signals import connection_created

POLL_S = 0.001  # between two tries of a BEGIN while another connection writes
MAX_DEFER_S = 0.05  # an analysis process's BEGIN held for the server's requests, at most

_count_lock = threading.Lock()
_requests_waiting: Any = None  # multiprocessing RawValue("i"), made in the server
_deferring = False  # in an analysis process: let the server's requests go first

# Milliseconds; None: the connection's configured timeout.
lock_wait: ContextVar[int | None] = ContextVar("db_lock_wait_ms", default=None)


@contextmanager
def waiting_at_most(ms: int) -> Iterator[None]:
    """Database calls inside wait at most `ms` for a lock (never longer than now)."""
    current = lock_wait.get()
    token = lock_wait.set(ms if current is None else min(ms, current))
    try:
        yield
    finally:
        lock_wait.reset(token)


def _configured_ms(connection) -> int:
    return int(float(connection.settings_dict.get("OPTIONS", {}).get("timeout", 5)) * 1000)


def _busy_timeout(execute, sql, params, many, context):
    connection = context["connection"]
    wanted = lock_wait.get()
    ms = _configured_ms(connection) if wanted is None else wanted
    if sql.startswith("BEGIN") and ms > 0:
        defer_until = 0.0
        if _deferring:
            defer_until = time.monotonic() + MAX_DEFER_S
            _let_requests_first(defer_until)
        return _begin(
            execute,
            sql,
            params,
            many,
            context,
            ms,
            request=wanted is not None,
            defer_until=defer_until,
        )
    _set_busy_timeout(connection, ms)
    return execute(sql, params, many, context)


def _begin(
    execute, sql, params, many, context, ms: int, request: bool = False, defer_until: float = 0.0
):
    """A transaction's BEGIN (IMMEDIATE: it takes the write lock) tried every `POLL_S`
    for up to `ms`. SQLite's own wait sleeps in growing steps (1, 2, 5, 10 … 100 ms) and
    overslept the lock's release by tens of ms under load (a lone audit's POST waited
    ~100 ms behind the analysis's batch writes). Repeating a BEGIN is safe: nothing of
    the transaction has run yet. Until `defer_until` (an analysis process's), a try is
    skipped while a request of the server waits too: the lock's next turn is the
    request's, not a coin toss between the two."""
    connection = context["connection"]
    deadline = time.monotonic() + ms / 1000
    _set_busy_timeout(connection, 0)
    try:
        try:
            return execute(sql, params, many, context)
        except OperationalError as exc:
            if "locked" not in str(exc):
                raise
            error = exc
        # The retries on the driver's connection: a failed try through Django's layers
        # (its error wrapping, a traceback) cost far more CPU, and these may be many.
        raw = connection.connection
        with _counted(request):
            while time.monotonic() < deadline:
                time.sleep(POLL_S)
                if time.monotonic() < defer_until and _requests_waiting.value > 0:
                    continue  # (defer_until: set only where _requests_waiting is)
                try:
                    return raw.execute(sql)
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc):
                        raise OperationalError(*exc.args) from exc
        raise error
    finally:
        _set_busy_timeout(connection, ms)


@contextmanager
def _counted(request: bool) -> Iterator[None]:
    """A request's wait for the lock, counted where the analysis processes see it."""
    shared = _requests_waiting if request else None
    if shared is None:
        yield
        return
    with _count_lock:
        shared.value += 1
    try:
        yield
    finally:
        with _count_lock:
            shared.value -= 1


def _let_requests_first(deadline: float) -> None:
    while _requests_waiting.value > 0 and time.monotonic() < deadline:
        time.sleep(POLL_S)


def requests_waiting() -> bool:
    """Whether a request of the server waits for the write lock now (known in the server
    with analysis processes and in those processes: the count they share)."""
    return _requests_waiting is not None and _requests_waiting.value > 0


def shared_requests_waiting(context: Any) -> Any:
    """In the server: its count of requests waiting for the lock, in shared memory (made
    once, with `context`'s RawValue), for `defer_to`."""
    global _requests_waiting
    with _count_lock:
        if _requests_waiting is None:
            _requests_waiting = context.RawValue("i", 0)
        return _requests_waiting


def defer_to(shared: Any) -> None:
    """In an analysis process: hold BEGINs while the server's requests wait (`shared`)."""
    global _requests_waiting, _deferring
    _requests_waiting, _deferring = shared, True


def _set_busy_timeout(connection, ms: int) -> None:
    if getattr(connection, "_busy_timeout_ms", None) != ms and connection.connection is not None:
        connection.connection.execute(f"PRAGMA busy_timeout = {int(ms)}")
        connection._busy_timeout_ms = ms


def _install(sender, connection, **kwargs) -> None:
    if connection.vendor != "sqlite":
        return
    connection._busy_timeout_ms = _configured_ms(connection)  # a new sqlite3 connection
    if _busy_timeout not in connection.execute_wrappers:
        connection.execute_wrappers.append(_busy_timeout)


connection_created.connect(_install, dispatch_uid="analyzers.lock_wait.install")
