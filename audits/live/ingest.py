"""`/ws/ingest/`: stream a model's response in, get audited paragraphs back, live.

Wire format (docs/guides/streaming.md): the handshake carries
`Authorization: Bearer <ingest key>`; every frame is a JSON object. The client sends the
head `{user_input, sources?, metadata?, external_id?, collision_key?, options?}`, then
`{"text": "..."}` chunks and `{"source": {...}}` tool results, then `{"done": true}`. The
server answers `{"event": "accepted" | "chunk" | "audit_trace" | "audit" | "error",
"data": {...}}` and closes after `audit`. A client that goes away before `done` leaves
an audit marked `incomplete` with what had arrived.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from audits.intake.stream import StreamError, StreamSession, authenticate, bearer_token, parse_head

logger = logging.getLogger(__name__)

# Close codes: 4000 + the HTTP status the POST form would answer.
CLOSE_BASE = 4000


class IngestConsumer(AsyncWebsocketConsumer):
    session: StreamSession | None = None
    api_key: Any = None
    finished: bool = False
    watchdog: asyncio.Task | None = None
    last_frame: float = 0.0

    async def connect(self) -> None:
        await self.accept()
        try:
            self.api_key = await authenticate(bearer_token(self.scope.get("headers", [])))
        except StreamError as exc:
            await self._refuse(exc)
            return
        self.last_frame = asyncio.get_running_loop().time()
        self.watchdog = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        """End a stream idle for AUDITOR_STREAM_IDLE_TIMEOUT_S or open for AUDITOR_STREAM_MAX_S
        (what arrived is stored, marked incomplete)."""
        loop = asyncio.get_running_loop()
        ends = loop.time() + settings.AUDITOR_STREAM_MAX_S
        while not self.finished:
            idle_ends = self.last_frame + settings.AUDITOR_STREAM_IDLE_TIMEOUT_S
            now = loop.time()
            if now >= min(ends, idle_ends):
                which = "lasted longer than" if now >= ends else "was idle for longer than"
                setting = "AUDITOR_STREAM_MAX_S" if now >= ends else "AUDITOR_STREAM_IDLE_TIMEOUT_S"
                error = StreamError(408, f"the stream {which} the server allows ({setting})")
                self.watchdog = None  # a disconnect from here on must not cancel the storing
                if self.session is not None:
                    await self._finish(complete=False, error=error)
                else:
                    await self._refuse(error)
                return
            await asyncio.sleep(min(ends, idle_ends) - now)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.finished or self.api_key is None:
            return
        self.last_frame = asyncio.get_running_loop().time()
        try:
            await self._handle(text_data if text_data is not None else (bytes_data or b""))
        except StreamError as exc:
            if self.session is not None:
                # What arrived is kept: the audit is stored, marked incomplete.
                await self._finish(complete=False, error=exc)
            else:
                await self._refuse(exc)

    async def _handle(self, raw: str | bytes) -> None:
        if self.session is None:
            head = parse_head(raw)
            self.session = await StreamSession.open(api_key=self.api_key, head=head)
            await self._send("accepted", {"id": self.session.audit_id, "status": "running"})
            return
        try:
            message = json.loads(raw)
        except ValueError:
            raise StreamError(400, "every frame must be a JSON object") from None
        if not isinstance(message, dict):
            raise StreamError(400, "every frame must be a JSON object")
        if isinstance(message.get("source"), dict):
            await self.session.add_source(message["source"])
        if "text" in message:
            if not isinstance(message["text"], str):
                raise StreamError(422, "text must be a string")
            for name, data in await self.session.feed(message["text"]):
                await self._send(name, data)
        if message.get("done") is True:
            await self._finish(complete=True)

    async def _finish(self, *, complete: bool, error: StreamError | None = None) -> None:
        self.finished = True
        assert self.session is not None
        if error is not None:
            await self._send("error", {"status": error.status, "detail": error.detail})
        for name, data in await self.session.close(complete=complete):
            await self._send(name, data)
        await self.close(code=1000)

    async def _refuse(self, exc: StreamError) -> None:
        self.finished = True
        await self._send("error", {"status": exc.status, "detail": exc.detail})
        await self.close(code=CLOSE_BASE + exc.status, reason=str(exc.detail)[:120])

    async def _send(self, event: str, data: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps({"event": event, "data": data}, ensure_ascii=False))

    async def disconnect(self, code: int) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
        if self.session is not None and not self.session.closed:
            # The client went away midway: store what arrived, marked incomplete.
            try:
                await self.session.close(complete=False)
            except Exception:
                logger.exception("could not store the incomplete stream %s", self.session.audit_id)
