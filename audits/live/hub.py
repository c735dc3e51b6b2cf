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
import time
from collections.abc import Awaitable
from datetime import datetime
from typing import Any, Protocol

from channels.layers import get_channel_layer
from django.utils import timezone

from audits import membership
from audits.events import ALL_AUDITS_GROUP, FEED_EVENTS
from audits.execution import people_first
from audits.live import fragments
from audits.store.db_threads import run_in_feed_thread

logger = logging.getLogger(__name__)
RECEIVE_RETRY_S = 1.0  # the pause after the channel layer failed a receive
MEMBERSHIP_CHECK_S = 1.0  # how often the hub makes sure it is still in the feed group

PENDING_CAP = 1000  # audits with news a page's next update looks at, at most (the latest)
STATUS_INTERVAL_S = 1.0  # the counters and the cursor are sent at most this often
BURST_INTERVAL_S = 0.5  # a page in a burst (more news than it shows) is updated this often


class Watcher(Protocol):
    filter_key: str

    def render_events(self, audit_ids: list[str]) -> Awaitable[str]: ...

    def catch_up(self, after: datetime) -> Awaitable[None]: ...

    async def send(
        self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False
    ) -> None: ...


class FilterGroup:
    """The pages that watch with one set of filters, the news they have not had, and the
    task that renders their updates."""

    def __init__(self) -> None:
        self.watchers: list[Watcher] = []
        self.pending: dict[str, None] = {}  # audit ids, in the order of their latest news
        self.not_before = 0.0  # loop time: after a burst, the next update waits until then
        self.news = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.delivering = False  # an update is being rendered
        self.noted = 0.0  # time.monotonic() of the latest news
        self.status_sent = 0

    def note(self, audit_id: str) -> None:
        self.pending.pop(audit_id, None)
        self.pending[audit_id] = None
        if len(self.pending) > PENDING_CAP:  # an update shows the newest cards only
            del self.pending[next(iter(self.pending))]
        self.noted = time.monotonic()
        self.news.set()


