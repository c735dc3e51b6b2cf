"""A bound on a request's head (request line and headers), before it is buffered.

uvicorn's httptools protocol sets no limit of its own: the parser keeps a header or a URL
until it ends, so one connection sending a header of 200 MB grew the server by ~400 MB (and
the URL, joined piece by piece, costs time quadratic in its length). h11, uvicorn's other
parser, stops at 16 KiB; Node stops at 16 KiB, nginx at 32 KiB.

`HeadLimitedProtocol` counts the bytes a connection sends while a request's head is still
incomplete. Past `AUDITOR_MAX_HEAD_BYTES` (64 KiB by default) it answers
`431 Request Header Fields Too Large` and closes the connection: the memory it held is the
limit plus one read from the socket. A head that completes within one read is never
counted, so the body arriving in the same read does not count against it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_MAX_HEAD_BYTES = 65_536
REFUSAL = b"Request header fields too large."


class HeadLimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a request head over the limit with 431."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_head_bytes = getattr(settings, "AUDITOR_MAX_HEAD_BYTES", DEFAULT_MAX_HEAD_BYTES)
        self.head_bytes = 0  # of the head being read, in reads that did not complete it
        self.reading_head = True
        self.heads_read = 0

    def data_received(self, data: bytes) -> None:
        counting, heads_before = self.reading_head, self.heads_read
        super().data_received(data)
        if not counting or self.heads_read != heads_before or self.transport.is_closing():
            return
        self.head_bytes += len(data)
        if self.head_bytes > self.max_head_bytes:
            self.logger.warning("Request head over %d bytes refused.", self.max_head_bytes)
            self._refuse_head()

    def on_headers_complete(self) -> None:
        self.reading_head, self.head_bytes = False, 0
        self.heads_read += 1
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.reading_head = True

    def _refuse_head(self) -> None:
        """431 with the server's default headers, then close (as uvicorn's own 400)."""
        content = [b"HTTP/1.1 431 Request Header Fields Too Large\r\n"]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend([
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: %d\r\n" % len(REFUSAL),
            b"connection: close\r\n",
            b"\r\n",
            REFUSAL,
        ])
        self.transport.write(b"".join(content))
        self.transport.close()
