"""What one large OTLP/JSON export costs the shipped server: CPU and memory growth.

    .venv/bin/python bench/bench_otlp_json.py [--mb 30] [--runs 3] [--before PATH]

An export of GenAI chat spans (16 KB answer, 20 small attributes each), made by the
OpenTelemetry SDK and encoded by its OTLP/JSON encoder, gzip-compressed (so that it passes
the 8 MB limit on the wire), is POSTed once to /v1/traces of a fresh server (the tree's
`auditor_site.serve`, a throwaway SQLite file, the thread task backend); then one at the
size of the JSON limit (what an accepted export can cost). Per round: the answer's status,
the server's CPU seconds for the request, and its memory growth (peak RSS after minus RSS
before). `--before PATH` runs the same rounds against another source tree (e.g. `git
archive` of an older commit), interleaved. Medians of `--runs` rounds.
"""

from __future__ import annotations

import argparse
import gzip
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

BASE_DIR = Path(__file__).resolve().parents[1]
BENCH_DIR = BASE_DIR / "var" / "bench"
BENCH_DIR.mkdir(parents=True, exist_ok=True)
DB_PATH = BENCH_DIR / f"bench-otlp-json-{os.getpid()}.sqlite3"
os.environ["DATABASE_URL"] = f"sqlite:///{DB_PATH}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
os.environ.setdefault("SECRET_KEY", "bench-otlp-json-" + "k" * 50)
sys.path.insert(0, str(BASE_DIR))

import django  # noqa: E402
from opentelemetry.exporter.otlp.json.common._internal.trace_encoder import (  # noqa: E402
    encode_spans,
)
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from throughput import cpu_seconds, free_port, peak_rss_mb, wait_for_server  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from analyzers.models import ApiKey  # noqa: E402

DEFAULT_JSON_LIMIT = 4_000_000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def json_export(size: int, seed: str) -> bytes:
    """An OTLP/JSON export of about `size` bytes (before gzip)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    answer = ("Acme ranks results by relevance and business rules. " * 400)[:16_000]
    for i in range(max(1, size // 17_500)):  # ~17.5 KB per span: under 2,000 spans per export
        with tracer.start_as_current_span("chat gpt-4o-mini") as span:
            span.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.input.messages": f'[{{"role": "user", "content": "{seed} {i}?"}}]',
                    "gen_ai.output.messages": f'[{{"role": "assistant", "content": "{answer}"}}]',
                    **{f"app.attribute_{j}": j for j in range(20)},
                }
            )
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).to_json().encode()


def one_post(root: Path, body: bytes, key: str) -> dict:
    """A fresh server of `root`, one gzip OTLP/JSON export: status, CPU s, RSS growth MB."""
    port = free_port()
    env = {
        **os.environ,
        "DEBUG": "0",
        "SECRET_KEY": uuid.uuid4().hex * 2,
        "DATABASE_URL": f"sqlite:///{DB_PATH}",
        "AUDITOR_TASK_BACKEND": "thread",
        "PYTHONPATH": str(root),
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
            "warning",
        ],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_server(f"http://127.0.0.1:{port}", proc)
        time.sleep(1.0)  # start-up work settles
        cpu0, rss0 = cpu_seconds(proc.pid), rss_mb(proc.pid)
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/traces",
            content=gzip.compress(body),
            timeout=600,
            headers={
                "Authorization": f"Bearer {key}",
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
            },
        )
        return {
            "status": r.status_code,
            "cpu_s": cpu_seconds(proc.pid) - cpu0,
            "rss_mb": peak_rss_mb(proc.pid) - rss0,
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=30.0, help="the large export, in MB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another source tree, same rounds")
    args = parser.parse_args()
    bodies = {
        "large": json_export(int(args.mb * 1e6), "large"),
        "at the limit": json_export(DEFAULT_JSON_LIMIT - 200_000, "limit"),
    }
    print(
        "OTLP/JSON exports, gzip: "
        + ", ".join(
            f"{name} {len(b) / 1e6:.1f} MB ({len(gzip.compress(b)) / 1e6:.2f} MB gzip)"
            for name, b in bodies.items()
        ),
        flush=True,
    )
    trees = [("after", BASE_DIR)]
    if args.before:
        trees.insert(0, ("before", args.before.resolve()))
    results: dict[tuple[str, str], list[dict]] = {}
    try:
        call_command("migrate", verbosity=0, interactive=False)
        _, key = ApiKey.create_key("bench", scope="ingest", rate_limit_per_minute=1_000_000)
        for _ in range(args.runs):
            for name, body in bodies.items():
                for label, root in trees:  # interleaved: the machine's load hits both alike
                    r = one_post(root, body, key)
                    results.setdefault((label, name), []).append(r)
                    print(
                        f"    [{label:6s}] {name}: {r['status']}, {r['cpu_s']:.2f} s CPU, "
                        f"+{r['rss_mb']:.0f} MB",
                        flush=True,
                    )
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{DB_PATH}{suffix}").unlink(missing_ok=True)
    for (label, name), rs in results.items():
        print(
            f"  [{label:6s}] {name:12s} status {rs[-1]['status']}, server CPU "
            f"{statistics.median(r['cpu_s'] for r in rs):.2f} s, memory "
            f"+{statistics.median(r['rss_mb'] for r in rs):.0f} MB (medians of {len(rs)})"
        )


if __name__ == "__main__":
    main()
