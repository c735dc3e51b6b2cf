"""Django's ASGI handler with reusable request threads.

Django runs the sync parts of each ASGI request (sync middleware hooks, sync views, the
request signals) on one thread made for that request: a new `ThreadPoolExecutor`, its
thread started on the event loop (which blocks until the thread runs, a long wait when
other threads hold the GIL) and a second thread to join it afterwards. Under load the
event loop spent about half its time in `Thread.start`.

`ReusableThreadASGIHandler` gives each request a single-thread executor from a pool
instead (asgiref's `ThreadSensitiveContext(executor=...)`): still one thread per request
for all of its sync code, but threads are reused. An executor goes back to the pool only
once its thread is idle (a sync call abandoned by a disconnected client finishes first),
and at most `MAX_IDLE` idle executors are kept; under a burst, new ones are made as
before, so a slow request never holds up another.

It also loads Django's middleware through their inline-hook twins
(`auditor_site.middleware.FAST_EQUIVALENTS`): settings.MIDDLEWARE keeps the stock paths,
which `check --deploy` needs to run Django's real security checks.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

MAX_IDLE = 32


class _ExecutorPool:
    def __init__(self, max_idle: int = MAX_IDLE) -> None:
        self.max_idle = max_idle
        self._idle: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()

    def acquire(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def release(self, executor: ThreadPoolExecutor) -> None:
        """Back to the pool when its thread has finished everything queued on it."""
        executor.submit(_noop).add_done_callback(lambda _: self._put_back(executor))

    def _put_back(self, executor: ThreadPoolExecutor) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(executor)
                return
        executor.shutdown(wait=False)

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)


def _noop() -> None:
    pass


class ReusableThreadASGIHandler(ASGIHandler):
    executors = _ExecutorPool()

    def load_middleware(self, is_async=False):
        """Django's loading of settings.MIDDLEWARE, each stock class swapped for its twin.

        Django reads settings.MIDDLEWARE once, here, at start-up: the swapped list is in
        place only while it does.
        """
        from auditor_site.middleware import fast_middleware_paths

        stock = settings.MIDDLEWARE
        settings.MIDDLEWARE = fast_middleware_paths(list(stock))
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = stock

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(
                f"Django can only handle ASGI/HTTP connections, not {scope['type']}."
            )
        executor = self.executors.acquire()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.executors.release(executor)
