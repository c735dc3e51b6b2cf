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

The request's thread is taken from the pool only when the request runs sync code
(`RequestThread`): an async view whose middleware hooks run inline, like
`POST /api/audits`, needs none. Django's request signals would use it on every request
(`request_started` and, in `response.close()`, `request_finished`: two thread hops). When
their receivers are Django's own, which only tidy the state of the thread they run on
(its database connections, queries log, caches, urlconf), `handle` runs them where that
state is:

- `request_started` just before the first sync call of the request on its thread, in the
  same hop; never when the request runs no sync code (that thread holds nothing to tidy:
  every request that used it ran `request_finished` on it);
- `request_finished` (with `response.close()`) on the request's thread as before when
  the request used it; else inline on the event loop, where its receivers find nothing to
  close (unless a cache that closes connections was used, or the response holds
  resources: then in a thread).

Any other receiver connected to these signals (a project's, a library's) restores
Django's own handling for that signal.

It also loads Django's middleware through their inline-hook twins
(`auditor_site.middleware.FAST_EQUIVALENTS`): settings.MIDDLEWARE keeps the stock paths,
which `check --deploy` needs to run Django's real security checks.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import closing
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.cache import caches, close_caches
from django.core.cache.backends.base import BaseCache
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, ASGIRequest, get_script_prefix
from django.core.handlers.base import reset_urlconf
from django.db import close_old_connections, reset_queries
from django.urls import set_script_prefix

from auditor_site.middleware import fast_middleware_paths

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


# Django's receivers of the request signals: they tidy the state of the thread they run
# on, and find nothing to do on a thread (or event loop) that opened nothing.
THREAD_TIDY_ON_START = frozenset({reset_queries, close_old_connections})
THREAD_TIDY_ON_FINISH = frozenset({close_old_connections, close_caches, reset_urlconf})


def only_receivers(signal: signals.Signal, sender: type, allowed: frozenset) -> bool:
    """True when every live receiver of `signal` for `sender` is one of `allowed`."""
    sync_receivers, async_receivers = signal._live_receivers(sender)
    return not async_receivers and all(r in allowed for r in sync_receivers)


class RequestThread(Executor):
    """The executor of one request's thread-sensitive calls, taken from `pool` at the
    first call only. `first` (if any) runs on the thread just before that call, in the
    same job; an exception it raises is that call's."""

    def __init__(self, pool: _ExecutorPool, first=None) -> None:
        self.pool = pool
        self.first = first
        self.executor: ThreadPoolExecutor | None = None

    @property
    def used(self) -> bool:
        return self.executor is not None

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self.executor is None:
            self.executor = self.pool.acquire()
            first, self.first = self.first, None
            if first is not None:
                return self.executor.submit(_after, first, fn, args, kwargs)
        return self.executor.submit(fn, *args, **kwargs)

    def release(self) -> None:
        if self.executor is not None:
            self.pool.release(self.executor)


def _after(first, fn, args, kwargs) -> Any:
    first()
    return fn(*args, **kwargs)


class ReusableThreadASGIHandler(ASGIHandler):
    executors = _ExecutorPool()

    def load_middleware(self, is_async=False):
        """Django's loading of settings.MIDDLEWARE, each stock class swapped for its twin.

        Django reads settings.MIDDLEWARE once, here, at start-up: the swapped list is in
        place only while it does.
        """
        stock = settings.MIDDLEWARE
        settings.MIDDLEWARE = fast_middleware_paths(list(stock))
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = stock

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        thread = RequestThread(self.executors)
        try:
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send, thread)
        finally:
            thread.release()

    async def handle(self, scope, receive, send, thread: RequestThread | None = None):
        """Django's `ASGIHandler.handle`, with the request signals run where their
        receivers' state is (module docstring)."""
        if thread is None:  # called as Django's own
            return await super().handle(scope, receive, send)
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        with closing(body_file):
            set_script_prefix(get_script_prefix(scope))
            sender = self.__class__
            if only_receivers(signals.request_started, sender, THREAD_TIDY_ON_START):
                thread.first = lambda: signals.request_started.send(sender=sender, scope=scope)
            else:
                await signals.request_started.asend(sender=sender, scope=scope)
            request, error_response = self.create_request(scope, body_file)
            if request is None:
                body_file.close()
                await self.send_response(error_response, send)
                await sync_to_async(error_response.close)()
                return

            class RequestProcessed(Exception):
                pass

            response = None
            try:
                try:
                    async with asyncio.TaskGroup() as tg:
                        tg.create_task(self.listen_for_disconnect(receive))
                        response = await self.run_get_response(request)
                        await self.send_response(response, send)
                        raise RequestProcessed
                except* (RequestProcessed, RequestAborted):
                    pass
            except BaseExceptionGroup as exception_group:
                if len(exception_group.exceptions) == 1:
                    raise exception_group.exceptions[0]  # noqa: B904 (as Django)
                raise

            if response is None:
                await signals.request_finished.asend(sender=sender)
            elif not thread.used and _closes_inline(response, sender):
                response.close()
            else:
                await sync_to_async(response.close)()


def _closes_request_body(closer) -> bool:
    """Django adds `request.close` to every response: it closes the request's body file
    (Django closes that on the event loop too) and its uploaded files, if any (files on
    disk: a thread)."""
    request = getattr(closer, "__self__", None)
    return (
        isinstance(request, ASGIRequest)
        and closer.__func__ is ASGIRequest.close
        and not hasattr(request, "_files")
    )


def _closes_inline(response, sender: type) -> bool:
    """`response.close()` may run on the event loop: nothing to release in a thread."""
    return (
        all(_closes_request_body(closer) for closer in response._resource_closers)
        and all(type(cache).close is BaseCache.close for cache in caches.all(initialized_only=True))
        and only_receivers(signals.request_finished, sender, THREAD_TIDY_ON_FINISH)
    )
