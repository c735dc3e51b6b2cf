"""The request path alone: server CPU and thread hops per API request, one client.

    .venv/bin/python bench/bench_request_path.py [--n 1000] [--rounds 3] [--clients 1]
        [--before PATH] [--verbose]

Starts the shipped server (`python -m auditor_site.serve`) of each source tree (this one,
and `--before PATH` for a before/after in the same run) on a throwaway SQLite file, with
the database task backend and no worker (nothing is analysed: the server's CPU is the
request path), and sends N requests of each kind one after another on one keep-alive
connection (or over `--clients` connections at once):

- `POST /api/audits` (a small audit, 202), the hot ingest route;
- `GET /api/audits/{id}` with a key (200);
- `POST /api/audits` with an unknown key (401, an error on the way).

For each kind it prints the server's CPU per request (utime + stime from /proc, median
of the rounds), that of its event loop's thread alone (the request path without the
database work, which runs on other threads) and the thread hops per request the event
loop made (every
`ThreadPoolExecutor.submit` from the loop's thread and every `SyncToAsync` call, counted
by a bench-only `sitecustomize` put on the server's PYTHONPATH). The CPU figure is
repeatable on a shared machine where a wall-clock rate is not; the hop counts are exact.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
TMP = Path(tempfile.mkdtemp(prefix="bench-request-path-"))
DB_PATH = TMP / "bench.sqlite3"
os.environ["DATABASE_URL"] = f"sqlite:///{DB_PATH}"
os.environ["AUDITOR_TEST_DB"] = str(TMP / "unused.sqlite3")
os.environ.setdefault("SECRET_KEY", "bench-request-path-" + "k" * 50)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
sys.path.insert(0, str(BASE_DIR))

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from raw_http import read_answer  # noqa: E402  (bench/ is on the path)

from analyzers.models import ApiKey  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")

# Bench-only instrumentation of the server process (never shipped): counts the event
# loop's thread hops, written to COUNTS_FILE on SIGUSR1.
SITECUSTOMIZE = """
import os, signal, threading, json
from concurrent.futures import ThreadPoolExecutor
_counts = {"submit": 0, "sync_to_async": 0}
_names = {}
_main = threading.main_thread()
_submit = ThreadPoolExecutor.submit
def submit(self, *a, **k):
    if threading.current_thread() is _main:
        _counts["submit"] += 1
    return _submit(self, *a, **k)
ThreadPoolExecutor.submit = submit
import asgiref.sync as _s
_call = _s.SyncToAsync.__call__
async def __call__(self, *a, **k):
    _counts["sync_to_async"] += 1
    name = getattr(self.func, "__qualname__", None) or type(self.func).__name__
    _names[name] = _names.get(name, 0) + 1
    return await _call(self, *a, **k)
_s.SyncToAsync.__call__ = __call__
def _dump(*_):
    with open(os.environ["BENCH_COUNTS_FILE"], "w") as f:
        json.dump({**_counts, "by_function": _names}, f)
signal.signal(signal.SIGUSR1, _dump)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int, thread: bool = False) -> float:
    """CPU time of the process, or of its main thread only (`thread`: the event loop)."""
    path = f"/proc/{pid}/task/{pid}/stat" if thread else f"/proc/{pid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def counts(proc: subprocess.Popen, path: Path) -> dict:
    path.unlink(missing_ok=True)
    proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            time.sleep(0.02)
    raise SystemExit("the server did not write its counts")


