"""Polling benchmark: what `GET /api/audits/{id}` pollers cost the server, before and after.

    .venv/bin/python bench/bench_polling.py [--before REV] [--gets 2000] [--probes 60]

Two servers, one after the other, on the same throwaway SQLite file (analysis in their
task threads): the tree of `REV` (default: the commit before audits/api/polling.py came,
exported to a temporary folder) and this tree. For each:

- CPU per GET: server CPU time (from /proc) over `--gets` sequential GETs of one finished
  audit on one keep-alive connection, plain (200) and with its ETag (`If-None-Match`: 304);
- a probe's latency: `--probes` submissions (`POST /api/audits`, one at a time, 20 ms
  apart), p50/p95, with no pollers and then with 100 pollers (another process, one
  keep-alive connection each, GET in a loop on one audit with one read key, as fast as
  answered) started 1 s before.

Rate limits are off for those (the pollers are all served: the worst case). This tree is
measured once more with the default limits: the burst (`AUDITOR_RATE_BURST_PER_S`) answers
the pollers' flood with 429s.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import multiprocessing
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

BASE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
TMP = Path(tempfile.mkdtemp(prefix="bench-polling-"))
os.environ["DATABASE_URL"] = f"sqlite:///{TMP / 'bench.sqlite3'}"
os.environ["SECRET_KEY"] = "bench-polling-" + "k" * 50

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.core.management import call_command  # noqa: E402

from analyzers.models import ApiKey  # noqa: E402
from tests.live_support import free_port, server_command, stop  # noqa: E402

BODY = b'{"user_input": "Which retailers use Acme?", "response": "Decathlon uses Acme."}'
POLLERS = 100
NO_LIMITS = {"AUDITOR_RATE_LIMIT_PER_MINUTE": "0"}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def export_tree(rev: str) -> Path:
    """The files of `rev` in a temporary folder (the server of the `before` run)."""
    archive = subprocess.run(
        ["git", "archive", rev], cwd=BASE, capture_output=True, check=True
    ).stdout
    root = TMP / f"tree-{rev[:12]}"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


def start(tree: Path, env_extra: dict[str, str]) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {
        **os.environ,
        "AUDITOR_TASK_BACKEND": "thread",
        "PYTHONUNBUFFERED": "1",
        "AUDITOR_ANALYSIS_PROCESSES": "0",
        **env_extra,
    }
    with (TMP / f"server-{port}.log").open("ab") as log:
        proc = subprocess.Popen(
            server_command(port), cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/docs", timeout=1.0)
            return proc, port
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server did not answer; log in {TMP}")


async def answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One answer off a keep-alive connection: (status code, head)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    await reader.readexactly(length)
    return head[9:12], head


def get_request(audit: str, key: str, etag: str = "") -> bytes:
    extra = f"If-None-Match: {etag}\r\n" if etag else ""
    return (
        f"GET /api/audits/{audit} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {key}\r\n{extra}\r\n"
    ).encode()


async def gets(port: int, request: bytes, n: int, expect: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(n):
        writer.write(request)
        status, head = await answer(reader)
        if status != expect:
            raise SystemExit(f"unexpected answer: {head!r}")
    writer.close()


def etag_of(port: int, audit: str, key: str) -> str:
    r = httpx.get(
        f"http://127.0.0.1:{port}/api/audits/{audit}", headers={"Authorization": f"Bearer {key}"}
    )
    return r.headers.get("etag", "")


def cpu_per_get_ms(pid: int, port: int, request: bytes, n: int, expect: bytes) -> float:
    asyncio.run(gets(port, request, 50, expect))  # warm up
    before = cpu_seconds(pid)
    asyncio.run(gets(port, request, n, expect))
    return (cpu_seconds(pid) - before) / n * 1000


def poll(port: int, request: bytes, seconds: float, counts) -> None:
    """The pollers (run in their own process): GET in a loop on `POLLERS` connections."""

    async def poller(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            writer.write(request)
            status, _ = await answer(reader)
            counts[i] = counts[i] + (1 if status == b"200" else 1_000_000)
        writer.close()

    async def run() -> None:
        await asyncio.gather(*(poller(i) for i in range(POLLERS)))

    asyncio.run(run())


async def probe(port: int, key: str, n: int) -> list[float]:
    """ms per submission, one at a time, 20 ms apart."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = (
        f"POST /api/audits HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    ).encode()
    took = []
    for _ in range(n):
        start = time.perf_counter()
        writer.write(request + BODY)
        status, head = await answer(reader)
        took.append((time.perf_counter() - start) * 1000)
        if status != b"202":
            raise SystemExit(f"unexpected probe answer: {head!r}")
        await asyncio.sleep(0.02)
    writer.close()
    return took