class FeedHub:
    """Receiving and rendering are separate tasks. The receiver only notes which audits
    have news (the channel is drained as fast as events come, so the layer's bounded
    channel never fills and drops them). Each set of filters has its own renderer, which
    renders every audit noted since its last update in one query and one fragment, sent
    to all its pages; the sets render side by side (on threads of their own), so a quiet
    filtered page is never held up by a large update of another. When idle an update is
    one card, sent at once. Under load an update never renders more than a page shows
    (`fragments.news_rows`: a burst's newest cards replace the list), and a set of filters
    in a burst is updated at most every `BURST_INTERVAL_S`: nobody reads cards faster.
    The counters and the cursor (one aggregate query, the same for every page) go out at
    most every `STATUS_INTERVAL_S`, and once more after the last update, so they are
    never staler than that."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.loop = asyncio.get_running_loop()
        self.watchers: dict[Watcher, None] = {}  # insertion-ordered set
        self.groups: dict[str, FilterGroup] = {}  # by filter_key
        self.channel: str | None = None
        self.task: asyncio.Task | None = None  # receiving, and the counters when owed
        self.lock = asyncio.Lock()
        self.status_due = 0.0  # loop time from which the next status may go out
        self.status_owed = asyncio.Event()  # cards went out since the last status
        self.status_render: asyncio.Future[str] | None = None  # the one under way
        self.status_read_at = -1.0  # time.monotonic() when the last status began to read
        self.status_count = 0  # statuses rendered (a group's `status_sent`: the last it got)
        self.member_at = timezone.now()  # when the hub was last known to be in the group
        self.recheck = asyncio.Event()  # check the membership now (a receive failed)
        self.join_failing = False  # the last membership check could not reach the layer

    async def join(self, watcher: Watcher) -> None:
        """Once this returns, every later event reaches `watcher`."""
        async with self.lock:
            if self.channel is None:
                self.channel = await self.layer.new_channel()
            self.member_at = timezone.now()
            await self.layer.group_add(ALL_AUDITS_GROUP, self.channel)
            self.watchers[watcher] = None
            group = self.groups.get(watcher.filter_key)
            if group is None:
                group = self.groups[watcher.filter_key] = FilterGroup()
                group.task = asyncio.create_task(self._serve(group))
            group.watchers.append(watcher)
            if self.task is None:
                self.task = asyncio.create_task(self._run())

    async def leave(self, watcher: Watcher) -> None:
        async with self.lock:
            if self.watchers.pop(watcher, None) is not None:
                group = self.groups[watcher.filter_key]
                group.watchers.remove(watcher)
                if not group.watchers:
                    del self.groups[watcher.filter_key]
                    if group.task is not None:
                        group.task.cancel()
            if self.watchers or self.task is None:
                return
            self.task.cancel()
            self.task = None
            await self.layer.group_discard(ALL_AUDITS_GROUP, self.channel)
            self.channel = None

    async def _run(self) -> None:
        assert self.channel is not None
        await asyncio.gather(
            self._receive(self.channel), self._stay_member(self.channel), self._owed_status()
        )

    async def _receive(self, channel: str) -> None:
        """Events until cancelled. When the layer fails (Redis restarted or unreachable),
        again after a pause, and the membership is checked at once."""
        while True:
            try:
                message = await self.layer.receive(channel)
                self.note(message.get("event") or {})
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("live feed: could not receive an event")
                await asyncio.sleep(RECEIVE_RETRY_S)
                self.recheck.set()

    async def _stay_member(self, channel: str) -> None:
        """Joins the group again every `MEMBERSHIP_CHECK_S` (memberships expire; a restarted
        Redis forgot them, and the layer's reads may reconnect to it without failing). When
        the hub was no member any more, every page catches up from the database on what
        changed since it last was one."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.recheck.wait(), MEMBERSHIP_CHECK_S)
            self.recheck.clear()
            checked = timezone.now()
            try:
                lost = await membership.rejoin(self.layer, ALL_AUDITS_GROUP, channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                if not self.join_failing:  # once per outage, not every second
                    logger.warning("live feed: could not join the feed group", exc_info=True)
                self.join_failing = True
                continue
            self.join_failing = False
            if lost:
                logger.warning("live feed: joined the feed group again; the pages catch up")
                for watcher in list(self.watchers):
                    try:
                        await watcher.catch_up(self.member_at)
                    except Exception:
                        logger.warning("live feed: a page could not catch up", exc_info=True)
            self.member_at = checked

    def note(self, event: dict[str, Any]) -> None:
        """Remember that `event`'s audit has news for every set of filters."""
        if event.get("type") not in FEED_EVENTS or not event.get("audit_id"):
            return
        audit_id = str(event["audit_id"])
        for group in self.groups.values():
            group.note(audit_id)

    async def _serve(self, group: FilterGroup) -> None:
        while True:
            await _until_due(group, self.loop)
            try:
                await self.deliver(group)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("live feed: could not deliver an update")

    async def deliver(self, group: FilterGroup) -> None:
        """One update of `group`: the cards of the news noted until now (what comes
        meanwhile goes in the next update), with the status when due (then the pages of
        the other sets of filters get it too, unless an update of theirs carries it)."""
        ids, group.pending, noted = list(group.pending), {}, group.noted
        group.delivering = True
        try:
            status = await self._status_if_due(noted)
            rows = await group.watchers[0].render_events(ids) if group.watchers else ""
        finally:
            group.delivering = False
        if fragments.is_burst(rows):
            group.not_before = self.loop.time() + BURST_INTERVAL_S
        if status:
            group.status_sent = self.status_count
        if rows or status:
            await _send_all(group.watchers, rows + status)
        if status:
            for other in list(self.groups.values()):
                if other.status_sent != self.status_count and not other.delivering:
                    other.status_sent = self.status_count
                    await _send_all(other.watchers, status)

    async def _status_if_due(self, noted: float) -> str:
        """The counters and cursor if they may go out now (rendered before the cards, so
        the cursor is never later than the cards' reading), or the ones being rendered
        for another set's update; else they are owed if news `noted` then is newer than
        the last ones read."""
        if self.status_render is not None:
            return await asyncio.shield(self.status_render)
        now = self.loop.time()
        if now < self.status_due:
            if noted >= self.status_read_at:  # (time.monotonic, as `noted`)
                self.status_owed.set()
            return ""
        self.status_due, self.status_read_at = now + STATUS_INTERVAL_S, time.monotonic()
        self.status_count += 1
        self.status_owed.clear()
        self.status_render = asyncio.ensure_future(_render_status())
        try:
            return await asyncio.shield(self.status_render)
        finally:
            self.status_render = None

    async def _owed_status(self) -> None:
        """The status owed after an update that went without it, once it may go out."""
        while True:
            try:
                await self.status_owed.wait()
                await asyncio.sleep(max(0.0, self.status_due - self.loop.time()))
                if self.status_owed.is_set():
                    status = await self._status_if_due(time.monotonic())
                    if status:
                        for group in list(self.groups.values()):
                            group.status_sent = self.status_count
                        await _send_all(list(self.watchers), status)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("live feed: could not deliver the counters")


async def _until_due(group: FilterGroup, loop: asyncio.AbstractEventLoop) -> None:
    """Until `group` has news and may be updated."""
    while True:
        group.news.clear()  # before looking: news from now on wakes the wait below
        wait = group.not_before - loop.time() if group.pending else None
        if wait is not None and wait <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(group.news.wait(), wait)


def _status() -> str:
    with people_first.waiting():
        return fragments.feed_status()


async def _render_status() -> str:
    return await run_in_feed_thread(_status)


async def _send_all(watchers: list[Watcher], html: str) -> None:
    for watcher in list(watchers):  # the same text for each
        await _send(watcher, html)


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
