"""What a thread that runs audits keeps between them (used by `services.execute_run`).

Built per audit, the plumbing cost far more than the analysis; per worker thread:

- `run_engine(coro)`: one long-lived event loop per worker thread for the engine (in a
  companion thread). The worker thread serves the engine's thread-sensitive
  `sync_to_async` calls (the collision store) while it waits, as `async_to_sync` would,
  so they use this thread's database connection (and a test's transaction);
- `keep_connections()`: this thread's database connections stay open between tasks
  (`AUDITOR_TASK_CONN_MAX_AGE` seconds; closed when broken or older, like a request's);
- `cached_auditor(key, build)`: the engine `Auditor` per configuration snapshot,
  configuration version and registry (parsed settings reused; see
  `analyzers.config_store.config_version`).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from asgiref.current_thread_executor import CurrentThreadExecutor
from asgiref.sync import AsyncToSync
from django.conf import settings
from django.db import connections

_local = threading.local()
AUDITORS_PER_THREAD = 8  # distinct configuration snapshots kept per worker thread


def _engine_loop() -> asyncio.AbstractEventLoop:
    loop = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=loop.run_forever,
            name=f"engine-{threading.current_thread().name}",
            daemon=True,
        )
        thread.start()
        _local.loop = loop
    return loop


def run_engine(make_coro: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run `make_coro()` on this thread's engine loop and return its result.

    Like `async_to_sync` without building a loop (and a thread) per call: thread-sensitive
    `sync_to_async` calls inside run here, in the calling thread.
    """
    executor = CurrentThreadExecutor(getattr(AsyncToSync.executors, "current", None))

    async def main() -> Any:
        # The same hook async_to_sync sets: thread-sensitive calls come back to us.
        AsyncToSync.executors.current = executor
        return await make_coro()

    future = asyncio.run_coroutine_threadsafe(main(), _engine_loop())
    executor.run_until_future(future)
    return future.result()


def keep_connections() -> None:
    """Keep this thread's database connections open between tasks (a worker thread)."""
    max_age = getattr(settings, "AUDITOR_TASK_CONN_MAX_AGE", 0)
    if not max_age:
        return
    for conn in connections.all(initialized_only=False):
        if conn.settings_dict.get("CONN_MAX_AGE") != max_age:
            # This thread's own wrapper: the other threads keep the global setting.
            conn.settings_dict = {**conn.settings_dict, "CONN_MAX_AGE": max_age}


def cached_auditor(key: tuple, build: Callable[[], Any]) -> Any:
    """This thread's engine Auditor for `key` (configuration, version, registry), or `build()`."""
    cache: dict[tuple, Any] | None = getattr(_local, "auditors", None)
    if cache is None:
        cache = _local.auditors = {}
    auditor = cache.get(key)
    if auditor is None:
        if len(cache) >= AUDITORS_PER_THREAD:
            cache.pop(next(iter(cache)))
        auditor = cache[key] = build()
    return auditor


def snapshot_text(snapshot: dict) -> str:
    """`snapshot` as canonical JSON (a cache key), remembered for this thread's last one:
    the runs of a batch share their configuration snapshot, and comparing two is much
    cheaper than encoding one."""
    last = getattr(_local, "snapshot", None)
    if last is not None and last[0] == snapshot:
        return last[1]
    text = json.dumps(snapshot, sort_keys=True, default=str)
    _local.snapshot = (snapshot, text)
    return text
