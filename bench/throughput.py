"""End to end: audits accepted/s and *analysed and stored*/s (helpers of bench_api.py).

A run starts a server (and, for the database backend, `db_worker` processes) from a
source tree, posts N audits of one shape (300-character input, 2 KB response with a few
links), and times two things: until every request was answered (accepted/s) and until
every audit is complete or failed in the database (analysed/s). It reads the CPU time of
the server and workers from /proc/<pid>/stat, their descendants' included (analysis
processes), and their peak RSS (VmHWM, descendants summed), and fails when
an accepted audit is not complete at the end (nothing lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

# The tables a stored audit writes (the link tables of this tree and of older ones).
STORED_TABLES = (
    "audits_analyzerrunrecord",
    "audits_annotation",
    "audits_annotationkind",
    "audits_traceline",
    "audits_auditlinks",
    "audits_linkcheck",
    "audits_auditrun",
    "django_tasks_db_dbtaskresult",
)  # (and the database queue's task rows)


def clear_stored(conn: sqlite3.Connection) -> None:
    """Delete every stored audit (a table an older tree lacks is skipped), and give the
    file its freed pages back (VACUUM), so the next scenario or round starts from what
    the first one had: an empty, compact database, written at its end. Without it, every
    later round wrote into the pages the one before had freed, and cost more CPU per
    audit each time (bench_api, 3 rounds: +10-25% from the first to the third)."""
    for table in STORED_TABLES:
        with contextlib.suppress(sqlite3.OperationalError):
            conn.execute(f"DELETE FROM {table}")
    conn.commit()
    conn.execute("VACUUM")


CLK_TCK = os.sysconf("SC_CLK_TCK")

PROBE_MARK = "lone-probe"  # in the probe's audits: what its filtered Live page shows
CARD_TAG = re.compile(r'<li id="audit-card-([0-9a-f-]+)"[^>]*data-status="([a-z]+)"')

PARAGRAPH = (
    "Acme's search API ranks results by relevance and business rules; most teams configure "
    "facets first, then synonyms and typo tolerance. Decathlon grew conversion with Acme. "
    "See https://www.acme.example/docs/relevance and https://docs.acme.example/facets "
    "or the guide at https://blog.other.example/tuning for details. "
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_server(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/api/openapi.json", timeout=2).read()
            return
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start")


def audit_body(i: int) -> dict:
    """One audit of the benchmark's shape; distinct text per audit."""
    user_input = (f"Question {i}: how do I tune Acme search relevance for my store? " * 6)[:300]
    response = (f"Answer {i}. " + PARAGRAPH * 9)[:2048]
    return {
        "user_input": user_input,
        "response": response,
        "sources": [{"title": "Docs", "url": "https://www.acme.example/docs", "text": "x"}],
        "metadata": {"session": "bench"},
    }


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def _children(pid: int) -> list[int]:
    """Every living descendant of `pid` (analysis processes, their resource tracker)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of `pid`, its living descendants and the children it reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    reaped = (int(fields[13]) + int(fields[14])) / CLK_TCK  # cutime + cstime
    return cpu_seconds(pid) + reaped + sum(cpu_seconds(c) for c in _children(pid))


def tree_peak_rss_mb(pid: int) -> float:
    """Peak RSS of `pid` plus its living descendants' peaks."""
    return peak_rss_mb(pid) + sum(peak_rss_mb(c) for c in _children(pid))


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _warm_up(port: int, key: str, db: Path, procs: list[subprocess.Popen], batch: int) -> float:
    """One audit through the server before the clock starts, then wait until its processes
    are quiet. Starting is not a cost per audit: each analysis process loads Django and the
    registry (~1.5 s of CPU), the first request its views and schemas. Returns the CPU
    seconds the start took from here (printed beside the run's figures)."""
    cpu0 = sum(tree_cpu_seconds(p.pid) for p in procs)
    finished = "status IN ('complete', 'failed')"
    before = _count(db, finished)
    warm = _requests(key, 1, batch, first=2 * 10**6)
    if batch > 1:  # the single path too (the live probe posts single audits)
        warm += _requests(key, 1, 1, first=2 * 10**6 + 1)
    asyncio.run(_post_all(port, warm, 1))
    deadline = time.monotonic() + 120
    while _count(db, finished) < before + len(warm) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Quiet: two half-seconds under 10% of a core per process (a db_worker polls its
    # queue: an idle one uses a few per cent).
    quiet, last, bar = 0, cpu0, 0.05 * len(procs)
    while quiet < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        now = sum(tree_cpu_seconds(p.pid) for p in procs)
        quiet, last = (quiet + 1 if now - last < bar else 0), now
    return last - cpu0


def _requests(key: str, n: int, batch: int, first: int = 0) -> list[bytes]:
    path = "/api/audits" if batch == 1 else "/api/audits/batch"
    out = []
    for start in range(first, first + n, batch):
        bodies = [audit_body(i) for i in range(start, min(start + batch, first + n))]
        payload = json.dumps(bodies[0] if batch == 1 else {"audits": bodies}).encode()
        out.append(
            (
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            ).encode()
            + payload
        )
    return out


async def _answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes, bytes]:
    """One answer off a keep-alive connection: (status code, head, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return head[9:12], head, await reader.readexactly(length)


async def _post_all(port: int, requests: list[bytes], clients: int) -> int:
    """Keep-alive HTTP/1.1 connections, each one request in flight (a minimal client).

    A 503 (the database stayed locked longer than a request may wait) is what a client
    retries: the same request again after a short pause, counted. Returns the retries."""
    queue = list(reversed(requests))
    retries = 0

    async def client() -> None:
        nonlocal retries
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while queue:
                request = queue.pop()
                while True:
                    writer.write(request)
                    status, head, body = await _answer(reader)
                    if status == b"202":
                        break
                    if status != b"503":
                        raise SystemExit(f"unexpected answer: {head!r} {body[:300]!r}")
                    retries += 1
                    await asyncio.sleep(0.2)
        finally:
            writer.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return retries


def _count(db: Path, where: str) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute(f"SELECT count(*) FROM audits_auditrun WHERE {where}").fetchone()[0]


async def _probe(port: int, cookie: str, key: str, stop: threading.Event, out: dict) -> None:
    """While the load runs: the dashboard list page (GET /, a staff session, one at a
    time) and cards: a lone audit posted every 0.2 s, timed until its card fragment
    reaches a WebSocket watcher of the live feed (/ws/audits/, filtered to the probe's
    audits while another page watches everything) and until its complete card does
    (`missed`: cards that never came)."""
    import httpx
    import websockets

    host = f"127.0.0.1:{port}"
    lists, cards, complete, ids = out["list_ms"], out["card_ms"], out["complete_ms"], out["ids"]

    # Two Live pages: one watches everything (the load's cards are rendered for it, as for
    # a person watching the feed), one only the probe's audits (`q`), where the lone
    # audit's card is timed: on the full feed a burst of newer cards may push it off
    # the page before it is shown, which is right for the page but no latency.
    def watch(query: str):
        return websockets.connect(
            f"ws://{host}/ws/audits/{query}",
            origin=f"http://{host}",
            additional_headers={"Cookie": cookie},
            max_queue=None,
        )

    everything = await watch("")
    ws = await watch(f"?q={PROBE_MARK}")

    async def drain_everything() -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for _ in everything:
                out["feed_messages"] = out.get("feed_messages", 0) + 1

    async def list_pages(http) -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            r = await http.get(f"http://{host}/", headers={"Cookie": cookie})
            if r.status_code == 200:
                lists.append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.2)

    posted: dict[str, float] = {}  # a lone audit's id -> when its POST was sent
    seen: dict[str, float] = {}  # -> when its first card came
    done: dict[str, float] = {}  # -> when its complete card came

    async def read_cards() -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in ws:
                now = time.perf_counter()
                for audit_id, status in CARD_TAG.findall(message):
                    seen.setdefault(audit_id, now)
                    if status == "complete":
                        done.setdefault(audit_id, now)

    async def lone_cards(http) -> None:
        """A lone audit every 0.2 s (not one at a time: a queued audit's complete card
        waits for the queue, and the first cards of the others would not be sampled)."""
        n = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            body = audit_body(10**6 + n)
            body["user_input"] = f"{PROBE_MARK} {body['user_input']}"
            r = await http.post(
                f"http://{host}/api/audits", json=body, headers={"Authorization": f"Bearer {key}"}
            )
            n += 1
            if r.status_code == 202:
                out["post_ms"].append((time.perf_counter() - t0) * 1000)
                audit_id = r.json()["id"]
                posted[audit_id] = t0
                ids.append(audit_id)  # run_scenario leaves them out of its counts
            await asyncio.sleep(0.2)
        for _ in range(100):  # the last ones' cards: a little longer
            if all(i in seen for i in posted):
                break
            await asyncio.sleep(0.05)

    drainer = asyncio.create_task(drain_everything())
    reader = asyncio.create_task(read_cards())
    try:
        async with httpx.AsyncClient(timeout=120) as http:
            await asyncio.gather(list_pages(http), lone_cards(http))
    finally:
        await ws.close()
        await everything.close()
        await drainer
        await reader
    for audit_id, t0 in posted.items():
        if audit_id in seen:
            cards.append((seen[audit_id] - t0) * 1000)
        else:
            out["missed"] = out.get("missed", 0) + 1
        if audit_id in done:
            complete.append((done[audit_id] - t0) * 1000)


def run_scenario(
    *,
    root: Path,
    db: Path,
    key: str,
    backend: str,
    n: int,
    batch: int,
    clients: int,
    workers: int = 0,
    env_extra: dict | None = None,
    timeout: float = 900,
    probe_cookie: str | None = None,
) -> dict:
    """Post `n` audits to a fresh server of `root`; figures of accepting and analysing them.

    `probe_cookie` (a staff session cookie): also probe the list page and the live card
    latency while the load runs (`_probe`); its audits are not counted in the rates."""
    port = free_port()
    env = {
        **os.environ,
        "DEBUG": "0",
        "SECRET_KEY": uuid.uuid4().hex * 2,
        "DATABASE_URL": f"sqlite:///{db}",
        "AUDITOR_TASK_BACKEND": backend,
        "PYTHONPATH": str(root),
        **(env_extra or {}),
    }
    # The shipped server of that tree: uvicorn (auditor_site.serve), or daphne before it.
    server = (
        [
            sys.executable,
            "-m",
            "auditor_site.serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
        if (root / "auditor_site" / "serve.py").exists()
        else [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "auditor_site.asgi:application",
        ]
    )
    procs = [
        subprocess.Popen(
            server, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    ]
    for _ in range(workers):
        procs.append(
            subprocess.Popen(
                [sys.executable, "manage.py", "db_worker", "--interval", "0.05"],
                cwd=root,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    try:
        wait_for_server(f"http://127.0.0.1:{port}", procs[0])
        warm_up_cpu = _warm_up(port, key, db, procs, batch)
        requests = _requests(key, n, batch)
        before = _count(db, "1")
        probe = {"list_ms": [], "card_ms": [], "complete_ms": [], "post_ms": [], "ids": []}
        stop_probe = threading.Event()
        prober = None
        if probe_cookie:
            prober = threading.Thread(
                target=lambda: asyncio.run(_probe(port, probe_cookie, key, stop_probe, probe)),
                daemon=True,
            )
        cpu0 = sum(tree_cpu_seconds(p.pid) for p in procs)
        own0 = cpu_seconds(procs[0].pid)
        t0 = time.perf_counter()
        if prober:
            prober.start()
        retries = asyncio.run(_post_all(port, requests, clients))
        accepted_s = time.perf_counter() - t0
        deadline = time.monotonic() + timeout
        done = 0
        while time.monotonic() < deadline:
            done = _count(db, "status IN ('complete', 'failed')") - before - len(probe["ids"])
            if done >= n:
                break
            time.sleep(0.05)
        analysed_s = time.perf_counter() - t0
        stop_probe.set()
        if prober:
            prober.join(320)
            done = _count(db, "status IN ('complete', 'failed')") - before - len(probe["ids"])
        cpu = sum(tree_cpu_seconds(p.pid) for p in procs) - cpu0
        own = cpu_seconds(procs[0].pid) - own0
        rss = [tree_peak_rss_mb(p.pid) for p in procs]
        children = len(_children(procs[0].pid))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
    stored = _count(db, "1") - before - len(probe["ids"])
    complete = _count(db, "status = 'complete'") - before - len(probe["ids"])
    with sqlite3.connect(db, timeout=30) as conn:
        clear_stored(conn)
    return {
        "backend": backend,
        "n": n,
        "batch": batch,
        "clients": clients,
        "workers": workers,
        "retried_503": retries,
        "stored": stored,
        "analysed": done,
        "complete": complete,
        "accepted_per_s": n / accepted_s,
        "analysed_per_s": done / analysed_s,
        "cpu_ms_per_audit": cpu * 1000 / max(done, 1),
        "server_process_cpu_ms_per_audit": own * 1000 / max(done, 1),
        "peak_rss_mb": {"server": rss[0], "workers": rss[1:]},
        "server_children": children,
        "warm_up_cpu_s": warm_up_cpu,
        **({"probe": probe} if probe_cookie else {}),
    }


def engine_cpu_ms(n: int = 500) -> float:
    """CPU ms per audit of the engine alone (default configuration, same shape)."""
    from analyzers.engine.auditor import Auditor
    from analyzers.engine.config import AuditorConfig
    from analyzers.engine.contract import AuditInput
    from analyzers.engine.linkcheck import LinkChecker
    from analyzers.engine.registry import build_registry

    auditor = Auditor(AuditorConfig(), build_registry([]), services={"link_checker": LinkChecker()})
    inputs = [AuditInput.model_validate(audit_body(i)) for i in range(n)]

    async def go() -> float:
        for audit in inputs[:20]:  # warm up caches
            await auditor.audit(audit)
        t0 = time.process_time()
        for audit in inputs:
            await auditor.audit(audit)
        return (time.process_time() - t0) * 1000 / n

    return asyncio.run(go())
