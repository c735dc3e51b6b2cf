"""A few long-lived threads for the database work of hot API views and the live feed.

Django runs every sync step of an ASGI request on a thread made for that request, and
channels' `database_sync_to_async` closes the connection around every call, so each
request or live update also opens (and closes) its own database connection: for SQLite
that is a new file handle, the WAL pragmas and ~30 SQL functions registered again (more
CPU than a filtered Live page's whole update; docs/contributing/performance.md). `run_in_db_thread` runs a
function on one of `AUDITOR_API_DB_THREADS` threads, `run_in_feed_thread` on one of the
live feed's own (`FEED_THREADS`: its renders never hold up an API request's store), and
their threads keep their connection between calls, under Django's own health rules:
closed after an error that left it unusable, when a transaction was left open, and after
`MAX_CONNECTION_AGE` seconds.

Under the test client (a sync request) `run_in_db_thread` runs the function through the
usual `sync_to_async(thread_sensitive=True)`, on the test's own connection.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import SyncToAsync, sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.db import OperationalError, connections

MAX_CONNECTION_AGE = 60.0
FEED_THREADS = 4  # sets of filters the live feed renders side by side (and its counters)
# Off only to measure what the pool still pays (bench/bench_server.py).
_BENCH_PLAIN = os.environ.get("AUDITOR_BENCH_PLAIN_HANDLER") == "1"

_executors: dict[str, ThreadPoolExecutor] = {}
_executor_lock = threading.Lock()
_opened: threading.local = threading.local()


def _pool(name: str, size: int) -> ThreadPoolExecutor:
    with _executor_lock:
        executor = _executors.get(name)
        if executor is None:
            executor = _executors[name] = ThreadPoolExecutor(
                max_workers=size, thread_name_prefix=name
            )
        return executor


def _tidy_connections() -> None:
    """Keep this thread's connections unless broken, mid-transaction or too old."""
    now = time.monotonic()
    opened = getattr(_opened, "at", None)
    if opened is None:
        opened = _opened.at = now
    too_old = now - opened > MAX_CONNECTION_AGE
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if (
            too_old
            or conn.in_atomic_block
            or conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]
        ):
            conn.close()
        elif conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()
    if too_old:
        _opened.at = None


def _call[T](func: Callable[..., T], *args: Any) -> T:
    try:
        return func(*args)
    finally:
        _tidy_connections()


async def run_in_db_thread[T](request: Any, func: Callable[..., T], *args: Any) -> T:
    """`func(*args)` on a pooled thread (ASGI) or the request's sync thread (tests)."""
    if isinstance(request, ASGIRequest) and not _BENCH_PLAIN:
        pool = _pool("api-db", getattr(settings, "AUDITOR_API_DB_THREADS", 4))
        return await SyncToAsync(_call, thread_sensitive=False, executor=pool)(func, *args)
    return await sync_to_async(func)(*args)


async def run_in_feed_thread[T](func: Callable[..., T], *args: Any) -> T:
    """`func(*args)` (a read) on one of the live feed's threads."""
    pool = _pool("feed-db", FEED_THREADS)
    return await SyncToAsync(_read, thread_sensitive=False, executor=pool)(func, *args)


def _read[T](func: Callable[..., T], *args: Any) -> T:
    """`_call`, once more on a fresh connection when the kept one turned out dead (the
    database restarted since this thread last used it)."""
    try:
        return _call(func, *args)
    except OperationalError:
        if all(conn.connection is None for conn in connections.all(initialized_only=True)):
            return _call(func, *args)  # `_call` closed the dead ones
        raise
