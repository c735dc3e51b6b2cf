"""The fault drill (`make drill`): the scaled-out layout on one machine, broken on purpose.

A throwaway PostgreSQL cluster and redis-server, 2 servers (`python -m auditor_site.serve`,
the database task queue) and 2 `manage.py db_worker`s. A few thousand audits go in through
both servers (each with an `external_id`; a failed request is retried until answered, which
the external_id makes safe), and meanwhile: a worker is SIGKILLed (and started again), a
server is SIGKILLed (and started again), PostgreSQL restarts (`pg_ctl restart -m fast`) and
Redis restarts (every key lost). A staff page's live feed is open on each server all along
(reconnecting when its server dies).

Once the faults are over, a few audits go through each server, and each feed must show
them all (what the other server took as well). It prints audits accepted, stored, analysed,
lost and duplicated, analysed/s, and what each feed showed before and after the Redis
restart and after the faults; it exits 1 when an accepted audit is lost or stored twice or
a feed missed an audit taken after the faults. `--audits` and `--quick` shorten it (a test
runs it so).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.services import PgCluster, RedisServer, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROBES = 10  # audits through each server once the faults are over
CARD = re.compile(r"audit-card-([0-9a-f-]{36})")
SETUP = """
from django.contrib.auth import get_user_model
from django.test import Client
from analyzers.models import ApiKey
from django.conf import settings
user = get_user_model().objects.create_user("drill", "d@example.com", "drill-pass-1",
                                            is_staff=True, is_superuser=True)
