"""ASGI middleware: refuse request bodies over `AUDITOR_MAX_BODY_BYTES` before they are read.

The server (uvicorn) hands the body to the application as it arrives and stops reading the
socket while the application does not ask for more, so refusing here bounds the memory a
request can take whoever sends it, before any authentication:

- a `Content-Length` over the limit gets `413` at once; the body is never read;
- a body without one (chunked) is counted as it is received; past the limit the request
  gets `413` if the application has not answered yet (Django reads the whole body before
  its views run, so for Django it has not).

Both answers carry `Connection: close`, so the server drops the rest of the upload instead
of reading it. Paths in `counted_by_app` do their own counting (the NDJSON stream endpoint
answers as it reads, so its 413 arrives as an SSE `error` event); the `Content-Length`
check still applies to them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyTooLarge(Exception):
    """Raised from `receive` once the counted body passes the limit."""


def declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, or None when absent or not a plain number."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            return int(value) if value.strip().isdigit() else None
    return None


async def send_413(send: Send, limit: int) -> None:
    body = json.dumps({"detail": f"request body too large: the limit is {limit} bytes"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, limit: int | Callable[[str], int], counted_by_app: Iterable[str] = ()
    ) -> None:
        self.app = app
        self._limit = limit
        self.counted_by_app = frozenset(counted_by_app)

    def limit_for(self, path: str) -> int:
        """The limit for one path (a callable limit is given the path)."""
        return self._limit(path) if callable(self._limit) else self._limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        length = declared_length(scope)
        if length is not None and length > limit:
            await send_413(send, limit)
            return
        if length is not None or scope["path"] in self.counted_by_app:
            # A declared length is enforced by the server (it never passes more on).
            await self.app(scope, receive, send)
            return

        received = 0
        started = False

        async def counting_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge
            return message

        async def watching_send(message: dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except BodyTooLarge:
            if started:
                raise
            await send_413(send, limit)
