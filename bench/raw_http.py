"""One HTTP/1.1 answer read off a raw keep-alive connection (the ingest benches' clients)."""

from __future__ import annotations

import asyncio


async def read_answer(reader: asyncio.StreamReader, expect: bytes = b"202") -> bytes:
    """Read one answer (head and Content-Length body); its body. Stops the bench unless its
    status is `expect`."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    body = await reader.readexactly(length)
    if head[9:12] != expect:
        raise SystemExit(f"unexpected answer: {head!r} {body[:300]!r}")
    return body
