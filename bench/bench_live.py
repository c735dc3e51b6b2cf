"""Live benchmark: card latency to WebSocket watchers, and stream overhead per paragraph.

    .venv/bin/python bench/bench_live.py

1. One server process (in-memory channel layer, a throwaway SQLite file); N staff
   WebSocket watchers on /ws/audits/; audits submitted through POST /api/audits. Latency =
   from the submission to the audit's card fragment arriving at each watcher; p50/p95 with
   1 and with 200 watchers (target: p95 < 150 ms at 200).
   Every figure is taken after a warm-up (the first requests load code and templates).
2. Stream overhead: paragraphs through /ws/ingest/ (each sent in 40-character chunks, the
   next after the previous came back audited, like a paced model) vs the engine alone
   (InlineStreamAuditor fed the same chunks), per paragraph, in the same run. The
   endpoint's share is the storage of the audited part and trace lines, the progress
   event and the WebSocket round trip.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
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

from tests.live_support import free_port, start_server, stop  # noqa: E402

PARAGRAPH = "Acme is easy to set up and most teams go live within a week of starting.\n\n"
WARMUP = 5  # audits (and streams) before any measurement: first requests load code, templates


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


async def drain(ws, quiet: float = 0.05) -> None:
    while True:
        try:
            await asyncio.wait_for(ws.recv(), timeout=quiet)
        except TimeoutError:
            return


async def card_latency(host: str, cookie: str, key: str, watchers: int, audits: int) -> list[float]:
    """Per delivery: ms from the submission to the audit's card fragment at a watcher."""
    sockets = [
        await websockets.connect(
            f"ws://{host}/ws/audits/",
            additional_headers={"Cookie": cookie},
            origin=f"http://{host}",
            max_queue=None,
        )
        for _ in range(watchers)
    ]
    latencies: list[float] = []
    try:
        async with httpx.AsyncClient() as http:
            for n in range(WARMUP + audits):
                started = time.perf_counter()
                r = await http.post(
                    f"http://{host}/api/audits",
                    json={"user_input": f"bench {n}", "response": "Acme is easy."},
                    headers={"Authorization": f"Bearer {key}"},
                )
                audit_id = r.json()["id"]

                async def first_card(ws, audit_id=audit_id, started=started) -> float:
                    while True:
                        message = await ws.recv()
                        if f"audit-card-{audit_id}" in message:
                            return (time.perf_counter() - started) * 1000

                async def finished(ws, audit_id=audit_id) -> None:
                    # The complete card: nothing of this audit is still on its way.
                    while True:
                        message = await ws.recv()
                        if (
                            f"audit-card-{audit_id}" in message
                            and 'data-status="complete"' in message
                        ):
                            return

                got = await asyncio.gather(*(first_card(ws) for ws in sockets))
                if n >= WARMUP:
                    latencies += got
                await asyncio.wait_for(asyncio.gather(*(finished(ws) for ws in sockets)), 10)
                await asyncio.gather(*(drain(ws) for ws in sockets))
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets))
    return latencies


async def stream_once(host: str, key: str, paragraphs: int) -> tuple[list[float], float]:
    """Paced like a model (the next paragraph after the previous one came back).

    Returns the ms from sending each paragraph's last chunk to its audited `chunk` event,
    and the ms of the whole stream (head to the final `audit`, link checks and storage).
    """
    per_paragraph: list[float] = []
    started = time.perf_counter()
    async with websockets.connect(
        f"ws://{host}/ws/ingest/", additional_headers={"Authorization": f"Bearer {key}"}
    ) as ws:
        await ws.send(json.dumps({"user_input": "bench", "collision_key": str(time.time())}))
        assert json.loads(await ws.recv())["event"] == "accepted"
        for n in range(paragraphs):
            text = f"Paragraph {n}: {PARAGRAPH}"
            for i in range(0, len(text), 40):
                await ws.send(json.dumps({"text": text[i : i + 40]}))
            sent = time.perf_counter()
            while True:
                message = json.loads(await ws.recv())
                if message["event"] == "chunk" and f"Paragraph {n}:" in message["data"]["text"]:
                    per_paragraph.append((time.perf_counter() - sent) * 1000)
                    break
        await ws.send(json.dumps({"done": True}))
        async for raw in ws:
            if json.loads(raw)["event"] == "audit":
                break
    return per_paragraph, (time.perf_counter() - started) * 1000


def engine_paragraphs(paragraphs: int) -> list[float]:
    """ms per paragraph of the engine alone (InlineStreamAuditor, the same chunks)."""
    from analyzers.config_store import load_config
    from analyzers.engine.guardrails.stream import InlineStreamAuditor

    auditor = InlineStreamAuditor.from_config(load_config())
    times = []
    for n in range(paragraphs):
        text = f"Paragraph {n}: {PARAGRAPH}"
        started = time.perf_counter()
        for i in range(0, len(text), 40):
            auditor.feed(text[i : i + 40])
        times.append((time.perf_counter() - started) * 1000)
    auditor.finish()
    return times


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
    proc = start_server(port, TMP / "server.log", DATABASE_URL=os.environ["DATABASE_URL"])
    host = f"127.0.0.1:{port}"
    try:
        p95s = []
        for watchers, audits in ((1, 60), (200, 80)):
            lat = asyncio.run(card_latency(host, cookie, key, watchers, audits))
            p95s.append(pct(lat, 95))
            flag = "  (target p95 < 150 ms)" if watchers > 1 else ""
            print(
                f"card latency, {watchers:>3} watcher(s): p50 {pct(lat, 50):6.1f} ms  "
                f"p95 {pct(lat, 95):6.1f} ms  ({audits} audits, {len(lat)} deliveries, "
                f"after {WARMUP} warm-up audits){flag}",
                flush=True,
            )
        print(f"p95 with 200 watchers / p95 with 1: x{p95s[1] / p95s[0]:.1f}")
        paragraphs = 20
        for _ in range(2):  # warm-up
            asyncio.run(stream_once(host, key, paragraphs))
            engine_paragraphs(paragraphs)
        streams = [asyncio.run(stream_once(host, key, paragraphs)) for _ in range(5)]
        stream_para = [ms for per, _ in streams for ms in per]
        totals = [total for _, total in streams]
        engine = [ms for _ in range(5) for ms in engine_paragraphs(paragraphs)]
        s, e = statistics.median(stream_para), statistics.median(engine)
        print(
            f"stream endpoint, paragraph sent -> audited chunk back: p50 {s:.2f} ms  "
            f"p95 {pct(stream_para, 95):.2f} ms; engine alone: {e:.3f} ms/paragraph; "
            f"overhead {s - e:.2f} ms/paragraph, x{s / e:.0f} the engine "
            f"({len(stream_para)} paragraphs)"
        )
        print(
            f"whole stream of {paragraphs} paragraphs (head to final audit, incl. link "
            f"checks and storage): median {statistics.median(totals):.0f} ms"
        )
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
