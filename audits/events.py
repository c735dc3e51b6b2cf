"""The one place progress events leave the audit pipeline (to the channel layer).

Every event is a small dict with a `type` and, when it concerns one audit, an `audit_id`.
It goes to "audit-<id>" (that audit's page) and, when it changes the audit's card
(`FEED_EVENTS`), to the group "audits" (every Live page), as the channel-layer message
`{"type": "audit.event", "event": event}`. Per-audit progress (trace lines, analyzers,
stream progress) stays off the feed group: with hundreds of watchers every message there
costs hundreds of deliveries.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

# The event loop of this process's server (daphne), once a live consumer ran on it. The
# in-memory channel layer's queues belong to that loop: sending from another loop (a task
# thread's `async_to_sync`) puts messages in them without waking it, and they would sit
# there until something else woke the server. Seen as card latencies of up to a second.
_server_loop: asyncio.AbstractEventLoop | None = None
PUBLISH_WAIT = 5.0  # seconds a worker thread waits for its event to be handed over

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


async def _send(event: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": MESSAGE_TYPE, "event": event}
    for group in _groups(event):
        await layer.group_send(group, message)


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


async def apublish(event: dict[str, Any]) -> None:
    """Send `event` to the browsers; never raises."""
    try:
        loop = _other_server_loop()
        if loop is None:
            await _send(event)
        else:
            # E.g. the engine's progress callback, on the loop of a task thread.
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_send(event), loop))
    except Exception:
        logger.warning("could not publish %s event", event.get("type"), exc_info=True)


def publish(event: dict[str, Any]) -> None:
    """Synchronous `apublish`; safe to call from any thread, never raises.

    From a thread of a process whose server runs live consumers, the event is handed to
    the server's loop and waited for (so events keep their order); elsewhere (a worker
    process, a test) it is sent from a loop of its own.
    """
    try:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            # Sync code running inside an event loop thread: schedule, don't block.
            running.create_task(apublish(event))
            return
        loop = _other_server_loop()
        if loop is None:
            async_to_sync(_send)(event)
            return
        future = asyncio.run_coroutine_threadsafe(_send(event), loop)
        try:
            future.result(timeout=PUBLISH_WAIT)
        except FutureTimeout:
            logger.warning("the server loop is slow: %s event still queued", event.get("type"))
    except Exception:
        logger.warning("could not publish %s event", event.get("type"), exc_info=True)