def start(root: Path, port: int, counts_file: Path) -> subprocess.Popen:
    custom = TMP / "sitecustomize"
    custom.mkdir(exist_ok=True)
    (custom / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {
        **os.environ,
        "DEBUG": "0",
        "AUDITOR_TASK_BACKEND": "database",
        "AUDITOR_RATE_LIMIT_PER_MINUTE": "10000000",
        "BENCH_COUNTS_FILE": str(counts_file),
        "PYTHONPATH": f"{custom}:{root}",
    }
    proc = subprocess.Popen(
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
            "error",
        ],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server of {root} did not start")


def request(method: str, path: str, key: str, body: dict | None = None) -> bytes:
    payload = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
    return (head + "\r\n").encode() + payload


async def send_all(port: int, raw: bytes, n: int, expect: bytes, clients: int = 1) -> bytes:
    """`raw` n times over `clients` keep-alive connections, one request in flight on each."""
    if clients > 1:
        per = [n // clients + (i < n % clients) for i in range(clients)]
        done = await asyncio.gather(*(send_all(port, raw, k, expect) for k in per if k))
        return done[-1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    last = b""
    try:
        for _ in range(n):
            writer.write(raw)
            last = await read_answer(reader, expect)
    finally:
        writer.close()
    return last


BODY = {
    "user_input": "Which retailers use Acme?",
    "response": "Decathlon grew conversion by 50% with Acme. See https://www.acme.example.",
    "metadata": {"session": "bench"},
}


def measure(root: Path, key: str, n: int, rounds: int, clients: int) -> dict:
    port = free_port()
    counts_file = TMP / f"counts-{uuid.uuid4().hex}.json"
    proc = start(root, port, counts_file)
    try:
        post = request("POST", "/api/audits", key, BODY)
        audit_id = json.loads(asyncio.run(send_all(port, post, 1, b"202")))["id"]
        kinds = {
            "POST /api/audits (202)": (post, b"202"),
            "GET /api/audits/{id} (200)": (request("GET", f"/api/audits/{audit_id}", key), b"200"),
            "POST /api/audits, bad key (401)": (
                request("POST", "/api/audits", "ra_nope", BODY),
                b"401",
            ),
        }
        for raw, expect in kinds.values():  # warm-up
            asyncio.run(send_all(port, raw, 100, expect))
        out = {}
        for label, (raw, expect) in kinds.items():
            cpu_us, loop_us, hops = [], [], []
            for _ in range(rounds):
                h0 = counts(proc, counts_file)
                c0, l0 = cpu_seconds(proc.pid), cpu_seconds(proc.pid, thread=True)
                asyncio.run(send_all(port, raw, n, expect, clients))
                c1, l1 = cpu_seconds(proc.pid), cpu_seconds(proc.pid, thread=True)
                h1 = counts(proc, counts_file)
                cpu_us.append((c1 - c0) * 1e6 / n)
                loop_us.append((l1 - l0) * 1e6 / n)
                hops.append({k: (h1[k] - h0[k]) / n for k in ("submit", "sync_to_async")})
                by_function = {
                    name: (count - h0["by_function"].get(name, 0)) / n
                    for name, count in h1["by_function"].items()
                }
                hops[-1]["by_function"] = {k: v for k, v in by_function.items() if v >= 0.01}
            out[label] = {
                "cpu_us": statistics.median(cpu_us),
                "cpu_us_runs": cpu_us,
                "loop_us": statistics.median(loop_us),
                "loop_us_runs": loop_us,
                "hops": hops[-1],
            }
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="requests per kind and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--clients",
        type=int,
        default=1,
        help="connections at once (16: the end-to-end bench's clients)",
    )
    parser.add_argument("--before", type=Path, help="another source tree, measured first")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also the sync_to_async calls per request by function",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    _, key = ApiKey.create_key("bench", scope="read")
    trees = [("after", BASE_DIR)]
    if args.before:
        trees.insert(0, ("before", args.before.resolve()))
    results = {}
    print(
        f"== request path ({args.n} requests per kind x {args.rounds} rounds, "
        f"{args.clients} client(s), no analysis)"
    )
    for tree, root in trees:
        results[tree] = measure(root, key, args.n, args.rounds, args.clients)
        for label, r in results[tree].items():
            runs = ", ".join(f"{c:.0f}" for c in r["loop_us_runs"])
            print(
                f"  [{tree}] {label:34s} CPU us/request: server {r['cpu_us']:5.0f}, "
                f"event loop {r['loop_us']:5.0f} ({runs});  "
                f"hops/request: {r['hops']['submit']:.2f} submits, "
                f"{r['hops']['sync_to_async']:.2f} sync_to_async"
            )
            if args.verbose:
                print(f"      sync_to_async by function: {r['hops']['by_function']}")
    if args.before:
        for label in results["after"]:
            b, a = results["before"][label], results["after"][label]
            print(
                f"  {label:34s} after/before: server CPU {a['cpu_us'] / b['cpu_us']:.2f}, "
                f"event loop CPU {a['loop_us'] / b['loop_us']:.2f}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
