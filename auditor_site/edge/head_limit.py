"""Bounds on a request's head (request line and headers): its size and its time.

uvicorn's httptools protocol sets no limit of its own: the parser keeps a header or a URL
until it ends, so one connection sending a huge header grew the server without bound
(docs/contributing/performance.md; and the URL, joined piece by piece, costs time quadratic
in its length). h11, uvicorn's other parser, stops at 16 KiB; Node stops at 16 KiB, nginx at
32 KiB.

`HeadLimitedProtocol` counts the bytes a connection sends while a request's head is still
incomplete. Past `AUDITOR_MAX_HEAD_BYTES` (64 KiB by default) it answers
`431 Request Header Fields Too Large` and closes the connection: the memory it held is the
limit plus one read from the socket. A head that completes within one read is never
counted, so the body arriving in the same read does not count against it.

Nor does uvicorn bound the time a head may take: its keep-alive timeout stops as soon as a
byte arrives, so a client sending a byte now and then ("slowloris") held a connection for
as long as it liked, and enough of them every file descriptor. A connection's first head
must now be complete `AUDITOR_HEAD_TIMEOUT_S` (30 s) after it opened, and any later head
that long after its first byte: then the answer is `408 Request Timeout` (nothing at all
when the connection never sent a byte) and the connection closes. A head the server itself
stopped reading (a pipelined request waiting for the one before) is given more time.

A body too: one that makes no progress for `AUDITOR_BODY_IDLE_TIMEOUT_S` (30 s) gets 408
and the connection closes (a body whose answer has begun is just cut off). The streaming
endpoints' bodies (`stream_paths`: NDJSON lines or a proxied call, sent as they come) get
`AUDITOR_STREAM_IDLE_TIMEOUT_S` (120 s) instead. Time the server is not reading (the
application not asking for more, a `100-continue` not yet sent) does not count.

And the connections: past `AUDITOR_MAX_CONNECTIONS` open at once (HTTP and WebSocket), a
new one is answered `503` at once and closed, before anything is read from it, so the
file descriptors left stay for the others and the database. uvicorn's `limit_concurrency`
answers its 503 only to a request whose head has arrived: a connection that never sends
one held its descriptor until a timeout.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.conf import settings
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

TOO_LARGE = (431, b"Request header fields too large.")
TOO_SLOW = (408, b"Request head not received in time.")
BODY_TOO_SLOW = (408, b"Request body not received in time.")
TOO_MANY = (503, b"Too many connections; try again later.")
CAP_LOG_EVERY_S = 10.0  # one warning per this while connections are refused, not one each


def cancelled(timer: asyncio.TimerHandle | None) -> None:
    """`timer` cancelled, if any: None, for the attribute that held it."""
    if timer is not None:
        timer.cancel()


class HeadLimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a request head over the limit (431), a head
    or body slower than its timeout (408), a connection over the cap (503)."""

    refusing_since = 0.0  # time.monotonic() of the last warning about the cap, per process

    def __init__(
        self, *args: Any, stream_paths: frozenset[str] = frozenset(), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.max_head_bytes = settings.AUDITOR_MAX_HEAD_BYTES
        self.head_timeout_s = settings.AUDITOR_HEAD_TIMEOUT_S
        self.max_connections = settings.AUDITOR_MAX_CONNECTIONS
        self.stream_paths = stream_paths
        self.head_bytes = 0  # of the head being read, in reads that did not complete it
        self.reading_head = True
        self.heads_read = 0
        self.head_begun = False  # a byte of the head being read has arrived
        self.head_timer: asyncio.TimerHandle | None = None
        self.reading_body = False
        self.body_timeout_s = 0.0
        self.body_read_at = 0.0  # loop time of the body's last progress
        self.body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.server_state.connections) >= self.max_connections:
            self.transport = transport  # for connection_lost; never counted
            self._warn_cap()
            self._refuse(*TOO_MANY, extra=b"retry-after: 1\r\n")
            return
        super().connection_made(transport)
        self._time_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self.head_timer = cancelled(self.head_timer)
        self.body_timer = cancelled(self.body_timer)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        counting, heads_before = self.reading_head, self.heads_read
        super().data_received(data)
        if self.reading_body and self.body_timer is None and not self.transport.is_closing():
            self.body_timer = self.loop.call_later(self.body_timeout_s, self._body_timed_out)
        if not counting or self.heads_read != heads_before or self.transport.is_closing():
            return
        self.head_bytes += len(data)
        if self.head_bytes > self.max_head_bytes:
            self.logger.warning("Request head over %d bytes refused.", self.max_head_bytes)
            self._refuse(*TOO_LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_begun = True
        if self.head_timer is None:  # a later head: timed from its first byte
            self._time_head()

    def on_headers_complete(self) -> None:
        self.reading_head, self.head_bytes, self.head_begun = False, 0, False
        self.heads_read += 1
        self.head_timer = cancelled(self.head_timer)
        super().on_headers_complete()
        if self.parser.should_upgrade() and self._should_upgrade():
            return  # a WebSocket: no body
        # Until the message completes (at once without a body): timed from data_received.
        self.reading_body, self.body_read_at = True, self.loop.time()
        streaming = self.scope["path"] in self.stream_paths
        self.body_timeout_s = (
            settings.AUDITOR_STREAM_IDLE_TIMEOUT_S
            if streaming
            else settings.AUDITOR_BODY_IDLE_TIMEOUT_S
        )

    def on_body(self, body: bytes) -> None:
        self.body_read_at = self.loop.time()
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.reading_head, self.reading_body = True, False
        self.body_timer = cancelled(self.body_timer)

    def _time_head(self) -> None:
        self.head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self.head_timer = None
        if not self.reading_head or self.transport.is_closing():
            return
        if self.flow.read_paused:  # the server is not reading: not the client's delay
            self._time_head()
            return
        if not self.head_begun:  # opened and never used
            self.transport.close()
            return
        self.logger.warning("Request head not complete in %g s refused.", self.head_timeout_s)
        self._refuse(*TOO_SLOW)

    def _body_timed_out(self) -> None:
        self.body_timer = None
        if not self.reading_body or self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow.read_paused or self.cycle.waiting_for_100_continue:
            self.body_read_at = now  # the server is not reading: not the client's delay
        idle = now - self.body_read_at
        if idle < self.body_timeout_s:
            self.body_timer = self.loop.call_later(self.body_timeout_s - idle, self._body_timed_out)
            return
        self.logger.warning("Request body idle for %g s: connection closed.", self.body_timeout_s)
        cycle = self.cycle
        answered = cycle.response_started
        cycle.disconnected = True  # the application's receive says the client left
        cycle.message_event.set()
        if answered:
            self.transport.close()
        else:
            self._refuse(*BODY_TOO_SLOW)

    def _warn_cap(self) -> None:
        now = time.monotonic()
        if now - HeadLimitedProtocol.refusing_since >= CAP_LOG_EVERY_S:
            HeadLimitedProtocol.refusing_since = now
            self.logger.warning(
                "%d connections open (AUDITOR_MAX_CONNECTIONS): new ones answered 503.",
                self.max_connections,
            )

    def _refuse(self, status: int, text: bytes, extra: bytes = b"") -> None:
        """An answer with the server's default headers, then close (as uvicorn's own 400)."""
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                extra,
                b"content-type: text/plain; charset=utf-8\r\n",
                b"content-length: %d\r\n" % len(text),
                b"connection: close\r\n",
                b"\r\n",
                text,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()
