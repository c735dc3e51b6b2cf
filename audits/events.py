"""The one place progress events leave the audit pipeline (to the channel layer).

Every event is a small dict with a `type` and, when it concerns one audit, an `audit_id`.
It goes to "audit-<id>" (that audit's page) and, when it changes the audit's card
(`FEED_EVENTS`), to the group "audits" (every Live page), as the channel-layer message
`{"type": "audit.event", "event": event}`. Per-audit progress (trace lines, analyzers,
stream progress) stays off the feed group: with hundreds of watchers every message there
costs hundreds of deliveries.

Nothing is sent to a group nobody watches, where the layer can tell (`audits.membership`:
the in-memory layer's group table; on Redis one round trip for a batch's groups, asked by
`watched_audits` and `publish_many`; a lone event on Redis is sent without asking). A page
that starts watching later reads the database after joining its group, so it misses
nothing. Events published from threads without a loop are handed to the server's loop
without waiting (one drain task keeps their order), or, in a process without a server loop
(db_worker, tests), to one long-lived publisher loop of the process.

In an analysis process (audits.analysis_processes) nothing is sent: `capture(sink)` hands
every event to `sink`, and the parent process publishes them when the batch returns (its
channel layer, in memory, is the one the pages listen to).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer

from audits import membership

logger = logging.getLogger(__name__)

# The event loop of this process's server (daphne), once a live consumer ran on it. The
# in-memory channel layer's queues belong to that loop: sending from another loop (a task
# thread's `async_to_sync`) puts messages in them without waking it, and they would sit
# there until something else woke the server. Seen as card latencies of up to a second.
_server_loop: asyncio.AbstractEventLoop | None = None
_capture: Callable[[dict[str, Any]], None] | None = None  # set in analysis processes
_captured_watched: Callable[[str], bool] | None = None  # None: the sink keeps every audit's
PUBLISH_WAIT = 5.0  # seconds a worker thread waits for its event to be handed over
DRAIN_YIELD_EVERY = 32  # events an outbox sends before it lets the loop run others

ALL_AUDITS_GROUP = "audits"
MESSAGE_TYPE = "audit.event"
FEED_EVENTS = frozenset({"audit_submitted", "audit_started", "audit_finished", "audit_reviewed"})


def audit_group(audit_id: Any) -> str:
    return f"audit-{audit_id}"


def _groups(event: dict[str, Any]) -> list[str]:
    groups = []
    if event.get("type") in FEED_EVENTS or not event.get("audit_id"):
        groups.append(ALL_AUDITS_GROUP)
    if event.get("audit_id"):
        groups.append(audit_group(event["audit_id"]))
    return groups


def has_watchers(group: str, layer: Any = None) -> bool:
    """False only when the channel layer can tell that nobody is in `group`."""
    layer = layer or get_channel_layer()
    if layer is None:
        return False
    if isinstance(layer, InMemoryChannelLayer):
        return bool(layer.groups.get(group))
    return True  # Redis: a round trip per group; batches ask at once (`watched_audits`)


def watched_audits(audit_ids: list[str]) -> set[str]:
    """Which of `audit_ids` someone watches now (see `audit_watched`), asked at once: on
    Redis one round trip for them all. Every id when the layer cannot tell or does not
    answer in time (their progress is then sent, as before)."""
    layer = get_channel_layer()
    if _capture is not None or not isinstance(layer, membership.RedisChannelLayer):
        return {i for i in audit_ids if audit_watched(i)}
    if not audit_ids or _in_loop():
        return set(audit_ids)
    groups = {audit_group(i): i for i in audit_ids}
    future = asyncio.run_coroutine_threadsafe(
        membership.live_groups(layer, list(groups)), publisher_loop()
    )
    try:
        return {groups[group] for group in future.result(timeout=PUBLISH_WAIT)}
    except Exception:
        future.cancel()
        logger.warning("could not ask Redis who watches %d audits", len(audit_ids), exc_info=True)
        return set(audit_ids)


def _watched_groups(event: dict[str, Any], layer: Any) -> list[str]:
    return [group for group in _groups(event) if has_watchers(group, layer)]


async def _send(event: dict[str, Any], groups: list[str] | None = None) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": MESSAGE_TYPE, "event": event}
    for group in _groups(event) if groups is None else groups:
        await layer.group_send(group, message)


class _Outbox:
    """Events handed to one loop from other threads, sent in order by one drain task."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # (what, its send): an event, or a batch sent to the groups with a member
        self.pending: collections.deque[tuple[str, Callable[[], Awaitable[None]]]] = (
            collections.deque()
        )
        self.draining = False  # touched on the loop only

    def put(self, event: dict[str, Any], groups: list[str]) -> None:
        """From any thread; returns at once."""
        self._put(f"{event.get('type')} event", lambda: _send(event, groups))

    def put_batch(self, layer: Any, batch: list[dict[str, Any]]) -> None:
        """`batch` to the groups with a live member (`_send_to_members`); returns at once."""
        self._put(f"{len(batch)} events", lambda: _send_to_members(layer, batch))

    def _put(self, what: str, send: Callable[[], Awaitable[None]]) -> None:
        self.pending.append((what, send))  # deque appends are thread-safe
        self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if not self.draining:
            self.draining = True
            self.loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            sent = 0
            while self.pending:
                what, send = self.pending.popleft()
                try:
                    await send()
                except Exception:
                    logger.warning("could not publish %s", what, exc_info=True)
                sent += 1
                if sent % DRAIN_YIELD_EVERY == 0:
                    # Let receivers empty their channels (the in-memory layer's are
                    # bounded and drop what does not fit) before sending more.
                    await asyncio.sleep(0)
        finally:
            self.draining = False


