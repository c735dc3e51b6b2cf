"""Stream a model's response through the auditor and print what comes back.

    python examples/stream_client.py --url http://127.0.0.1:8000 --key ra_... [--http]

By default it uses the WebSocket `/ws/ingest/` (live on any ASGI server, daphne included);
`--http` uses `POST /api/audits/stream` (an NDJSON request body streamed with httpx, a
`text/event-stream` answer). Either way it prints one line per event: `chunk` (audited
text, safe to show), `audit_trace`, and finally `audit` (the stored Audit).
Needs `httpx` and, for the WebSocket, `websockets`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator

HEAD = {
    "user_input": "Which retailers use Acme, and where can I read more?",
    "metadata": {"model": "example-model", "client": "examples/stream_client.py"},
}
RESPONSE = (
    "Decathlon grew conversion by 50% with Acme "
    "([case study](https://www.acme.example/customers/decathlon)).\n\n"
    "Al-Futtaim achieved +206% revenue after adopting Acme. Acme is easy to set up.\n\n"
    "For tips see [this guide](https://random-blog.example.org/acme-tips).\n"
)


def model_chunks(text: str, size: int = 7, delay: float = 0.01) -> Iterator[str]:
    """Pretend to be a model: a few characters at a time."""
    for i in range(0, len(text), size):
        time.sleep(delay)
        yield text[i : i + size]


def show(event: str, data: dict) -> None:
    if event == "audit":
        surfaced = [r["analyzer_id"] for r in data["surfaced_results"]]
        print(
            f"audit  {data['id']} {data['status']} score={data['overall_score']:.2f} "
            f"incomplete={data['incomplete']} surfaced={surfaced}"
        )
    elif event == "chunk":
        print(f"chunk  {data['text']!r}")
    elif event == "audit_trace":
        print(f"trace  {data['text']}")
    else:
        print(f"{event:6} {json.dumps(data)}")
    sys.stdout.flush()


def stream_http(url: str, key: str, text: str, delay: float) -> dict:
    import httpx

    def body() -> Iterator[bytes]:
        yield (json.dumps(HEAD) + "\n").encode()
        for chunk in model_chunks(text, delay=delay):
            yield (json.dumps({"text": chunk}) + "\n").encode()

    audit = {}
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/x-ndjson"}
    with httpx.stream(
        "POST", f"{url}/api/audits/stream", content=body(), headers=headers, timeout=60
    ) as response:
        if response.status_code != 200:
            response.read()
            raise SystemExit(f"{response.status_code}: {response.text}")
        event = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event:
                data = json.loads(line[6:])
                show(event, data)
                if event == "audit":
                    audit = data
    return audit


async def stream_ws(url: str, key: str, text: str, delay: float) -> dict:
    import websockets

    ws_url = url.replace("http://", "ws://").replace("https://", "wss://") + "/ws/ingest/"
    audit = {}
    async with websockets.connect(
        ws_url, additional_headers={"Authorization": f"Bearer {key}"}
    ) as ws:
        await ws.send(json.dumps(HEAD))

        async def produce() -> None:
            for chunk in model_chunks(text, delay=0):
                await asyncio.sleep(delay)
                await ws.send(json.dumps({"text": chunk}))
            await ws.send(json.dumps({"done": True}))

        producer = asyncio.create_task(produce())
        async for raw in ws:
            message = json.loads(raw)
            show(message["event"], message["data"])
            if message["event"] == "error" and message["data"].get("status") in (401, 403):
                raise SystemExit(f"refused: {message['data']['detail']}")
            if message["event"] == "audit":
                audit = message["data"]
        await producer
    return audit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", default=os.environ.get("AUDITOR_API_KEY", ""))
    parser.add_argument("--http", action="store_true", help="POST + SSE instead of WebSocket")
    parser.add_argument("--delay", type=float, default=0.01, help="seconds between chunks")
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("pass --key or set AUDITOR_API_KEY (manage.py create_api_key NAME)")
    if args.http:
        audit = stream_http(args.url, args.key, RESPONSE, args.delay)
    else:
        audit = asyncio.run(stream_ws(args.url, args.key, RESPONSE, args.delay))
    return 0 if audit.get("status") == "complete" else 1


if __name__ == "__main__":
    sys.exit(main())
