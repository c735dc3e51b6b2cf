"""`POST /api/audits/stream`: the same stream as `/ws/ingest/`, as an HTTP body + SSE answer.

A plain ASGI app routed in front of Django (Django's handler reads the whole body before
the view runs). The body is NDJSON: the head object on the first line, then one
`{"text": ...}` or `{"source": {...}}` object per line; the end of the body ends the
response. The answer is `text/event-stream` with events `accepted`, `chunk`,
`audit_trace`, `audit` (and `error`).

The body and the response text are limited to `AUDITOR_MAX_BODY_BYTES`: a Content-Length
over it gets `413` before anything is read or stored; a chunked body that goes over it
mid-stream (the `200` is already sent) gets an `error` event with status 413 and a last
`audit` event of a run stored `failed` ("refused: ..."), never analysed as if the cut
response were whole. The server (uvicorn) hands the body over as it arrives, so the audit
runs live and a client that drops mid-upload is noticed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from django.conf import settings

from audits.api.asgi_body import Disconnected, Receive, Send
from audits.intake.stream import StreamError, StreamSession, authenticate, bearer_token, parse_head

logger = logging.getLogger(__name__)


class LineReader:
    """Lines of the request body as they arrive (bytes, without the newline)."""

    def __init__(self, receive: Receive, limit: int):
        self.receive, self.limit = receive, limit
        self.buffer = b""
        self.start = 0  # where the next line begins in `buffer`
        self.more = True
        self.size = 0

    async def readline(self) -> bytes | None:
        """The next line; None at the end of the body; Disconnected if the client left."""
        while True:
            line = self.buffered()
            if line is not None:
                return line
            if not self.more:
                line, self.buffer, self.start = self.buffer[self.start :], b"", 0
                return line if line.strip() else None
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise Disconnected
            chunk = message.get("body", b"")
            self.size += len(chunk)
            if self.size > self.limit:
                raise StreamError(413, f"request body too large: the limit is {self.limit} bytes")
            self.buffer = self.buffer[self.start :] + chunk
            self.start = 0
            self.more = message.get("more_body", False)

    def buffered(self) -> bytes | None:
        """The next line when it has arrived whole, without waiting; else None."""
        nl = self.buffer.find(b"\n", self.start)
        if nl < 0:
            return None
        line, self.start = self.buffer[self.start : nl], nl + 1
        return line


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def _json_response(send: Send, status: int, detail: Any) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def stream_endpoint(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["method"] != "POST":
        await _json_response(send, 405, "use POST")
        return
    limit = settings.AUDITOR_MAX_BODY_BYTES
    headers = scope.get("headers", [])
    try:
        # The key first: nothing is read or stored for a bad one.
        api_key = await authenticate(bearer_token(headers))
        length = dict(headers).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise StreamError(413, f"request body too large: the limit is {limit} bytes")
        reader = LineReader(receive, limit)
        first = await reader.readline()
        if first is None:
            raise StreamError(400, "the body is empty: send the head object on the first line")
        session = await StreamSession.open(api_key=api_key, head=parse_head(first))
    except StreamError as exc:
        await _json_response(send, exc.status, exc.detail)
        return
    except Disconnected:
        return

    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                (b"x-accel-buffering", b"no"),
            ],
        }
    )

    async def emit(events: list[tuple[str, dict[str, Any]]]) -> None:
        if events:
            body = b"".join(sse(name, data) for name, data in events)
            await send({"type": "http.response.body", "body": body, "more_body": True})

    await emit([("accepted", {"id": session.audit_id, "status": "running"})])
    complete, refused = True, None
    deadline = asyncio.get_running_loop().time() + settings.AUDITOR_STREAM_MAX_S
    try:
        while (line := await _readline(reader, deadline)) is not None:
            # every line that has arrived is fed before the events go out together
            events: list[tuple[str, dict[str, Any]]] = []
            try:
                await _lines(session, line, reader, events)
            finally:  # what was audited goes out, before an error event
                await emit(events)
    except Disconnected:
        complete = False
    except StreamError as exc:
        complete = False
        refused = str(exc.detail) if exc.status == 413 else None
        await emit([("error", {"status": exc.status, "detail": exc.detail})])
    if refused:  # over the limit: stored as failed, never as an audit of a cut response
        final = await session.refuse(refused)
    else:
        final = await session.close(complete=complete)
    try:
        await emit(final)
        await send({"type": "http.response.body", "body": b""})
    except Exception:  # the client is gone; the audit is stored
        logger.debug("client left before the end of stream %s", session.audit_id)


async def _readline(reader: LineReader, deadline: float) -> bytes | None:
    """The next line, or StreamError 408 once the stream has lasted AUDITOR_STREAM_MAX_S."""
    try:
        return await asyncio.wait_for(
            reader.readline(), deadline - asyncio.get_running_loop().time()
        )
    except TimeoutError:
        raise StreamError(
            408,
            "the stream lasted longer than the server allows "
            f"(AUDITOR_STREAM_MAX_S, {settings.AUDITOR_STREAM_MAX_S} s)",
        ) from None


async def _lines(
    session: StreamSession,
    line: bytes | None,
    reader: LineReader,
    events: list[tuple[str, dict[str, Any]]],
) -> None:
    """`line` and every line after it that has arrived whole: their texts fed to the
    session together (one pass, however small the pieces), a source where it stands."""
    texts: list[str] = []
    try:
        while line is not None:
            message = _message(line)
            if isinstance(message.get("source"), dict):
                if texts:
                    events += await session.feed("".join(texts))
                    texts = []
                await session.add_source(message["source"])
            if "text" in message:
                texts.append(message["text"])
            line = reader.buffered()
    finally:
        if texts:
            events += await session.feed("".join(texts))


def _message(line: bytes) -> dict[str, Any]:
    """One NDJSON line after the head (a blank one is an empty object)."""
    if not line.strip():
        return {}
    try:
        message = json.loads(line)
    except ValueError:
        raise StreamError(400, "every line after the head must be a JSON object") from None
    if not isinstance(message, dict):
        raise StreamError(400, "every line after the head must be a JSON object")
    if "text" in message and not isinstance(message["text"], str):
        raise StreamError(422, "text must be a string")
    return message


def buffered_stream(request) -> Any:
    """The stream endpoint for a request Django already read (WSGI: `runserver`, the test
    client): the same `stream_endpoint`, its events gathered into one response. Under the
    ASGI server (`auditor_site.asgi`) the path never reaches Django."""
    from asgiref.sync import async_to_sync
    from django.http import HttpResponse

    scope = {
        "type": "http",
        "method": request.method,
        "path": request.path,
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in request.headers.items()
        ],
    }
    body = request.body
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async_to_sync(stream_endpoint)(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    response = HttpResponse(
        b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"),
        status=start["status"],
    )
    for name, value in start.get("headers", []):
        if name.lower() != b"content-length":
            response[name.decode("latin-1")] = value.decode("latin-1")
    return response
