"""One subscription to the live feed per process: render each event once, send it to all.

With a channel-layer group member per Live page, every event costs each page a message
(copied, queued, dispatched) and a render. The hub is the process's one member of the
"audits" group instead: it receives an event once, renders the card fragment once per
set of filters in use, and hands the same text to every page watching with those
filters. It runs while at least one page watches, on the server's event loop; with the
Redis layer it receives what other processes publish too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any, Protocol

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from .. import people_first
from ..events import ALL_AUDITS_GROUP, FEED_EVENTS
from . import fragments

logger = logging.getLogger(__name__)

PENDING_CAP = 1000  # audits with news a round looks at, at most (the latest news)
STATUS_INTERVAL_S = 1.0  # the counters and the cursor are sent at most this often


class Watcher(Protocol):
    filter_key: str

    def render_events(self, audit_ids: list[str]) -> Awaitable[str]: ...

    async def send(self, text_data: str | None = None, bytes_data: bytes | None = None,
                   close: bool = False) -> None: ...


class FeedHub:
    """Receiving and rendering are two tasks: the receiver only notes which audits have
    news (the channel is drained as fast as events come, so the layer's bounded channel
    never fills and drops them), the renderer renders every audit noted since its last
    round in one query and one fragment per set of filters. Under load the rounds grow,
    but never past what a page shows (`fragments.news_rows`); when idle a round is one
    card, sent at once. The counters and the cursor (one aggregate query, the same for
    every page) go out at most once per `STATUS_INTERVAL_S`, and once more after a burst
    ends, so they are never staler than that."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.loop = asyncio.get_running_loop()
        self.watchers: dict[Watcher, None] = {}  # insertion-ordered set
        self.channel: str | None = None
        self.task: asyncio.Task | None = None
        self.lock = asyncio.Lock()
        self.pending: dict[str, None] = {}  # audit ids with news since the last round
        self.news = asyncio.Event()
        self.status_due = 0.0  # loop time from which the next status may go out
        self.status_owed = False  # cards went out since the last status

    async def join(self, watcher: Watcher) -> None:
        """Once this returns, every later event reaches `watcher`."""
        async with self.lock:
            if self.channel is None:
                self.channel = await self.layer.new_channel()
            # Again at every join: group membership expires (channels' group_expiry).
            await self.layer.group_add(ALL_AUDITS_GROUP, self.channel)
            self.watchers[watcher] = None
            if self.task is None:
                self.task = asyncio.create_task(self._run())

    async def leave(self, watcher: Watcher) -> None:
        async with self.lock:
            self.watchers.pop(watcher, None)
            if self.watchers or self.task is None:
                return
            self.task.cancel()
            self.task = None
            await self.layer.group_discard(ALL_AUDITS_GROUP, self.channel)
            self.channel = None
            self.pending.clear()

    async def _run(self) -> None:
        assert self.channel is not None
        await asyncio.gather(self._receive(self.channel), self._render())

    async def _receive(self, channel: str) -> None:
        while True:
            try:
                message = await self.layer.receive(channel)
                self.note(message.get("event") or {})
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("live feed: could not receive an event")

    def note(self, event: dict[str, Any]) -> None:
        """Remember that `event`'s audit has news for the next round."""
        if event.get("type") not in FEED_EVENTS or not event.get("audit_id"):
            return
        audit_id = str(event["audit_id"])
        self.pending.pop(audit_id, None)  # kept in the order of the latest news
        self.pending[audit_id] = None
        if len(self.pending) > PENDING_CAP:  # a round shows the newest cards only
            del self.pending[next(iter(self.pending))]
        self.news.set()

    async def _render(self) -> None:
        while True:
            await self._news_or_status_due()
            self.news.clear()
            audit_ids, self.pending = list(self.pending), {}
            try:
                await self.deliver(audit_ids)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("live feed: could not deliver %d cards", len(audit_ids))

    async def _news_or_status_due(self) -> None:
        if not self.status_owed:
            await self.news.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.news.wait(), self.status_due - self.loop.time())

    async def deliver(self, audit_ids: list[str]) -> None:
        now = self.loop.time()
        with_status = now >= self.status_due
        if not audit_ids and not with_status:
            return
        if with_status:
            self.status_due, self.status_owed = now + STATUS_INTERVAL_S, False
        else:
            self.status_owed = True
        # The status first: its cursor must not be later than the cards' reading.
        status = await _render_status() if with_status else ""
        by_filters: dict[str, list[Watcher]] = {}
        for watcher in list(self.watchers):
            by_filters.setdefault(watcher.filter_key, []).append(watcher)
        for watchers in by_filters.values():
            rows = await watchers[0].render_events(audit_ids) if audit_ids else ""
            html = rows + status
            for watcher in watchers:  # the same text for each: no per-page work
                if html:
                    await _send(watcher, html)


@database_sync_to_async
def _render_status() -> str:
    with people_first.waiting():
        return fragments.feed_status()


async def _send(watcher: Watcher, html: str) -> None:
    try:
        await watcher.send(text_data=html)
    except Exception:  # that page went away meanwhile
        logger.debug("live feed: a page left before its update", exc_info=True)


_hubs: dict[int, FeedHub] = {}


def feed_hub() -> FeedHub:
    """The hub of the running loop and the current channel layer (tests change both)."""
    loop = asyncio.get_running_loop()
    layer = get_channel_layer()
    hub = _hubs.get(id(loop))
    if hub is None or hub.loop is not loop or hub.layer is not layer:
        for key in [k for k, h in _hubs.items() if h.loop.is_closed()]:
            del _hubs[key]
        hub = _hubs[id(loop)] = FeedHub(layer)
    return hub

