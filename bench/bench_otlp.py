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
import signal
import sqlite3
import statistics
import subprocess
import sys
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
from phoenix_side import (  # noqa: E402
    bench_phoenix,
    make_bodies,
    phoenix_python,
    send_all,
    wait_until,
)
from throughput import (  # noqa: E402
    clear_stored,
    cpu_seconds,
    free_port,
    peak_rss_mb,
    wait_for_server,
)

django.setup()

from django.core.management import call_command  # noqa: E402

from analyzers.models import ApiKey  # noqa: E402

TARGET_RATIO = 2.0


# --- the auditor -------------------------------------------------------------------------


def _count(where: str) -> int:
    with sqlite3.connect(DB_PATH, timeout=30) as conn:
        return conn.execute(f"SELECT count(*) FROM audits_auditrun WHERE {where}").fetchone()[0]


def _clear() -> None:
    with sqlite3.connect(DB_PATH, timeout=30) as conn:
        clear_stored(conn)


def bench_auditor(
    root: Path, bodies: list[bytes], n: int, key: str, profile: str | None = None
) -> dict:
    """One round against the shipped server of `root` (uvicorn, or daphne in older trees);
    `profile`: a py-spy raw profile of the server to that file (its figures then mean
    nothing: py-spy is the process measured)."""
    port = free_port()
    env = {
        **os.environ,
        "DEBUG": "0",
        "SECRET_KEY": uuid.uuid4().hex * 2,
        "DATABASE_URL": f"sqlite:///{DB_PATH}",
        "AUDITOR_TASK_BACKEND": "thread",
        "PYTHONPATH": str(root),
    }
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
    if profile:
        server = [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "-r",
            "50",
            "-f",
            "raw",
            "-o",
            profile,
            "--",
            *server,
        ]
    proc = subprocess.Popen(
        server, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_server(f"http://127.0.0.1:{port}", proc)
        cpu0 = cpu_seconds(proc.pid)
        start = time.perf_counter()
        stored_s = send_all(
            f"http://127.0.0.1:{port}/v1/traces", bodies, {"Authorization": f"Bearer {key}"}
        )
        wait_until(
            lambda: _count("status IN ('complete', 'failed')") >= n, 1800, "the analyses", proc
        )
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
        raise SystemExit(
            f"{root}: expected {n} complete audits, stored {stored}, complete {complete}"
        )
    return {
        "stored": n / stored_s,
        "analysed": n / analysed_s,
        "cpu_ms": cpu * 1000 / n,
        "rss_mb": rss,
    }


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
    parser.add_argument(
        "--phoenix",
        default=os.environ.get("PHOENIX_PYTHON", ""),
        help="Python of an arize-phoenix install (default: /tmp/phoenix-venv)",
    )
    parser.add_argument("--no-phoenix", action="store_true")
    parser.add_argument("--phoenix-runs", type=int, help="rounds on Phoenix (default --runs)")
    parser.add_argument("--phoenix-start-timeout", type=float, default=900)
    parser.add_argument("--no-auditor", action="store_true", help="Phoenix alone")
    parser.add_argument("--profile", help="py-spy raw profile of the (after) server, to this file")
    args = parser.parse_args()
    n = args.spans
    projects = [
        f"bench-{uuid.uuid4().hex[:8]}" for _ in range(max(args.runs, args.phoenix_runs or 0))
    ]
    rounds = [(p, make_bodies(n, args.batch, p, seed=7 + r)) for r, p in enumerate(projects)]
    mb = sum(map(len, rounds[0][1])) / 1e6
    print(
        f"OTLP ingest: {n} LLM spans (300-char input, 2 KB output), {len(rounds[0][1])} "
        f"protobuf requests of {args.batch} ({mb:.1f} MB), one in flight; "
        f"{args.runs} round(s) per server, medians",
        flush=True,
    )

    trees = [] if args.no_auditor else [("after", BASE_DIR)]
    if args.before and trees:
        trees.insert(0, (args.before_label, args.before.resolve()))
    ours: dict[str, list[dict]] = {label: [] for label, _ in trees}
    try:
        call_command("migrate", verbosity=0, interactive=False)
        _, key = ApiKey.create_key("bench", scope="ingest", rate_limit_per_minute=1_000_000)
        for _, bodies in rounds[: args.runs]:
            for label, root in trees:  # interleaved: the machine's load hits both alike
                profile = args.profile if label == "after" else None
                r = bench_auditor(root, bodies, n, key, profile)
                ours[label].append(r)
                print(
                    f"    round {len(ours[label])} [{label}]: stored {r['stored']:.0f}/s, "
                    f"analysed {r['analysed']:.0f}/s",
                    flush=True,
                )
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{DB_PATH}{suffix}").unlink(missing_ok=True)
    for label, _ in trees:
        rs = ours[label]
        print(f"  auditor [{label:6s}] stored   {_fmt([r['stored'] for r in rs])}")
        print(
            f"  auditor [{label:6s}] analysed {_fmt([r['analysed'] for r in rs])}  "
            f"server CPU {statistics.median(r['cpu_ms'] for r in rs):.1f} ms/span, "
            f"peak RSS {max(r['rss_mb'] for r in rs):.0f} MB",
            flush=True,
        )
    after = statistics.median(r["analysed"] for r in ours["after"]) if trees else 0.0
    if args.before and trees:
        before = statistics.median(r["analysed"] for r in ours[args.before_label])
        print(f"  after / {args.before_label} (analysed): x{after / before:.2f}")

    python, version = (None, "--no-phoenix") if args.no_phoenix else phoenix_python(args.phoenix)
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
    print(
        f"  phoenix {version} queryable {_fmt(theirs['queryable'])}  (no analysis; "
        f"started in {theirs['start_s']:.0f} s), peak RSS {theirs['rss_mb']:.0f} MB"
    )
    print(
        f"  side by side: auditor stored+analysed {after:.0f} spans/s vs Phoenix queryable "
        f"{phoenix:.0f} spans/s = {after / phoenix:.2f}x (target >= {TARGET_RATIO:.0f}x: "
        f"{'ok' if after / phoenix >= TARGET_RATIO else 'MISSED'}); peak RSS "
        f"{max((r['rss_mb'] for r in ours.get('after', [])), default=0):.0f} MB vs "
        f"{theirs['rss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
