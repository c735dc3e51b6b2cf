"""Reading a request body in the plain ASGI apps in front of Django (the proxy, the stream
endpoint, `POST /api/audits`), and their ASGI callables' types."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from audits.intake.stream import StreamError

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class Disconnected(Exception):
    """The client left before its body was read."""


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole body; Disconnected if the client left, StreamError 413 past `limit`."""
    parts, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise StreamError(413, f"request body too large: the limit is {limit} bytes")
        parts.append(chunk)
        more = message.get("more_body", False)
    return b"".join(parts)