_outboxes: dict[int, _Outbox] = {}
_publisher_loop: asyncio.AbstractEventLoop | None = None
_publisher_lock = threading.Lock()


def _outbox(loop: asyncio.AbstractEventLoop) -> _Outbox:
    box = _outboxes.get(id(loop))
    if box is None or box.loop is not loop:
        with _publisher_lock:
            box = _outboxes.get(id(loop))
            if box is None or box.loop is not loop:
                box = _outboxes[id(loop)] = _Outbox(loop)
    return box


def publisher_loop() -> asyncio.AbstractEventLoop:
    """The process's long-lived loop for events of threads when no server loop runs."""
    global _publisher_loop
    with _publisher_lock:
        if _publisher_loop is None or _publisher_loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="events-publisher", daemon=True).start()
            _publisher_loop = loop
        return _publisher_loop


def remember_server_loop() -> None:
    """Called by the live consumers: events from other loops go through this one."""
    global _server_loop
    _server_loop = asyncio.get_running_loop()


def _other_server_loop() -> asyncio.AbstractEventLoop | None:
    """The server's loop when it runs and is not the caller's."""
    loop = _server_loop
    if loop is None or loop.is_closed() or not loop.is_running():
        return None
    try:
        if asyncio.get_running_loop() is loop:
            return None
    except RuntimeError:
        pass
    return loop


def capture(
    sink: Callable[[dict[str, Any]], None] | None, watched: Callable[[str], bool] | None = None
) -> None:
    """Hand every event of this process to `sink` instead of sending it (None: send);
    `watched(audit_id)`: whether the sink keeps that audit's own progress (`audit_watched`)."""
    global _capture, _captured_watched
    _capture = sink
    _captured_watched = watched


def audit_watched(audit_id: str) -> bool:
    """False only when nobody can see the audit's own progress (its analyzers starting and
    finishing) now: nobody in its group, where the layer can tell, or not kept by the sink
    of an analysis process. Its state changes (`FEED_EVENTS`) are published regardless."""
    if _capture is not None:
        return _captured_watched is None or _captured_watched(audit_id)
    return has_watchers(audit_group(audit_id))


def capturing() -> bool:
    """True in a process whose events its parent publishes (an analysis process)."""
    return _capture is not None


async def apublish(event: dict[str, Any]) -> None:
    """Send `event` to the browsers; never raises."""
    if _capture is not None:
        _capture(event)
        return
    try:
        layer = get_channel_layer()
        groups = _watched_groups(event, layer)
        if not groups:
            return
        loop = _other_server_loop()
        if loop is None:
            await _send(event, groups)
        else:
            # E.g. the engine's progress callback, on the loop of a task thread.
            _outbox(loop).put(event, groups)
    except Exception:
        logger.warning("could not publish %s event", event.get("type"), exc_info=True)


def publish_many(batch: list[dict[str, Any]]) -> None:
    """`publish` for several events (a batch's state changes), in order. On Redis one round
    trip tells which of their groups have a live member and they are sent there only (every
    group when Redis cannot tell): handed to the server's loop without waiting where one
    runs, else sent from the publisher loop and waited for. Elsewhere each is published as
    by `publish`."""
    layer = get_channel_layer()
    if _capture is not None or not isinstance(layer, membership.RedisChannelLayer) or _in_loop():
        for event in batch:
            publish(event)
        return
    if not batch:
        return
    loop = _other_server_loop()
    if loop is not None:
        _outbox(loop).put_batch(layer, batch)
        return
    future = asyncio.run_coroutine_threadsafe(_send_to_members(layer, batch), publisher_loop())
    try:
        future.result(timeout=PUBLISH_WAIT)
    except FutureTimeout:
        logger.warning("the publisher loop is slow: %d events still queued", len(batch))
    except Exception:
        logger.warning("could not publish %d events", len(batch), exc_info=True)


async def _send_to_members(layer: Any, batch: list[dict[str, Any]]) -> None:
    groups = list(dict.fromkeys(group for event in batch for group in _groups(event)))
    try:
        live = await membership.live_groups(layer, groups)
    except Exception:
        logger.warning("could not ask Redis who watches; sending to every group", exc_info=True)
        live = set(groups)
    for event in batch:
        await _send(event, [group for group in _groups(event) if group in live])


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def publish(event: dict[str, Any]) -> None:
    """Synchronous `apublish`; safe to call from any thread, never raises.

    From a thread of a process whose server runs live consumers, the event is handed to
    the server's loop without waiting (its outbox keeps the order); elsewhere (a worker
    process, a test) it is sent from the process's publisher loop and waited for.
    """
    if _capture is not None:
        _capture(event)
        return
    try:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            # Sync code running inside an event loop thread: schedule, don't block.
            running.create_task(apublish(event))
            return
        groups = _watched_groups(event, get_channel_layer())
        if not groups:
            return
        loop = _other_server_loop()
        if loop is not None:
            _outbox(loop).put(event, groups)
            return
        future = asyncio.run_coroutine_threadsafe(_send(event, groups), publisher_loop())
        try:
            future.result(timeout=PUBLISH_WAIT)
        except FutureTimeout:
            logger.warning("the publisher loop is slow: %s event still queued", event.get("type"))
    except Exception:
        logger.warning("could not publish %s event", event.get("type"), exc_info=True)
