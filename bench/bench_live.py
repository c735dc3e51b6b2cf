"""Live benchmark: card latency to WebSocket watchers, and stream overhead per paragraph.

    .venv/bin/python bench/bench_live.py

1. One daphne process (in-memory channel layer, a throwaway SQLite file); N staff
   WebSocket watchers on /ws/audits/; audits submitted through POST /api/audits. Latency =
   from the submission to the audit's card fragment arriving at each watcher; p50/p95 with
   1 and with 200 watchers (target: p95 < 150 ms at 200).
2. Stream overhead: the same response through /ws/ingest/ vs the engine alone
   (InlineStreamAuditor fed the same chunks), per paragraph, in the same run.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
TMP = Path(tempfile.mkdtemp(prefix="bench-live-"))
os.environ["DATABASE_URL"] = f"sqlite:///{TMP / 'bench.sqlite3'}"
os.environ["AUDITOR_RATE_LIMIT_PER_MINUTE"] = "0"

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
import websockets  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from tests.live_support import free_port, start_daphne, stop  # noqa: E402

PARAGRAPH = "Acme is easy to set up and most teams go live within a week of starting.\n\n"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


async def card_latency(host: str, cookie: str, key: str, watchers: int, audits: int) -> list[float]:
    sockets = [
        await websockets.connect(f"ws://{host}/ws/audits/", additional_headers={"Cookie": cookie},
                                 origin=f"http://{host}", max_queue=None)
        for _ in range(watchers)
    ]
    latencies: list[float] = []
    try:
        async with httpx.AsyncClient() as http:
            for n in range(audits):
                started = time.perf_counter()
                r = await http.post(f"http://{host}/api/audits",
                                    json={"user_input": f"bench {n}", "response": "Acme is easy."},
                                    headers={"Authorization": f"Bearer {key}"})
                audit_id = r.json()["id"]

                async def first_card(ws) -> float:
                    while True:
                        message = await ws.recv()
                        if f"audit-card-{audit_id}" in message:
                            return (time.perf_counter() - started) * 1000

                latencies += await asyncio.gather(*(first_card(ws) for ws in sockets))
                await asyncio.sleep(0.3)  # let the audit finish; drain its later updates
                for ws in sockets:
                    while True:
                        try:
                            await asyncio.wait_for(ws.recv(), timeout=0.01)
                        except TimeoutError:
                            break
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets))
    return latencies


async def stream_once(host: str, key: str, paragraphs: int) -> float:
    text = PARAGRAPH * paragraphs
    started = time.perf_counter()
    async with websockets.connect(f"ws://{host}/ws/ingest/",
                                  additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        await ws.send(json.dumps({"user_input": "bench", "collision_key": str(time.time())}))
        for i in range(0, len(text), 40):
            await ws.send(json.dumps({"text": text[i:i + 40]}))
        await ws.send(json.dumps({"done": True}))
        async for raw in ws:
            if json.loads(raw)["event"] == "audit":
                break
    return (time.perf_counter() - started) * 1000


def engine_once(paragraphs: int) -> float:
    from analyzers.config_store import load_config
    from analyzers.engine.guardrails.stream import InlineStreamAuditor

    text = PARAGRAPH * paragraphs
    started = time.perf_counter()
    auditor = InlineStreamAuditor.from_config(load_config())
    for i in range(0, len(text), 40):
        auditor.feed(text[i:i + 40])
    auditor.finish()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    from analyzers.models import ApiKey

    _, key = ApiKey.create_key("bench", scope="ingest")
    port = free_port()
    os.environ["AUDITOR_TEST_DB"] = str(TMP / "unused.sqlite3")
    proc = start_daphne(port, TMP / "daphne.log", DATABASE_URL=os.environ["DATABASE_URL"])
    host = f"127.0.0.1:{port}"
    try:
        for watchers, audits in ((1, 30), (200, 15)):
            lat = asyncio.run(card_latency(host, cookie, key, watchers, audits))
            print(f"card latency, {watchers:>3} watcher(s): p50 {pct(lat, 50):6.1f} ms  "
                  f"p95 {pct(lat, 95):6.1f} ms  ({len(lat)} deliveries)")
        paragraphs = 20
        stream = [asyncio.run(stream_once(host, key, paragraphs)) for _ in range(5)]
        engine = [engine_once(paragraphs) for _ in range(5)]
        s, e = statistics.median(stream) / paragraphs, statistics.median(engine) / paragraphs
        print(f"stream endpoint: {s:.2f} ms/paragraph (median, incl. final audit and storage); "
              f"engine alone: {e:.3f} ms/paragraph; overhead {s - e:.2f} ms/paragraph "
              f"(x{s / e:.0f})")
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
