"""The scaled shape against one server on SQLite: analysed audits/s, and where the time goes.

    .venv/bin/python bench/bench_scaled.py [--audits 3000] [--clients 4] [--rounds 1]

Two shapes in the same run, on the same cores:
- scaled: a throwaway PostgreSQL cluster and redis-server (bench/services.py, as the fault
  drill), 2 servers (`python -m auditor_site.serve`, AUDITOR_TASK_BACKEND=database) and 2
  `manage.py db_worker`s;
- SQLite: one server on a throwaway SQLite file, the default thread backend, its analysis
  processes at their default.

Each round starts the shape's processes, sends one warm-up batch through each server, then
posts `--audits` audits (bench/throughput.py's shape) in batches of 50 via
`POST /api/audits/batch` from `--clients` threads (alternating servers), and times until
every one is analysed and stored (complete or failed in the database). It prints analysed/s
per shape (medians of the rounds), the ratio, and the CPU seconds each kind of process used
meanwhile (/proc/<pid>/stat: servers and workers with their children, PostgreSQL's
postmaster with every backend, redis-server, this client). Skips (exit 0) saying why when
PostgreSQL's server binaries, redis-server or the `postgres`/`redis` extras are missing.
The processes' logs stay in var/bench/scaled-<pid>/.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.services import PgCluster, RedisServer, postgres_bin  # noqa: E402
from bench.throughput import audit_body, cpu_seconds, tree_cpu_seconds  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BATCH = 50


def missing() -> str | None:
    """Why the scaled shape cannot run here, or None."""
    if postgres_bin() is None:
        return "PostgreSQL's server binaries are not installed (apt-get install -y postgresql)"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install -y redis-server)"
    for module, extra in (("psycopg", "postgres"), ("channels_redis", "redis")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[{extra}]')"
    return None


SKIP = missing()
if SKIP is None:  # the drill's module and the count need psycopg
    import psycopg

    from bench.drill import SETUP, Processes, shell


def post_all(ports: list[int], key: str, n: int, clients: int, first: int) -> int:
    """`n` audits in batches of 50 from `clients` threads, alternating servers; a 429 or 503
    is retried. Returns the audits accepted."""
    starts = iter(range(first, first + n, BATCH))
    lock = threading.Lock()
    accepted = [0]

    def client(index: int) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            for turn in itertools.count(index):
                with lock:
                    start = next(starts, None)
                if start is None:
                    return
                body = {
                    "audits": [audit_body(i) for i in range(start, min(start + BATCH, first + n))]
                }
                port = ports[turn % len(ports)]
                for _ in range(100):
                    r = http.post(f"http://127.0.0.1:{port}/api/audits/batch", json=body)
                    if r.status_code == 202:
                        ok = sum(1 for item in r.json()["items"] if not item.get("error"))
                        with lock:
                            accepted[0] += ok
                        break
                    if r.status_code not in (429, 503):
                        raise SystemExit(f"unexpected answer {r.status_code}: {r.text[:300]}")
                    time.sleep(0.2)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return accepted[0]


class Shape:
    """One layout: its database and services, its processes' environment, and how to count
    finished audits and read each kind of process's CPU."""

    def __init__(self, name: str, servers: int, workers: int, env: dict[str, str]) -> None:
        self.name, self.servers, self.workers = name, servers, workers
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AUDITOR_", "REDIS_"))},
            "DEBUG": "0",
            "SECRET_KEY": os.environ.get("SECRET_KEY")
            or "bench-only-secret-key-not-for-any-server-0123456789abcdef",
            "AUDITOR_RATE_BURST_PER_S": "100000",
            "AUDITOR_RATE_LIMIT_PER_MINUTE": "10000000",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.cluster: PgCluster | None = None
        self.redis: RedisServer | None = None
        self.finished: Callable[[], int] = lambda: 0

    @classmethod
    def scaled(cls) -> Shape:
        cluster = PgCluster.create()
        redis = RedisServer()
        shape = cls(
            "scaled: 2 servers + 2 db_workers, PostgreSQL + Redis",
            2,
            2,
            {
                "DATABASE_URL": cluster.url,
                "REDIS_URL": redis.url,
                "AUDITOR_TASK_BACKEND": "database",
            },
        )
        shape.cluster, shape.redis = cluster, redis

        def finished() -> int:
            with psycopg.connect(cluster.url, connect_timeout=5) as conn:
                return conn.execute(
                    "SELECT count(*) FROM audits_auditrun WHERE status IN ('complete', 'failed')"
                ).fetchone()[0]

        shape.finished = finished
        return shape

    @classmethod
    def sqlite(cls, path: Path) -> Shape:
        shape = cls("SQLite: 1 server, thread backend", 1, 0, {"DATABASE_URL": f"sqlite:///{path}"})

        def finished() -> int:
            with sqlite3.connect(path, timeout=30) as conn:
                return conn.execute(
                    "SELECT count(*) FROM audits_auditrun WHERE status IN ('complete', 'failed')"
                ).fetchone()[0]

        shape.finished = finished
        return shape

    def prepare(self) -> str:
        """Migrate; returns an ingest key."""
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
            cwd=ROOT,
            env=self.env,
            check=True,
            timeout=600,
        )
        return shell(self.env, SETUP).strip().splitlines()[-1].split()[0]

    def cpu(self, procs: Processes) -> dict[str, float]:
        """CPU seconds so far of each kind of process (children included)."""
        out: dict[str, float] = {}
        for kind in ("server", "worker"):
            pids = [p.pid for n, p in procs.procs.items() if n.startswith(kind)]
            if pids:
                out[f"{kind}s"] = sum(tree_cpu_seconds(pid) for pid in pids)
        if self.cluster is not None:
            postmaster = int((Path(self.cluster.data) / "postmaster.pid").read_text().split()[0])
            out["postgres"] = tree_cpu_seconds(postmaster)
        if self.redis is not None and self.redis.proc is not None:
            out["redis"] = cpu_seconds(self.redis.proc.pid)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out["bench client"] = usage.ru_utime + usage.ru_stime
        return out

    def close(self) -> None:
        if self.redis is not None:
            self.redis.stop()
        if self.cluster is not None:
            self.cluster.destroy()


