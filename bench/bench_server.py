"""Server benchmark: the shipped server (uvicorn) against the previous one (daphne), same run.

    .venv/bin/python bench/bench_server.py [--ingest 800] [--cards 40] [--skip-daphne] [--no-plain]

For each server, one process on 127.0.0.1 with a throwaway SQLite file and the default
in-process task threads, in this order:

- cards: ms from a submission to its card fragment at a staff WebSocket on /ws/audits/
  (p50/p95 after a warm-up);
- memory: server RSS while four clients upload 100 MB each to `POST /api/audits`
  without a key, at once, with a Content-Length and chunked; growth over the RSS before
  (target: no growth beyond 20 MB), and what is still held 2 s after;
- ingest: `POST /api/audits` audits/s over 8 keep-alive connections, accepted while the
  same process analyses them (median of 3 runs);
- SIGTERM: seconds from the signal to the exit, with that analysis backlog still running
  (the harness kills a server still running after 10 s).

A third run, uvicorn without the pooled request threads and DB threads
(`AUDITOR_BENCH_PLAIN_HANDLER=1`: Django's own ASGIHandler), shows what they still pay.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

BASE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
TMP = Path(tempfile.mkdtemp(prefix="bench-server-"))
os.environ["DATABASE_URL"] = f"sqlite:///{TMP / 'bench.sqlite3'}"
os.environ["AUDITOR_TEST_DB"] = str(TMP / "unused.sqlite3")
os.environ["AUDITOR_RATE_LIMIT_PER_MINUTE"] = "0"
# The servers' secret key too: the staff session cookie made here must verify there.
os.environ["SECRET_KEY"] = "bench-server-" + "k" * 50

import django  # noqa: E402
from raw_http import read_answer  # noqa: E402  (bench/ is on the path)

django.setup()

import httpx  # noqa: E402
import websockets  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from analyzers.models import ApiKey  # noqa: E402
from audits.models import AuditRun  # noqa: E402
from tests.live_support import free_port, start_server, stop  # noqa: E402

BODY = {
    "user_input": "Which retailers use Acme?",
    "response": "Decathlon grew conversion by 50% with Acme. See https://www.acme.example.",
    "metadata": {"session": "bench"},
}
CONNECTIONS = 8
UPLOAD_MB = 100
UPLOADERS = 4
WARMUP = 5


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- ingest -------------------------------------------------------------------------------


def ingest_rate(port: int, key: str, n: int) -> float:
    """Audits accepted per second; a minimal client (status line and Content-Length only)."""
    payload = json.dumps(BODY).encode()
    request = (
        f"POST /api/audits HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload

    async def connection(requests: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(requests):
                writer.write(request)
                await read_answer(reader)
        finally:
            writer.close()

    async def hammer() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*(connection(n // CONNECTIONS) for _ in range(CONNECTIONS)))
        return time.perf_counter() - t0

    return (n // CONNECTIONS * CONNECTIONS) / asyncio.run(hammer())


# --- card latency -------------------------------------------------------------------------


async def card_latency(host: str, cookie: str, key: str, audits: int) -> list[float]:
    latencies = []
    async with (
        websockets.connect(
            f"ws://{host}/ws/audits/",
            additional_headers={"Cookie": cookie},
            origin=f"http://{host}",
            max_queue=None,
        ) as ws,
        httpx.AsyncClient() as http,
    ):
        for n in range(WARMUP + audits):
            started = time.perf_counter()
            r = await http.post(
                f"http://{host}/api/audits",
                json={"user_input": f"card {n}", "response": "Acme is easy."},
                headers={"Authorization": f"Bearer {key}"},
            )
            audit_id = r.json()["id"]
            while f"audit-card-{audit_id}" not in await asyncio.wait_for(ws.recv(), 10):
                pass
            if n >= WARMUP:
                latencies.append((time.perf_counter() - started) * 1000)
    return latencies


# --- memory under big unauthenticated uploads ---------------------------------------------


def upload(port: int, chunked: bool, results: list[str]) -> None:
    """One unauthenticated 100 MB POST; records the status (and whether the upload was cut)."""
    piece = b"x" * (1 << 20)
    head = b"POST /api/audits HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += (
        b"Transfer-Encoding: chunked\r\n\r\n"
        if chunked
        else b"Content-Length: %d\r\n\r\n" % (UPLOAD_MB << 20)
    )
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        cut = ""
        try:
            sock.sendall(head)
            for _ in range(UPLOAD_MB):
                sock.sendall(b"100000\r\n%s\r\n" % piece if chunked else piece)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered early and closed the connection
            cut = " (upload cut)"
        try:
            results.append(sock.recv(64).split(b" ", 2)[1].decode() + cut)
        except (OSError, IndexError):
            results.append("no answer" + cut)


def memory_under_uploads(pid: int, port: int, chunked: bool) -> dict:
    before = rss_mb(pid)
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak.append(rss_mb(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    results: list[str] = []
    t0 = time.perf_counter()
    clients = [
        threading.Thread(target=upload, args=(port, chunked, results)) for _ in range(UPLOADERS)
    ]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    elapsed = time.perf_counter() - t0
    time.sleep(2)
    done.set()
    sampler.join()
    return {
        "before": before,
        "peak": max(peak),
        "after": rss_mb(pid),
        "seconds": elapsed,
        "answers": sorted(set(results)),
    }


# --- one server ---------------------------------------------------------------------------


def measure(server: str, label: str, key: str, cookie: str, n: int, cards: int, **env: str) -> dict:
    port = free_port()
    proc = start_server(
        port,
        TMP / f"{label}.log",
        server,
        DEBUG="0",
        AUDITOR_TASK_BACKEND="thread",
        DATABASE_URL=os.environ["DATABASE_URL"],
        **env,
    )
    try:
        lat = asyncio.run(card_latency(f"127.0.0.1:{port}", cookie, key, cards))
        out = {"card_p50": pct(lat, 50), "card_p95": pct(lat, 95)}
        out["upload_length"] = memory_under_uploads(proc.pid, port, chunked=False)
        out["upload_chunked"] = memory_under_uploads(proc.pid, port, chunked=True)
        rates = [ingest_rate(port, key, n) for _ in range(3)]
        out.update(ingest=statistics.median(rates), ingest_runs=rates)
        started = time.monotonic()
        stop(proc)
        out["sigterm_s"] = time.monotonic() - started
        return out
    finally:
        if proc.poll() is None:
            stop(proc)
        AuditRun.objects.all().delete()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ingest", type=int, default=800)
    parser.add_argument("--cards", type=int, default=40)
    parser.add_argument("--skip-daphne", action="store_true")
    parser.add_argument(
        "--no-plain",
        action="store_true",
        help="skip uvicorn without the pooled handler and DB threads",
    )
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    _, key = ApiKey.create_key("bench", scope="ingest")

    runs = [("uvicorn", "uvicorn", {})]
    if not args.no_plain:
        runs.append(("uvicorn", "uvicorn-plain", {"AUDITOR_BENCH_PLAIN_HANDLER": "1"}))
    if not args.skip_daphne:
        runs.append(("daphne", "daphne", {}))
    results = {}
    for server, label, env in runs:
        r = results[label] = measure(server, label, key, cookie, args.ingest, args.cards, **env)
        print(
            f"{label:>14}: POST /api/audits {r['ingest']:.0f} audits/s "
            f"(runs {', '.join(f'{x:.0f}' for x in r['ingest_runs'])}); "
            f"card p50 {r['card_p50']:.1f} ms p95 {r['card_p95']:.1f} ms; "
            f"SIGTERM to exit {r['sigterm_s']:.1f} s",
            flush=True,
        )
        for kind in ("length", "chunked"):
            m = r[f"upload_{kind}"]
            print(
                f"{'':>14}  {UPLOADERS} x {UPLOAD_MB} MB unauthenticated ({kind}): RSS "
                f"{m['before']:.0f} -> peak {m['peak']:.0f} MB (+{m['peak'] - m['before']:.0f}; "
                f"target +20), {m['after']:.0f} MB 2 s after; {m['seconds']:.1f} s; "
                f"answers {', '.join(m['answers'])}",
                flush=True,
            )
    if "daphne" in results:
        new, old = results["uvicorn"], results["daphne"]
        print(
            f"uvicorn / daphne: ingest x{new['ingest'] / old['ingest']:.2f}, "
            f"card p95 x{new['card_p95'] / old['card_p95']:.2f}"
        )
    if "uvicorn-plain" in results:
        pooled, plain = results["uvicorn"], results["uvicorn-plain"]
        print(
            f"pooled handler + DB threads / plain Django handler on uvicorn: ingest "
            f"x{pooled['ingest'] / plain['ingest']:.2f}"
        )


if __name__ == "__main__":
    main()