def probe_under_pollers(port: int, keys: dict, audit: str, probes: int, pollers: bool) -> dict:
    counts = multiprocessing.Array("l", POLLERS)
    proc = None
    if pollers:
        proc = multiprocessing.Process(
            target=poll, args=(port, get_request(audit, keys["read"]), probes * 0.06 + 3, counts)
        )
        proc.start()
        time.sleep(1.0)
    took = asyncio.run(probe(port, keys["ingest"], probes))
    if proc is not None:
        proc.join()
    served = sum(c % 1_000_000 for c in counts)
    refused = sum(c // 1_000_000 for c in counts)
    return {"p50": pct(took, 50), "p95": pct(took, 95), "served": served, "refused": refused}


def measure(label: str, tree: Path, keys: dict, audit: str, args, env: dict) -> None:
    proc, port = start(tree, env)
    try:
        read = keys["read"]
        httpx.get(
            f"http://127.0.0.1:{port}/api/audits/{audit}",
            headers={"Authorization": f"Bearer {read}"},
        )  # the key verified
        print(f"{label}:", flush=True)
        if env == NO_LIMITS:  # sequential GETs as fast as answered: past any burst limit
            plain = cpu_per_get_ms(proc.pid, port, get_request(audit, read), args.gets, b"200")
            line = f"  CPU per GET {plain:.2f} ms"
            etag = etag_of(port, audit, read)
            if etag:
                request = get_request(audit, read, etag)
                line += f", with If-None-Match (304) {cpu_per_get_ms(proc.pid, port, request, args.gets, b'304'):.2f} ms"
            print(line, flush=True)
        for pollers in (False, True):
            r = probe_under_pollers(port, keys, audit, args.probes, pollers)
            who = f"{POLLERS} pollers" if pollers else "no pollers"
            extra = f" (pollers served {r['served']}, refused {r['refused']})" if pollers else ""
            print(
                f"  probe POST with {who}: p50 {r['p50']:.0f} ms, p95 {r['p95']:.0f} ms{extra}",
                flush=True,
            )
    finally:
        stop(proc)


def added_by(path: str) -> str:
    out = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "-1", "--", path],
        cwd=BASE,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return f"{out}^"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default=None, help="the tree to compare (a git revision)")
    parser.add_argument("--gets", type=int, default=2000)
    parser.add_argument("--probes", type=int, default=60)
    args = parser.parse_args()
    before = args.before or added_by("audits/api/polling.py")

    call_command("migrate", verbosity=0)
    keys = {
        scope: ApiKey.create_key(f"bench {scope}", scope=scope)[1] for scope in ("ingest", "read")
    }
    # One finished audit, analysed by a server of this tree.
    proc, port = start(BASE, NO_LIMITS)
    try:
        r = httpx.post(
            f"http://127.0.0.1:{port}/api/audits?wait=true",
            content=BODY,
            timeout=60,
            headers={
                "Authorization": f"Bearer {keys['ingest']}",
                "Content-Type": "application/json",
            },
        )
        audit = r.json()["id"]
    finally:
        stop(proc)
    print(f"bench_polling: GET /api/audits/{{id}} of a finished audit; before = {before}")
    measure("before", export_tree(before), keys, audit, args, NO_LIMITS)
    measure("after", BASE, keys, audit, args, NO_LIMITS)
    measure("after, default rate limits", BASE, keys, audit, args, {})


if __name__ == "__main__":
    main()
