"""OTLP ingestion benchmark: LLM spans in, until every audit is stored AND analysed.

    .venv/bin/python bench/bench_otlp.py [--spans 5000] [--batch 100] [--phoenix PYTHON]

5,000 OpenInference LLM spans (300-character input, 2 KB output), made by the real SDK and
encoded by its OTLP protobuf encoder beforehand, are POSTed to /v1/traces of a daphne server
(SQLite, the default in-process task threads) in batches of 100, one request in flight.
Prints spans/s until every audit is stored, and until every audit is analysed (polled until
none is pending or running), and the server's peak RSS.

Optional, side by side with the same client and bodies: Arize Phoenix (`phoenix serve`) from
the Python given by --phoenix or $PHOENIX_PYTHON (e.g. a throwaway venv:
`python3.12 -m venv /tmp/phoenix-venv && /tmp/phoenix-venv/bin/pip install arize-phoenix`),
timed until all spans are queryable (its GraphQL span count). Skipped when not given.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import string
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
BENCH_DIR = BASE_DIR / "var" / "bench"
BENCH_DIR.mkdir(parents=True, exist_ok=True)
DB_PATH = BENCH_DIR / f"bench-otlp-{os.getpid()}.sqlite3"
os.environ["DATABASE_URL"] = f"sqlite:///{DB_PATH}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
sys.path.insert(0, str(BASE_DIR))

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.core.management import call_command  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from analyzers.models import ApiKey  # noqa: E402
from audits.models import AuditRun  # noqa: E402

PB = {"Content-Type": "application/x-protobuf"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def words(rng: random.Random, n_chars: int) -> str:
    out, size = [], 0
    while size < n_chars:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9)))
        out.append(word)
        size += len(word) + 1
    text = " ".join(out)[: n_chars - 1]
    return text + "."


def make_bodies(n: int, batch: int) -> list[bytes]:
    """`n` OpenInference LLM spans by the SDK, protobuf-encoded in batches of `batch`."""
    rng = random.Random(7)
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-app"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for i in range(n):
        question = words(rng, 300)
        answer = "\n\n".join(words(rng, 500) for _ in range(4))[:2048]
        with tracer.start_as_current_span("ChatCompletion") as span:
            span.set_attributes({
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o-mini",
                "llm.provider": "openai",
                "llm.token_count.prompt": 80,
                "llm.token_count.completion": 400,
                "llm.token_count.total": 480,
                "input.value": question,
                "output.value": answer,
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": question,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": answer,
                "bench.index": i,
            })
    provider.shutdown()
    spans = list(memory.get_finished_spans())
    return [encode_spans(spans[i:i + batch]).SerializeToString() for i in range(0, n, batch)]


def send_all(url: str, bodies: list[bytes], headers: dict[str, str]) -> float:
    """POST every body in order, one request in flight; the seconds it took."""
    start = time.perf_counter()
    with httpx.Client(timeout=120) as client:
        for body in bodies:
            r = client.post(url, content=body, headers={**PB, **headers})
            if r.status_code != 200:
                raise SystemExit(f"{url}: {r.status_code} {r.text[:300]}")
    return time.perf_counter() - start


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


# --- the auditor -------------------------------------------------------------------------


def bench_auditor(bodies: list[bytes], n: int) -> dict:
    call_command("migrate", verbosity=0, interactive=False)
    _, key = ApiKey.create_key("bench", scope="ingest", rate_limit_per_minute=1_000_000)
    port = free_port()
    env = {**os.environ, "DEBUG": "0", "SECRET_KEY": uuid.uuid4().hex * 2,
           "PYTHONPATH": str(BASE_DIR), "AUDITOR_TASK_BACKEND": "thread"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "auditor_site.asgi:application"],
        cwd=BASE_DIR, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(base + "/accounts/login/"), 30, "daphne")
        start = time.perf_counter()
        sent = send_all(base + "/v1/traces", bodies, {"Authorization": f"Bearer {key}"})
        stored = AuditRun.objects.count()
        wait_until(
            lambda: not AuditRun.objects.filter(status__in=["pending", "running"]).exists(),
            1800, "the analyses",
        )
        analysed = time.perf_counter() - start
        complete = AuditRun.objects.filter(status="complete").count()
        rss = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)
    if stored != n:
        raise SystemExit(f"expected {n} audits, stored {stored}")
    return {"sent_s": sent, "analysed_s": analysed, "complete": complete, "rss_mb": rss}


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
        return True
    except httpx.HTTPError:
        return False


# --- Arize Phoenix (optional) ------------------------------------------------------------

SPAN_COUNT = "query { projects { edges { node { name recordCount } } } }"


def _phoenix_count(base: str) -> int:
    try:
        r = httpx.post(base + "/graphql", json={"query": SPAN_COUNT}, timeout=5)
        edges = r.json()["data"]["projects"]["edges"]
        return sum(e["node"]["recordCount"] for e in edges)
    except (httpx.HTTPError, KeyError, TypeError, ValueError):
        return -1


def bench_phoenix(python: str, bodies: list[bytes], n: int) -> dict:
    workdir = tempfile.mkdtemp(prefix="phoenix-bench-")
    port, grpc_port = free_port(), free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": workdir, "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_TELEMETRY_ENABLED": "false", "DO_NOT_TRACK": "1"}
    env.pop("DATABASE_URL", None)
    proc = subprocess.Popen([python, "-m", "phoenix.server.main", "serve"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _phoenix_count(base) >= 0, 120, "phoenix")
        start = time.perf_counter()
        sent = send_all(base + "/v1/traces", bodies, {})
        wait_until(lambda: _phoenix_count(base) >= n, 1800, "phoenix spans")
        queryable = time.perf_counter() - start
        rss = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"sent_s": sent, "queryable_s": queryable, "rss_mb": rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--phoenix", default=os.environ.get("PHOENIX_PYTHON", ""))
    args = parser.parse_args()
    bodies = make_bodies(args.spans, args.batch)
    mb = sum(map(len, bodies)) / 1e6
    print(f"OTLP ingest: {args.spans} LLM spans (300-char input, 2 KB output), "
          f"{len(bodies)} protobuf requests of {args.batch} ({mb:.1f} MB), one in flight")
    try:
        ours = bench_auditor(bodies, args.spans)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{DB_PATH}{suffix}").unlink(missing_ok=True)
    n = args.spans
    print(f"  auditor: stored      {n / ours['sent_s']:8.0f} spans/s  ({ours['sent_s']:.1f} s)")
    print(f"  auditor: analysed    {n / ours['analysed_s']:8.0f} spans/s  "
          f"({ours['analysed_s']:.1f} s, {ours['complete']} complete)")
    print(f"  auditor: peak RSS    {ours['rss_mb']:8.0f} MB")
    if not args.phoenix:
        print("  phoenix: skipped (pass --phoenix /path/to/venv/bin/python or set PHOENIX_PYTHON)")
        return
    try:
        theirs = bench_phoenix(args.phoenix, bodies, n)
    except SystemExit as exc:  # Phoenix is optional: say why, keep the figures above
        print(f"  phoenix: skipped ({exc})")
        return
    print(f"  phoenix: queryable   {n / theirs['queryable_s']:8.0f} spans/s  "
          f"({theirs['queryable_s']:.1f} s, no analysis)")
    print(f"  phoenix: peak RSS    {theirs['rss_mb']:8.0f} MB")
    ratio = theirs["queryable_s"] / ours["analysed_s"]
    print(f"  ratio: auditor analysed vs phoenix queryable  {ratio:.2f}x (target >= 2x)")


if __name__ == "__main__":
    main()
