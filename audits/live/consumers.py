"""WebSocket consumers of the live pages: `/ws/audits/` (the feed) and `/ws/audits/<id>/`.

Staff only (others are closed at connect); the origin is checked by
`AllowedHostsOriginValidator` in auditor_site.asgi. Events on the channel layer are small
(`audits.events`); the consumers read the database and send `hx-swap-oob` fragments
rendered from the pages' partials (`audits.live.fragments`).

No gaps: the client sends what it last saw (the feed's cursor, or the last trace position
of an audit) as `{"after": ...}` / `{"after_trace": n}` when the socket opens (or in the
connect URL's query string); the consumer has joined its group (for the feed: the
process's feed hub, `audits.live.hub`) before it reads the database, and answers with
everything since. Rows are swapped by id, so an overlap is
harmless.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.utils import timezone

from audits.events import MESSAGE_TYPE, audit_group, remember_server_loop
from audits.execution import people_first
from audits.live import fragments
from audits.live.hub import feed_hub
from audits.models import AuditRun
from audits.store.db_threads import run_in_feed_thread

logger = logging.getLogger(__name__)


def _socket_gone(exc: BaseException) -> bool:
    """The server's answer to a send on a socket the page already closed: daphne
    (autobahn's `Disconnected`, "Attempt to send on a closed protocol"), uvicorn
    (`ClientDisconnected`, an OSError), the websockets library (`ConnectionClosed`)."""
    if isinstance(exc, OSError):
        return True
    return any(k.__name__ in ("Disconnected", "ConnectionClosed") for k in type(exc).__mro__)


class QuietWhenClosed(AsyncWebsocketConsumer):
    """A page may close its socket (navigation, a finished audit) while an update for it
    is on its way: the server then refuses the send before the consumer has seen the
    disconnect. That is the page's choice, not an error: stop sending, no traceback."""

    closed = False

    async def send(self, text_data=None, bytes_data=None, close=False) -> None:
        if self.closed:
            return
        try:
            await super().send(text_data=text_data, bytes_data=bytes_data, close=close)
        except Exception as exc:
            if not _socket_gone(exc):
                raise
            self.closed = True
            logger.debug("live: the page closed its socket before an update", exc_info=True)

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        self.closed = True
        await super().websocket_disconnect(message)


class LiveConsumer(QuietWhenClosed):
    """Channels closes old DB connections before every message, through the one thread
    sync code shares (`aclose_old_connections`): with many pages that is a thread hop per
    page, one after the other, per event. Channel-layer events skip it here; the handlers
    read the database only through `database_sync_to_async`, which closes them itself."""

    async def dispatch(self, message: dict[str, Any]) -> None:
        if message.get("type") == MESSAGE_TYPE:
            await self.audit_event(message)
        else:
            await super().dispatch(message)

    async def audit_event(self, message: dict[str, Any]) -> None:
        raise NotImplementedError


def _is_staff(scope: dict[str, Any]) -> bool:
    user = scope.get("user")
    return bool(user is not None and user.is_authenticated and user.is_staff)


def _query(scope: dict[str, Any]) -> dict[str, str]:
    raw = scope.get("query_string", b"").decode("latin-1")
    return {k: v[-1] for k, v in parse_qs(raw).items()}


class LiveFeedConsumer(QuietWhenClosed):
    """The Live page: new and changed audit cards, counters, the cursor.

    Events come through the process's feed hub (`audits.live.hub`): rendered once per
    event and set of filters, whatever the number of pages.
    """

    async def connect(self) -> None:
        if not _is_staff(self.scope):
            await self.close()
            return
        remember_server_loop()
        raw = self.scope.get("query_string", b"")
        self.filters = fragments.parse_filters(raw)
        self.news_query = fragments.NewsQuery(self.filters)
        self.filter_key = json.dumps(self.filters.as_params(), sort_keys=True)
        await self.accept()
        self.hub = feed_hub()
        await self.hub.join(self)  # before any read of the database: no gaps
        after = fragments.parse_cursor(_query(self.scope).get("after"))
        if after is not None:
            await self.catch_up(after)

    async def disconnect(self, code: int) -> None:
        hub = getattr(self, "hub", None)
        if hub is not None:
            await hub.leave(self)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            message = json.loads(text_data or "{}")
        except ValueError:
            return
        if isinstance(message, dict):
            after = fragments.parse_cursor(message.get("after"))
            if after is not None:
                await self.catch_up(after)

    async def catch_up(self, after) -> None:
        await self.send(text_data=await self._catch_up(after))

    @database_sync_to_async
    def _catch_up(self, after) -> str:
        now = timezone.now()
        cards = fragments.changed_since(self.filters, after)
        return fragments.feed_rows(cards) + fragments.feed_status(now)

    async def render_events(self, audit_ids: list[str]) -> str:
        """The cards of news about `audit_ids` for pages with these filters (the hub
        adds the counters and the cursor)."""
        return await self._render(self.news_query, audit_ids)

    @staticmethod
    async def _render(query: fragments.NewsQuery, audit_ids: list[str]) -> str:
        return await run_in_feed_thread(_news_rows, query, audit_ids)


def _news_rows(query: fragments.NewsQuery, audit_ids: list[str]) -> str:
    with people_first.waiting():  # someone watches: the analysis makes way
        return fragments.news_rows(query, audit_ids)


class AuditConsumer(LiveConsumer):
    """One audit's page while it runs: streamed text, trace lines, analyzer progress."""

    async def connect(self) -> None:
        if not _is_staff(self.scope):
            await self.close()
            return
        try:
            self.audit_id = str(uuid.UUID(str(self.scope["url_route"]["kwargs"]["audit_id"])))
        except (KeyError, ValueError):
            await self.close()
            return
        remember_server_loop()
        self.group = audit_group(self.audit_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        self.joined = True
        self.trace_sent = -1
        self.lock = asyncio.Lock()
        await self.accept()
        after = _query(self.scope).get("after_trace")
        if after is not None and after.lstrip("-").isdigit():
            await self.catch_up(int(after))

    async def disconnect(self, code: int) -> None:
        if getattr(self, "joined", False):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            message = json.loads(text_data or "{}")
        except ValueError:
            return
        after = message.get("after_trace") if isinstance(message, dict) else None
        if isinstance(after, int) and not isinstance(after, bool):
            await self.catch_up(after)

    async def catch_up(self, after: int) -> None:
        """Everything since trace position `after`: the sections as they are now."""
        async with self.lock:
            self.trace_sent = after
            html = await self._state()
            if html:
                await self.send(text_data=html)

    @database_sync_to_async
    def _state(self) -> str:
        run = AuditRun.objects.filter(pk=self.audit_id).only("status").first()
        if run is None:
            return ""
        finished = run.is_finished
        html = fragments.detail_sections(
            self.audit_id, finished=finished, user=self.scope.get("user")
        )
        if not finished:
            lines, self.trace_sent = fragments.trace_lines_after(self.audit_id, self.trace_sent)
            html += lines
        return html

    async def audit_event(self, message: dict[str, Any]) -> None:
        event = message.get("event") or {}
        kind = event.get("type")
        if kind in ("analyzer_started", "analyzer_finished"):
            await self.send(text_data=fragments.analyzer_progress(self.audit_id, event))
        elif kind in ("stream_progress", "audit_started", "audit_finished"):
            async with self.lock:
                html = await self._state()
                if html:
                    await self.send(text_data=html)