def run_round(shape: Shape, key: str, n: int, clients: int, first: int, logs: Path) -> dict:
    """Start the shape's processes, warm them up, post `n` audits, wait until analysed."""
    procs = Processes(shape.env, logs)
    try:
        for i in range(shape.servers):
            procs.server(f"server-{i + 1}")
        for i in range(shape.workers):
            procs.worker(f"worker-{i + 1}")
        ports = list(procs.ports.values())
        done0 = shape.finished()
        warm = post_all(ports, key, BATCH * len(ports), len(ports), first + 10**7)
        deadline = time.monotonic() + 120
        while shape.finished() < done0 + warm and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)  # the start's and the warm-up's work out of the figures
        done0 = shape.finished()
        cpu0 = shape.cpu(procs)
        t0 = time.perf_counter()
        accepted = post_all(ports, key, n, clients, first)
        accepted_s = time.perf_counter() - t0
        deadline = time.monotonic() + 600
        while (done := shape.finished() - done0) < accepted and time.monotonic() < deadline:
            time.sleep(0.1)
        elapsed = time.perf_counter() - t0
        cpu1 = shape.cpu(procs)
    finally:
        procs.stop_all()
    if done < n:
        raise SystemExit(f"{shape.name}: {done} of {n} audits analysed (logs: {logs})")
    return {
        "accepted_per_s": accepted / accepted_s,
        "analysed_per_s": done / elapsed,
        "seconds": elapsed,
        "cpu_s": {kind: cpu1[kind] - cpu0[kind] for kind in cpu0},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if SKIP:
        print(f"bench_scaled skipped: {SKIP}")
        return 0
    logs = ROOT / "var" / "bench" / f"scaled-{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    shapes: list[Shape] = []
    results: dict[str, list[dict]] = {}
    try:
        shapes = [Shape.scaled(), Shape.sqlite(logs / "sqlite.sqlite3")]
        keys = [shape.prepare() for shape in shapes]
        for r in range(args.rounds):
            order = list(zip(shapes, keys, strict=True))
            for shape, key in order if r % 2 == 0 else reversed(order):
                result = run_round(shape, key, args.audits, args.clients, r * args.audits, logs)
                results.setdefault(shape.name, []).append(result)
                cpu = ", ".join(f"{k} {v:.1f}" for k, v in result["cpu_s"].items())
                print(
                    f"  round {r + 1} {shape.name}: accepted {result['accepted_per_s']:.0f}/s, "
                    f"analysed {result['analysed_per_s']:.0f}/s in {result['seconds']:.1f} s; CPU s: {cpu}"
                )
    finally:
        for shape in shapes:
            shape.close()
        for db in logs.glob("sqlite.sqlite3*"):
            db.unlink()
    print(
        f"{args.audits} audits, batches of {BATCH}, {args.clients} clients, {os.cpu_count()} cores"
    )
    rates = {}
    for name, rounds in results.items():
        rates[name] = statistics.median(x["analysed_per_s"] for x in rounds)
        kinds = rounds[0]["cpu_s"]
        cpu = {k: statistics.median(x["cpu_s"][k] for x in rounds) for k in kinds}
        total = sum(cpu.values())
        print(f"{name}: analysed and stored {rates[name]:.0f}/s (median of {len(rounds)})")
        for kind, seconds in cpu.items():
            print(
                f"    {kind:>12}: {seconds:6.1f} CPU s  {seconds * 1000 / args.audits:5.2f} ms per audit"
                f"  ({100 * seconds / max(total, 1e-9):4.1f}%)"
            )
    scaled, single = (rates[s.name] for s in shapes)
    print(f"scaled / SQLite: {scaled / single:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
