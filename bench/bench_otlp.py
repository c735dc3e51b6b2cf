"""OTLP ingestion benchmark: LLM spans in, until every audit is stored AND analysed.

    .venv/bin/python bench/bench_otlp.py [--spans 5000] [--batch 100] [--runs 3]
        [--before PATH] [--phoenix PYTHON | --no-phoenix]

5,000 OpenInference LLM spans (300-character input, 2 KB output), made by the real SDK and
encoded by its OTLP protobuf encoder beforehand, are POSTed to /v1/traces in batches of 100,
one request in flight (httpx, the same client for every server). For the auditor (the
shipped server of the tree, a throwaway SQLite file, the default in-process task threads):
spans/s until every audit is stored (every request answered) and until every audit is
analysed (complete or failed in the database), the server's CPU per span and peak RSS.
`--before PATH` runs the same rounds against another source tree (e.g. `git archive` of an
older commit), interleaved, for a before/after in the same run. Medians of `--runs` rounds.

Side by side, with the same client and the same bodies: Arize Phoenix 20.x (`phoenix
serve`), timed until every span is queryable (its GraphQL span count of the round's
project). Phoenix is optional: the Python given by --phoenix / $PHOENIX_PYTHON, else
/tmp/phoenix-venv (made with `python -m venv` and `pip install "arize-phoenix>=20,<21"` when
absent). Skipped, with the reason printed, when it cannot be installed or started.
Its first start compiles and imports a large tree: on a loaded 2-core machine it takes
minutes, hence the generous start timeout (--phoenix-start-timeout).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sqlite3
import statistics
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
os.environ.setdefault("SECRET_KEY", "bench-otlp-" + "k" * 50)  # `make bench` sets its own
sys.path.insert(0, str(BASE_DIR))

import django  # noqa: E402
from throughput import cpu_seconds, free_port, peak_rss_mb, wait_for_server  # noqa: E402

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

PB = {"Content-Type": "application/x-protobuf"}
PHOENIX_VENV = Path(os.environ.get("PHOENIX_VENV", "/tmp/phoenix-venv"))
PHOENIX_REQUIREMENT = "arize-phoenix>=20,<21"
TARGET_RATIO = 2.0


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
    provider = TracerProvider(resource=Resource.create(
        {"service.name": "bench-app", "openinference.project.name": project}))
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
    with httpx.Client(timeout=300) as client:
        for body in bodies:
            r = client.post(url, content=body, headers={**PB, **headers})
            if r.status_code != 200:
                raise SystemExit(f"{url}: {r.status_code} {r.text[:300]}")
    return time.perf_counter() - start


def wait_until(check, timeout: float, what: str, proc: subprocess.Popen | None = None,
               interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{what}: the server exited with status {proc.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# --- the auditor -------------------------------------------------------------------------


def _count(where: str) -> int:
    with sqlite3.connect(DB_PATH, timeout=30) as conn:
        return conn.execute(f"SELECT count(*) FROM audits_auditrun WHERE {where}").fetchone()[0]


def _clear() -> None:
    with sqlite3.connect(DB_PATH, timeout=30) as conn:
        for table in ("audits_analyzerrunrecord", "audits_annotation", "audits_traceline",
                      "audits_linkcheck", "audits_auditrun"):
            conn.execute(f"DELETE FROM {table}")


def bench_auditor(root: Path, bodies: list[bytes], n: int, key: str,
                  profile: str | None = None) -> dict:
    """One round against the shipped server of `root` (uvicorn, or daphne in older trees);
    `profile`: a py-spy raw profile of the server to that file (its figures then mean
    nothing: py-spy is the process measured)."""
    port = free_port()
    env = {**os.environ, "DEBUG": "0", "SECRET_KEY": uuid.uuid4().hex * 2,
           "DATABASE_URL": f"sqlite:///{DB_PATH}", "AUDITOR_TASK_BACKEND": "thread",
           "PYTHONPATH": str(root)}
    server = ([sys.executable, "-m", "auditor_site.serve", "--host", "127.0.0.1",
               "--port", str(port), "--no-access-log", "--log-level", "warning"]
              if (root / "auditor_site" / "serve.py").exists() else
              [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
               "auditor_site.asgi:application"])
    if profile:
        server = [str(Path(sys.executable).parent / "py-spy"), "record", "-r", "50", "-f",
                  "raw", "-o", profile, "--", *server]
    proc = subprocess.Popen(server, cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_server(f"http://127.0.0.1:{port}", proc)
        cpu0 = cpu_seconds(proc.pid)
        start = time.perf_counter()
        stored_s = send_all(f"http://127.0.0.1:{port}/v1/traces", bodies,
                            {"Authorization": f"Bearer {key}"})
        wait_until(lambda: _count("status IN ('complete', 'failed')") >= n, 1800,
                   "the analyses", proc)
        analysed_s = time.perf_counter() - start
        cpu = cpu_seconds(proc.pid) - cpu0
        rss = peak_rss_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGINT if profile else signal.SIGTERM)  # py-spy: SIGINT
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    stored, complete = _count("1"), _count("status = 'complete'")
    _clear()
    if stored != n or complete != n:
        raise SystemExit(f"{root}: expected {n} complete audits, stored {stored}, "
                         f"complete {complete}")
    return {"stored": n / stored_s, "analysed": n / analysed_s, "cpu_ms": cpu * 1000 / n,
            "rss_mb": rss}


# --- Arize Phoenix (optional) ------------------------------------------------------------

PROJECTS = "query { projects { edges { node { name recordCount } } } }"


def phoenix_python(args) -> tuple[str | None, str]:
    """(python, version) of a Phoenix install, installing one into PHOENIX_VENV if needed;
    (None, why) when there is none."""
    if args.no_phoenix:
        return None, "--no-phoenix"
    python = args.phoenix or str(PHOENIX_VENV / "bin" / "python")
    if not args.phoenix and not Path(python).exists():
        print(f"  phoenix: installing {PHOENIX_REQUIREMENT} into {PHOENIX_VENV} ...", flush=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(PHOENIX_VENV)], check=True,
                           capture_output=True, timeout=300)
            subprocess.run([python, "-m", "pip", "install", "-q", PHOENIX_REQUIREMENT],
                           check=True, capture_output=True, timeout=1800)
        except (subprocess.SubprocessError, OSError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            shutil.rmtree(PHOENIX_VENV, ignore_errors=True)
            return None, f"could not install {PHOENIX_REQUIREMENT}: {exc} {detail[-300:]!r}"
    try:
        version = subprocess.run(
            [python, "-c", "from importlib.metadata import version; "
                           "print(version('arize-phoenix'))"],
            check=True, capture_output=True, text=True, timeout=120).stdout.strip()
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
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PHOENIX_", "OTEL_")) and k != "DATABASE_URL"}
    env.update({
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
    })
    return env


def _tail(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-3:])[-400:]


def bench_phoenix(python: str, rounds: list[tuple[str, list[bytes]]], n: int,
                  start_timeout: float) -> dict:
    """Each round's bodies to one Phoenix server, timed until the round's project holds
    all `n` spans."""
    workdir = tempfile.mkdtemp(prefix="phoenix-bench-")
    log = Path(workdir) / "phoenix.log"
    port, grpc_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen([python, "-m", "phoenix.server.main", "serve"],
                                env=phoenix_env(workdir, port, grpc_port), cwd=workdir,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        t0 = time.monotonic()
        try:
            wait_until(lambda: _phoenix_counts(base) is not None, start_timeout,
                       "Phoenix to start", proc, interval=0.5)
        except SystemExit as exc:
            raise SystemExit(f"{exc} (log: {_tail(log)})") from None
        started_s = time.monotonic() - t0
        rates = []
        for project, bodies in rounds:
            start = time.perf_counter()
            send_all(base + "/v1/traces", bodies, {})
            # Polled every 0.25 s: each count is a query Phoenix runs (a 50 ms poll took
            # a visible share of its CPU).
            wait_until(lambda p=project: (_phoenix_counts(base) or {}).get(p, 0) >= n, 1800,
                       "Phoenix to store the spans", proc, interval=0.25)
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
    return {"queryable": rates, "rss_mb": rss, "start_s": started_s}


# --- the run -----------------------------------------------------------------------------


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):7.0f}/s (runs {', '.join(f'{v:.0f}' for v in values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3, help="rounds per server (medians)")
    parser.add_argument("--before", type=Path, help="another source tree, same rounds")
    parser.add_argument("--before-label", default="before", help="its name in the output")
    parser.add_argument("--phoenix", default=os.environ.get("PHOENIX_PYTHON", ""),
                        help="Python of an arize-phoenix install (default: /tmp/phoenix-venv)")
    parser.add_argument("--no-phoenix", action="store_true")
    parser.add_argument("--phoenix-runs", type=int, help="rounds on Phoenix (default --runs)")
    parser.add_argument("--phoenix-start-timeout", type=float, default=900)
    parser.add_argument("--no-auditor", action="store_true", help="Phoenix alone")
    parser.add_argument("--profile", help="py-spy raw profile of the (after) server, to this file")
    args = parser.parse_args()
    n = args.spans
    projects = [f"bench-{uuid.uuid4().hex[:8]}"
                for _ in range(max(args.runs, args.phoenix_runs or 0))]
    rounds = [(p, make_bodies(n, args.batch, p, seed=7 + r)) for r, p in enumerate(projects)]
    mb = sum(map(len, rounds[0][1])) / 1e6
    print(f"OTLP ingest: {n} LLM spans (300-char input, 2 KB output), {len(rounds[0][1])} "
          f"protobuf requests of {args.batch} ({mb:.1f} MB), one in flight; "
          f"{args.runs} round(s) per server, medians", flush=True)

    trees = [] if args.no_auditor else [("after", BASE_DIR)]
    if args.before and trees:
        trees.insert(0, (args.before_label, args.before.resolve()))
    ours: dict[str, list[dict]] = {label: [] for label, _ in trees}
    try:
        call_command("migrate", verbosity=0, interactive=False)
        _, key = ApiKey.create_key("bench", scope="ingest", rate_limit_per_minute=1_000_000)
        for _, bodies in rounds[:args.runs]:
            for label, root in trees:  # interleaved: the machine's load hits both alike
                profile = args.profile if label == "after" else None
                r = bench_auditor(root, bodies, n, key, profile)
                ours[label].append(r)
                print(f"    round {len(ours[label])} [{label}]: stored {r['stored']:.0f}/s, "
                      f"analysed {r['analysed']:.0f}/s", flush=True)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{DB_PATH}{suffix}").unlink(missing_ok=True)
    for label, _ in trees:
        rs = ours[label]
        print(f"  auditor [{label:6s}] stored   {_fmt([r['stored'] for r in rs])}")
        print(f"  auditor [{label:6s}] analysed {_fmt([r['analysed'] for r in rs])}  "
              f"server CPU {statistics.median(r['cpu_ms'] for r in rs):.1f} ms/span, "
              f"peak RSS {max(r['rss_mb'] for r in rs):.0f} MB", flush=True)
    after = statistics.median(r["analysed"] for r in ours["after"]) if trees else 0.0
    if args.before and trees:
        before = statistics.median(r["analysed"] for r in ours[args.before_label])
        print(f"  after / {args.before_label} (analysed): x{after / before:.2f}")

    python, version = phoenix_python(args)
    if python is None:
        print(f"  phoenix: skipped ({version})")
        return
    try:
        phoenix_runs = args.runs if args.phoenix_runs is None else args.phoenix_runs
        theirs = bench_phoenix(python, rounds[:phoenix_runs], n, args.phoenix_start_timeout)
    except SystemExit as exc:  # Phoenix is optional: say why, keep the figures above
        print(f"  phoenix: skipped ({exc})")
        return
    phoenix = statistics.median(theirs["queryable"])
    print(f"  phoenix {version} queryable {_fmt(theirs['queryable'])}  (no analysis; "
          f"started in {theirs['start_s']:.0f} s), peak RSS {theirs['rss_mb']:.0f} MB")
    print(f"  side by side: auditor stored+analysed {after:.0f} spans/s vs Phoenix queryable "
          f"{phoenix:.0f} spans/s = {after / phoenix:.2f}x (target >= {TARGET_RATIO:.0f}x: "
          f"{'ok' if after / phoenix >= TARGET_RATIO else 'MISSED'}); peak RSS "
          f"{max((r['rss_mb'] for r in ours.get('after', [])), default=0):.0f} MB vs "
          f"{theirs['rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()