client = Client()
client.force_login(user)
_, key = ApiKey.create_key("drill", scope="ingest", rate_limit_per_minute=10_000_000)
print(key, settings.SESSION_COOKIE_NAME + "=" + client.cookies[settings.SESSION_COOKIE_NAME].value)
"""


@dataclass
class Processes:
    """The servers and workers of the drill, started and killed by name."""

    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    def _spawn(self, name: str, command: list[str]) -> None:
        with (self.logs / f"{name}.log").open("ab") as out:
            self.procs[name] = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def server(self, name: str) -> None:
        port = self.ports.setdefault(name, free_port())
        self._spawn(
            name,
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
            ],
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(
            f"{name} did not start: {(self.logs / f'{name}.log').read_text()[-2000:]}"
        )

    def worker(self, name: str) -> None:
        self._spawn(name, [sys.executable, "manage.py", "db_worker", "--interval", "0.1"])

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()

    def alive(self) -> dict[str, bool]:
        return {name: proc.poll() is None for name, proc in self.procs.items()}


@dataclass
class Feed:
    """A live page on one server: the audit ids its feed showed, before and after a mark."""

    port: int
    cookie: str
    seen: dict[str, float] = field(default_factory=dict)  # audit id -> first seen (monotonic)
    reconnects: int = 0
    connected_at: float | None = None  # monotonic, while the socket is open

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                async with websockets.connect(
                    f"ws://127.0.0.1:{self.port}/ws/audits/",
                    origin=f"http://127.0.0.1:{self.port}",
                    additional_headers={"Cookie": self.cookie},
                    open_timeout=5,
                ) as ws:
                    self.connected_at = time.monotonic()
                    while not stop.is_set():
                        with contextlib.suppress(TimeoutError):
                            text = await asyncio.wait_for(ws.recv(), 1)
                            now = time.monotonic()
                            for audit_id in CARD.findall(text):
                                self.seen.setdefault(audit_id, now)
            except (OSError, websockets.WebSocketException):
                self.connected_at = None
                self.reconnects += 1
                await asyncio.sleep(0.5)


def shell(env: dict[str, str], code: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout


async def ingest(
    ports: list[int],
    key: str,
    n: int,
    accepted: dict[str, str],
    sent_at: dict[str, float],
    concurrency: int,
) -> int:
    """`n` audits through the servers in turn, each retried until answered; the answers'
    ids by external_id. Returns the retries."""
    retries = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def one(http: httpx.AsyncClient) -> None:
        nonlocal retries
        while not queue.empty():
            i = queue.get_nowait()
            external_id = f"drill-{i}"
            body = {
                "user_input": f"Question {i} about Acme?",
                "response": f"Acme is easy to use ({i}). See https://example.com/acme/{i}.",
                "external_id": external_id,
            }
            for attempt in range(1000):
                port = ports[(i + attempt) % len(ports)]  # a retry tries the other server first
                try:
                    r = await http.post(
                        f"http://127.0.0.1:{port}/api/audits", json=body, timeout=30
                    )
                    if r.status_code in (200, 201, 202):
                        accepted[external_id] = r.json()["id"]
                        sent_at[r.json()["id"]] = time.monotonic()
                        break
                except httpx.HTTPError:
                    pass
                retries += 1
                await asyncio.sleep(min(0.05 * 2 ** min(attempt, 5), 1.0))

    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, limits=httpx.Limits(max_connections=concurrency)
    ) as http:
        await asyncio.gather(*(one(http) for _ in range(concurrency)))
    return retries


async def after_the_faults(
    ports: dict[str, int], key: str, feeds: list[Feed], per_server: int = PROBES
) -> list[str]:
    """Once every fault is over: `per_server` audits through each server, and the time for
    both feeds to show them all (each sees the other server's). The audits' ids."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
        feed.connected_at and time.monotonic() - feed.connected_at > 1 for feed in feeds
    ):  # a restarted server's page is back (its socket joins the feed after it opens)
        await asyncio.sleep(0.1)
    ids: list[str] = []
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        for name, port in ports.items():
            if not name.startswith("server"):
                continue
            for k in range(per_server):
                body = {
                    "user_input": f"After the faults {k}, through {name}",
                    "response": "Acme is easy to use.",
                    "external_id": f"after-{name}-{k}",
                }
                r = await http.post(f"http://127.0.0.1:{port}/api/audits", json=body, timeout=30)
                r.raise_for_status()
                ids.append(r.json()["id"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not all(set(ids) <= feed.seen.keys() for feed in feeds):
        await asyncio.sleep(0.2)
    return ids


def store_counts(url: str) -> dict[str, int]:
    with psycopg.connect(url, connect_timeout=5) as conn:
        statuses = dict(
            conn.execute("SELECT status, count(*) FROM audits_auditrun GROUP BY status").fetchall()
        )
        duplicated_ids = conn.execute(
            "SELECT count(*) FROM (SELECT external_id FROM audits_auditrun WHERE external_id IS NOT NULL "
            "GROUP BY api_key_id, external_id HAVING count(*) > 1) d"
        ).fetchone()[0]
        twice = conn.execute(
            "SELECT count(*) FROM (SELECT audit_id FROM audits_analyzerrunrecord "
            "GROUP BY audit_id, analyzer_id HAVING count(*) > 1) d"
        ).fetchone()[0]
    return {**statuses, "duplicated_external_ids": duplicated_ids, "analysed_twice": twice}


async def drill(audits: int, quick: bool) -> dict:
    cluster = PgCluster.create()
    redis = RedisServer()
    logs = Path(os.environ.get("AUDITOR_DRILL_LOGS", "/tmp")) / f"auditor-drill-{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATABASE_URL": cluster.url,
        "REDIS_URL": redis.url,
        "AUDITOR_TASK_BACKEND": "database",
        "SECRET_KEY": os.environ.get("SECRET_KEY")
        or "drill-only-secret-key-0123456789abcdef0123456789",
        "AUDITOR_RATE_BURST_PER_S": "100000",
        "AUDITOR_RATE_LIMIT_PER_MINUTE": "10000000",
        # Recovery on a shorter clock than the defaults (30 s): the drill is short.
        "AUDITOR_RECOVER_RUNNING_AFTER_S": "10",
        "AUDITOR_RECOVER_PENDING_AFTER_S": "10",
        "AUDITOR_RECOVERY_INTERVAL": "2",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("AUDITOR_TEST_DB", None)
    procs = Processes(env, logs)
    events: list[str] = []
    try:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=600,
        )
        key, cookie = shell(env, SETUP).strip().splitlines()[-1].split()
        for name in ("server-1", "server-2"):
            procs.server(name)
        for name in ("worker-1", "worker-2"):
            procs.worker(name)
        feeds = [Feed(procs.ports[name], cookie) for name in ("server-1", "server-2")]
        stop = asyncio.Event()
        watchers = [asyncio.create_task(feed.watch(stop)) for feed in feeds]
        await asyncio.sleep(1)

        accepted: dict[str, str] = {}
        sent_at: dict[str, float] = {}
        started = time.monotonic()
        loader = asyncio.create_task(
            ingest(
                list(procs.ports.values()),
                key,
                audits,
                accepted,
                sent_at,
                concurrency=8 if quick else 16,
            )
        )
        marks: dict[str, float] = {}
        faults: list[asyncio.Task] = []

        async def at(fraction: float, what: str, action) -> None:
            """`action` once this share of the audits was accepted, under way meanwhile."""
            while len(accepted) < fraction * audits and not loader.done():
                await asyncio.sleep(0.05)
            marks[what] = time.monotonic()
            events.append(
                f"{time.monotonic() - started:6.1f} s  {what} (at {len(accepted)} accepted)"
            )
            faults.append(asyncio.create_task(asyncio.to_thread(action)))

        def restart_worker() -> None:
            procs.kill("worker-1")
            time.sleep(1)
            procs.worker("worker-1")

        def restart_server() -> None:
            procs.kill("server-2")
            time.sleep(1)
            procs.server("server-2")

        await at(0.15, "SIGKILL worker-1, started again", restart_worker)
        await at(0.30, "SIGKILL server-2, started again", restart_server)
        await at(0.50, "PostgreSQL restarted (pg_ctl restart -m fast)", cluster.restart)
        await at(0.70, "Redis restarted (every key lost)", redis.restart)
        retries = await loader
        await asyncio.gather(*faults)
        ingested = time.monotonic()

        ids = set(accepted.values())
        deadline = time.monotonic() + (120 if quick else 300)
        while time.monotonic() < deadline:
            counts = await asyncio.to_thread(store_counts, cluster.url)
            if counts.get("complete", 0) + counts.get("failed", 0) >= len(ids):
                break
            await asyncio.sleep(1)
        analysed_at = time.monotonic()
        probe = await after_the_faults(procs.ports, key, feeds)
        stop.set()
        await asyncio.gather(*watchers)

        counts = store_counts(cluster.url)
        with psycopg.connect(cluster.url) as conn:
            stored = {
                str(r[0]): r[1] for r in conn.execute("SELECT id, status FROM audits_auditrun")
            }
        analysed = sum(1 for i in ids if stored.get(i) in ("complete", "failed"))
        redis_mark = marks["Redis restarted (every key lost)"]
        feed_rows = []
        for name, feed in zip(("server-1", "server-2"), feeds, strict=True):
            before = sum(1 for i, t in feed.seen.items() if t < redis_mark and i in ids)
            after = sum(1 for i, t in feed.seen.items() if t >= redis_mark and i in ids)
            feed_rows.append(
                {
                    "server": name,
                    "before_redis_restart": before,
                    "after_redis_restart": after,
                    "after_the_faults": sum(1 for i in probe if i in feed.seen),
                    "reconnects": feed.reconnects,
                }
            )
        finished_before = sum(1 for i, t in sent_at.items() if t < redis_mark)
        return {
            "audits_sent": audits,
            "accepted": len(ids),
            "stored": sum(1 for i in ids if i in stored),
            "analysed": analysed,
            "failed": sum(1 for i in ids if stored.get(i) == "failed"),
            "lost": len(ids) - analysed,
            "duplicated": counts["duplicated_external_ids"] + counts["analysed_twice"],
            "client_retries": retries,
            "ingest_s": round(ingested - started, 1),
            "analysed_per_s": round(analysed / max(analysed_at - started, 1e-9), 1),
            "accepted_before_redis_restart": finished_before,
            "sent_after_the_faults": len(probe),
            "feeds": feed_rows,
            "faults": events,
            "processes_alive": procs.alive(),
            "logs": str(logs),
        }
    finally:
        procs.stop_all()
        redis.stop()
        cluster.destroy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=3000)
    parser.add_argument("--quick", action="store_true", help="a shorter wait, fewer clients")
    parser.add_argument("--json", action="store_true", help="the results as JSON")
    args = parser.parse_args()
    result = asyncio.run(drill(args.audits, args.quick))
    if args.json:
        print(json.dumps(result))
    else:
        for line in result["faults"]:
            print(line)
        for name in (
            "audits_sent",
            "accepted",
            "stored",
            "analysed",
            "failed",
            "lost",
            "duplicated",
            "client_retries",
            "ingest_s",
            "analysed_per_s",
        ):
            print(f"{name:>16}: {result[name]}")
        for row in result["feeds"]:
            print(
                f"   live feed {row['server']}: {row['before_redis_restart']} audits seen before the Redis "
                f"restart, {row['after_redis_restart']} after ({row['reconnects']} reconnects); "
                f"after the faults {row['after_the_faults']} of {result['sent_after_the_faults']}"
            )
        print(f"   logs: {result['logs']}")
    feeds_healed = all(
        row["after_the_faults"] == result["sent_after_the_faults"] for row in result["feeds"]
    )
    return 1 if result["lost"] or result["duplicated"] or not feeds_healed else 0


if __name__ == "__main__":
    sys.exit(main())
