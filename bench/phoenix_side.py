"""Arize Phoenix side by side: the OTLP spans both servers get, and Phoenix's ingest timed.

Used by bench_otlp.py (spans through /v1/traces, both servers) and bench_api.py
`--phoenix` (our end-to-end rate beside Phoenix's for the same count of spans of the
same shape). Phoenix is optional: the Python given (`--phoenix` / $PHOENIX_PYTHON), else
/tmp/phoenix-venv, made with `python -m venv` and `pip install "arize-phoenix>=20,<21"`
when absent; skipped, with the reason printed, when it cannot be installed or started.
Its first start compiles and imports a large tree: on a loaded 2-core machine it takes
minutes, hence the generous start timeout.
"""

from __future__ import annotations

import os
import random
import shutil
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from throughput import free_port, peak_rss_mb

PB = {"Content-Type": "application/x-protobuf"}
PHOENIX_VENV = Path(os.environ.get("PHOENIX_VENV", "/tmp/phoenix-venv"))
PHOENIX_REQUIREMENT = "arize-phoenix>=20,<21"


def words(rng: random.Random, n_chars: int) -> str:
    out, size = [], 0
    while size < n_chars:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9)))
        out.append(word)
        size += len(word) + 1
    text = " ".join(out)[: n_chars - 1]
    return text + "."


def make_bodies(n: int, batch: int, project: str, seed: int) -> list[bytes]:
    """`n` OpenInference LLM spans by the SDK, protobuf-encoded in batches of `batch`.

    New trace ids every call; `project` is the Phoenix project (a resource attribute)."""
    rng = random.Random(seed)
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "bench-app", "openinference.project.name": project}
        )
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for i in range(n):
        question = words(rng, 300)
        answer = "\n\n".join(words(rng, 500) for _ in range(4))[:2048]
        with tracer.start_as_current_span("ChatCompletion") as span:
            span.set_attributes(
                {
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
                }
            )
    provider.shutdown()
    spans = list(memory.get_finished_spans())
    return [encode_spans(spans[i : i + batch]).SerializeToString() for i in range(0, n, batch)]


def send_all(url: str, bodies: list[bytes], headers: dict[str, str]) -> float:
    """POST every body in order, one request in flight; the seconds it took."""
    start = time.perf_counter()
    with httpx.Client(timeout=300) as client:
        for body in bodies:
            r = client.post(url, content=body, headers={**PB, **headers})
            if r.status_code != 200:
                raise SystemExit(f"{url}: {r.status_code} {r.text[:300]}")
    return time.perf_counter() - start


def wait_until(
    check, timeout: float, what: str, proc: subprocess.Popen | None = None, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{what}: the server exited with status {proc.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# --- Arize Phoenix (optional) ------------------------------------------------------------

PROJECTS = "query { projects { edges { node { name recordCount } } } }"


def phoenix_python(given: str = "") -> tuple[str | None, str]:
    """(python, version) of a Phoenix install: `given`, else PHOENIX_VENV's, installed
    there if needed; (None, why) when there is none."""
    python = given or str(PHOENIX_VENV / "bin" / "python")
    if not given and not Path(python).exists():
        print(f"  phoenix: installing {PHOENIX_REQUIREMENT} into {PHOENIX_VENV} ...", flush=True)
        try:
            subprocess.run(
                [sys.executable, "-m", "venv", str(PHOENIX_VENV)],
                check=True,
                capture_output=True,
                timeout=300,
            )
            subprocess.run(
                [python, "-m", "pip", "install", "-q", PHOENIX_REQUIREMENT],
                check=True,
                capture_output=True,
                timeout=1800,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            shutil.rmtree(PHOENIX_VENV, ignore_errors=True)
            return None, f"could not install {PHOENIX_REQUIREMENT}: {exc} {detail[-300:]!r}"
    try:
        version = subprocess.run(
            [
                python,
                "-c",
                "from importlib.metadata import version; print(version('arize-phoenix'))",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"{python} has no arize-phoenix: {exc}"
    return python, version


def _phoenix_counts(base: str) -> dict[str, int] | None:
    """Spans per project (GraphQL `recordCount`); None while Phoenix does not answer."""
    try:
        r = httpx.post(base + "/graphql", json={"query": PROJECTS}, timeout=10)
        edges = r.json()["data"]["projects"]["edges"]
        return {e["node"]["name"]: e["node"]["recordCount"] for e in edges}
    except (httpx.HTTPError, KeyError, TypeError, ValueError):
        return None


def phoenix_env(workdir: str, port: int, grpc_port: int) -> dict[str, str]:
    """A local, offline Phoenix: its own port, SQLite file, no telemetry or downloads."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PHOENIX_", "OTEL_")) and k != "DATABASE_URL"
    }
    env.update(
        {
            "PHOENIX_WORKING_DIR": workdir,
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(grpc_port),
            "PHOENIX_SQL_DATABASE_URL": f"sqlite:///{workdir}/phoenix.db",
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",  # no fonts, pixels or WASM download
            "PHOENIX_ENABLE_MCP_SERVER": "false",
            "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
            "PHOENIX_LOG_MIGRATIONS": "false",
            "DO_NOT_TRACK": "1",
        }
    )
    return env


def _tail(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-3:])[-400:]


def bench_phoenix(
    python: str, rounds: list[tuple[str, list[bytes]]], n: int, start_timeout: float
) -> dict:
    """Each round's bodies to one Phoenix server, timed until every request is answered
    (`accepted`, spans/s) and until the round's project holds all `n` spans
    (`queryable`)."""
    workdir = tempfile.mkdtemp(prefix="phoenix-bench-")
    log = Path(workdir) / "phoenix.log"
    port, grpc_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [python, "-m", "phoenix.server.main", "serve"],
            env=phoenix_env(workdir, port, grpc_port),
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        t0 = time.monotonic()
        try:
            wait_until(
                lambda: _phoenix_counts(base) is not None,
                start_timeout,
                "Phoenix to start",
                proc,
                interval=0.5,
            )
        except SystemExit as exc:
            raise SystemExit(f"{exc} (log: {_tail(log)})") from None
        started_s = time.monotonic() - t0
        rates, accepted = [], []
        for project, bodies in rounds:
            start = time.perf_counter()
            accepted.append(n / send_all(base + "/v1/traces", bodies, {}))
            # Polled every 0.25 s: each count is a query Phoenix runs (a 50 ms poll took
            # a visible share of its CPU).
            wait_until(
                lambda p=project: (_phoenix_counts(base) or {}).get(p, 0) >= n,
                1800,
                "Phoenix to store the spans",
                proc,
                interval=0.25,
            )
            rates.append(n / (time.perf_counter() - start))
            print(f"    round {len(rates)} [phoenix]: queryable {rates[-1]:.0f}/s", flush=True)
        rss = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"queryable": rates, "accepted": accepted, "rss_mb": rss, "start_s": started_s}
