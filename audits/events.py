"""The one place progress events leave the audit pipeline (to the channel layer).

Every event is a small dict with a `type` and, when it concerns one audit, an `audit_id`.
It goes to the group "audits" (every dashboard) and "audit-<id>" (that audit's page) as
the channel-layer message `{"type": "audit.event", "event": event}`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

ALL_AUDITS_GROUP = "audits"
MESSAGE_TYPE = "audit.event"


def audit_group(audit_id: Any) -> str:
    return f"audit-{audit_id}"


def _groups(event: dict[str, Any]) -> list[str]:
    groups = [ALL_AUDITS_GROUP]
    if event.get("audit_id"):
        groups.append(audit_group(event["audit_id"]))
    return groups


async def apublish(event: dict[str, Any]) -> None:
    """Send `event` to the browsers; never raises."""
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        message = {"type": MESSAGE_TYPE, "event": event}
        for group in _groups(event):
            await layer.group_send(group, message)
    except Exception:
        logger.warning("could not publish %s event", event.get("type"), exc_info=True)


def publish(event: dict[str, Any]) -> None:
    """Synchronous `apublish`; safe to call from any thread, never raises."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        in_loop = False
    else:
        in_loop = True
    try:
        if in_loop:
            # Called from sync code running inside an event loop thread: schedule, don't block.
            asyncio.get_running_loop().create_task(apublish(event))
        else:
            async_to_sync(apublish)(event)
    except Exception:
        logger.warning("could not publish %s event", event.get("type"), exc_info=True)
