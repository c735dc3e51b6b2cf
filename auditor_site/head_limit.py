"""Bounds on a request's head (request line and headers): its size and its time.

uvicorn's httptools protocol sets no limit of its own: the parser keeps a header or a URL
until it ends, so one connection sending a header of 200 MB grew the server by ~400 MB (and
the URL, joined piece by piece, costs time quadratic in its length). h11, uvicorn's other
parser, stops at 16 KiB; Node stops at 16 KiB, nginx at 32 KiB.

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
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.conf import settings
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

TOO_LARGE = (431, b"Request header fields too large.")
TOO_SLOW = (408, b"Request head not received in time.")


class HeadLimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a request head over the limit (431) or
    slower than the timeout (408)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_head_bytes = settings.AUDITOR_MAX_HEAD_BYTES
        self.head_timeout_s = settings.AUDITOR_HEAD_TIMEOUT_S
        self.head_bytes = 0  # of the head being read, in reads that did not complete it
        self.reading_head = True
        self.heads_read = 0
        self.head_begun = False  # a byte of the head being read has arrived
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._time_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        counting, heads_before = self.reading_head, self.heads_read
        super().data_received(data)
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
        self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.reading_head = True

    def _time_head(self) -> None:
        self.head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

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

    def _refuse(self, status: int, text: bytes) -> None:
        """An answer with the server's default headers, then close (as uvicorn's own 400)."""
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend([
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: %d\r\n" % len(text),
            b"connection: close\r\n",
            b"\r\n",
            text,
        ])
        self.transport.write(b"".join(content))
        self.transport.close()
