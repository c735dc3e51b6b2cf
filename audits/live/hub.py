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

PENDING_CAP = 1000  # audits with news a page's next update looks at, at most (the latest)
STATUS_INTERVAL_S = 1.0  # the counters and the cursor are sent at most this often
BURST_INTERVAL_S = 0.5  # a page in a burst (more news than it shows) is updated this often


PENDING_CAP = 1000  # audits with news a page's next update looks at, at most (the latest)
STATUS_INTERVAL_S = 1.0  # the counters and the cursor are sent at most this often
BURST_INTERVAL_S = 0.5  # a page in a burst (more news than it shows) is updated this often


class Watcher(Protocol):
    filter_key: str

    def render_events(self, audit_ids: list[str]) -> Awaitable[str]: ...

    async def send(self, text_data: str | None = None, bytes_data: bytes | None = None,
                   close: bool = False) -> None: ...


class FilterGroup:
    """The pages that watch with one set of filters, and the news they have not had."""

    def __init__(self) -> None:
        self.watchers: list[Watcher] = []
        self.pending: dict[str, None] = {}  # audit ids, in the order of their latest news
        self.not_before = 0.0  # loop time: after a burst, the next update waits until then

    def note(self, audit_id: str) -> None:
        self.pending.pop(audit_id, None)
        self.pending[audit_id] = None
        if len(self.pending) > PENDING_CAP:  # an update shows the newest cards only
            del self.pending[next(iter(self.pending))]


class FeedHub:
    """Receiving and rendering are two tasks: the receiver only notes which audits have
    news (the channel is drained as fast as events come, so the layer's bounded channel
    never fills and drops them), the renderer renders every audit noted since a set of
    filters' last update in one query and one fragment, sent to all its pages. When idle
    an update is one card, sent at once. Under load an update never renders more than a
    page shows (`fragments.news_rows`: a burst's newest cards replace the list), and a set
    of filters in a burst is updated at most every `BURST_INTERVAL_S`: nobody reads cards
    faster, and the other sets (a filtered page in a quiet corner) are not held up. The
    counters and the cursor (one aggregate query, the same for every page) go out at most
    every `STATUS_INTERVAL_S`, and once more after the last update, so they are never
    staler than that."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.loop = asyncio.get_running_loop()
        self.watchers: dict[Watcher, None] = {}  # insertion-ordered set
        self.groups: dict[str, FilterGroup] = {}  # by filter_key
        self.channel: str | None = None
        self.task: asyncio.Task | None = None
        self.lock = asyncio.Lock()
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
            self.groups.setdefault(watcher.filter_key, FilterGroup()).watchers.append(watcher)
            if self.task is None:
                self.task = asyncio.create_task(self._run())

    async def leave(self, watcher: Watcher) -> None:
        async with self.lock:
            if self.watchers.pop(watcher, None) is not None:
                group = self.groups[watcher.filter_key]
                group.watchers.remove(watcher)
                if not group.watchers:
                    del self.groups[watcher.filter_key]
            if self.watchers or self.task is None:
                return
            self.task.cancel()
            self.task = None
            await self.layer.group_discard(ALL_AUDITS_GROUP, self.channel)
            self.channel = None

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
        """Remember that `event`'s audit has news for every set of filters."""
        if event.get("type") not in FEED_EVENTS or not event.get("audit_id"):
            return
        audit_id = str(event["audit_id"])
        for group in self.groups.values():
            group.note(audit_id)
        self.news.set()

    async def _render(self) -> None:
        while True:
            await self._until_something_is_due()
            try:
                await self.deliver()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("live feed: could not deliver an update")

    async def _until_something_is_due(self) -> None:
        """Until a set of filters with news may be updated, or the counters are owed."""
        while True:
            self.news.clear()  # before looking: news from now on wakes the wait below
            due = [group.not_before for group in self.groups.values() if group.pending]
            if self.status_owed:
                due.append(self.status_due)
            wait = min(due) - self.loop.time() if due else None
            if wait is not None and wait <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.news.wait(), wait)

    async def deliver(self) -> None:
        """One update: the cards of every set of filters that has news and may be updated
        now (the news noted until now; what comes meanwhile goes in the next update), and
        the status when due."""
        now = self.loop.time()
        news: dict[FilterGroup, list[str]] = {}
        for group in self.groups.values():
            if group.pending and group.not_before <= now:
                news[group], group.pending = list(group.pending), {}
        status = ""
        if now >= self.status_due and (news or self.status_owed):
            self.status_due, self.status_owed = now + STATUS_INTERVAL_S, False
            # The status first: its cursor must not be later than the cards' reading.
            status = await _render_status()
        elif news:
            self.status_owed = True
        for group in list(self.groups.values()):
            rows = ""
            if group in news and group.watchers:
                rows = await group.watchers[0].render_events(news[group])
                if fragments.is_burst(rows):
                    group.not_before = self.loop.time() + BURST_INTERVAL_S
            if rows or status:
                for watcher in list(group.watchers):  # the same text for each
                    await _send(watcher, rows + status)


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

