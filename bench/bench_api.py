"""API benchmarks: ingest, end to end, export and list, against the server (uvicorn) on 127.0.0.1 with SQLite.

    .venv/bin/python bench/bench_api.py [--rows 100000] [--ingest 2000] [--e2e 5000]
        [--rounds 3] [--before PATH] [--e2e-only] [--phoenix]

- ingest: POST /api/audits (wait=false) audits/s through HTTP, against a raw ORM bulk
  insert of the same rows in the same run (target >= 300/s);
- end to end (bench/throughput.py): accepted/s and analysed-and-stored/s (an audit counts
  once it is complete or failed in the database) for batches of 100 (one request in
  flight) and 16 clients posting single audits, on the default thread backend and with
  `db_worker` processes, and on the thread backend with analysis processes
  (AUDITOR_ANALYSIS_PROCESSES); server CPU per audit (its analysis processes included)
  against the engine's own CPU per audit (same shape, measured in this process right
  before and right after each scenario, the mean of the two), peak RSS (the
  server's with its children); asserts every accepted audit is complete. The clock starts
  after one audit went through and the processes are quiet (the start's CPU is printed
  beside the run: analysis processes loading Django and the registry are not per audit).
  Each scenario runs `--rounds` times (3), each round with its own baseline around it;
  the figures and verdicts are the rounds' medians (one round's ratio moved by a fifth
  with the machine's speed), each round's figures printed below them.
  `--scenarios WORD...` runs only the scenarios whose label contains a word.
  `--before PATH` runs the same scenarios against another source tree (e.g. a
  `git worktree` of an older commit) for a before/after in the same run;
  `--phoenix` runs Arize Phoenix's ingest of as many LLM spans of the same shape the
  same way (batches of 100, one request in flight; bench/phoenix_side.py, which installs
  it into a throwaway venv or skips saying why): its accepted/s and queryable/s beside
  the shipped server's;
- export: GET /api/audits/export?format=jsonl over N stored audits: rows/s (target
  >= 20,000) and the server's peak RSS for N/10 and N rows (must not grow with rows);
- list: GET /api/audits with filters: p50 latency (target < 50 ms) and SQL queries per
  request for page sizes 10 and 100 (constant).

Uses its own SQLite file under var/bench/ (DATABASE_URL for the server subprocess).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
BENCH_DIR = BASE_DIR / "var" / "bench"
BENCH_DIR.mkdir(parents=True, exist_ok=True)
DB_PATH = Path(os.environ.get("BENCH_DB", BENCH_DIR / f"bench-api-{os.getpid()}.sqlite3"))
os.environ["DATABASE_URL"] = f"sqlite:///{DB_PATH}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
sys.path.insert(0, str(BASE_DIR))

import django  # noqa: E402
from raw_http import read_answer  # noqa: E402  (bench/ is on the path)

django.setup()

import httpx  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from analyzers.models import ApiKey  # noqa: E402
from audits.models import AnalyzerRunRecord, Annotation, AuditRun  # noqa: E402

BODY = {
    "user_input": "Which retailers use Acme?",
    "response": "Decathlon grew conversion by 50% with Acme. See https://www.acme.example.",
    "sources": [{"title": "Case study", "url": "https://www.acme.example/c", "text": "x"}],
    "metadata": {"session": "bench"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def start_server(env_extra: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    # A production-like server: DEBUG off (no SQL recording), a throwaway secret key.
    env = {
        **os.environ,
        "DEBUG": "0",
        "SECRET_KEY": uuid.uuid4().hex * 2,
        **env_extra,
        "PYTHONPATH": str(BASE_DIR),
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
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/api/openapi.json", timeout=1)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


# --- ingest ------------------------------------------------------------------------------

INGEST_CONNECTIONS = 8
INGEST_RUNS = 3


def bench_ingest(n: int, key: str) -> dict:
    # Baseline: the same rows by a raw ORM bulk insert.
    rows = [
        AuditRun(
            user_input=BODY["user_input"],
            response=BODY["response"],
            sources=BODY["sources"],
            metadata=BODY["metadata"],
            request_hash="x" * 64,
            config_snapshot={"threshold": 0.3},
        )
        for _ in range(n)
    ]
    t0 = time.perf_counter()
    with transaction.atomic():
        AuditRun.objects.bulk_create(rows, batch_size=1000)
    bulk_rate = n / (time.perf_counter() - t0)
    AuditRun.objects.all().delete()

    out: dict = {"bulk_orm_per_s": bulk_rate}
    # "database": django-tasks-db queue, analysed later by `db_worker` processes (none run
    # here): the ingest path alone. Several runs, the median is reported.
    proc, url = start_server({"AUDITOR_TASK_BACKEND": "database"})
    try:
        rates = []
        for _ in range(INGEST_RUNS):
            rates.append(_ingest_run(url, key, n, "/api/audits", 1))
            AuditRun.objects.all().delete()
        out["database"] = {"runs": rates, "median": statistics.median(rates)}
        batch = _ingest_run(url, key, n, "/api/audits/batch", 100)
        AuditRun.objects.all().delete()
        out["database_batch100"] = {"runs": [batch], "median": batch}
    finally:
        stop(proc)
    return out


def _ingest_run(url: str, key: str, n: int, path: str, batch: int) -> float:
    """Audits accepted per second by keep-alive HTTP/1.1 connections; checks every row.

    The client writes pre-encoded requests and reads the status line and Content-Length
    only (~0.1 ms of CPU per request), so it does not compete with the server for the CPU
    the way a full-featured client does (httpx costs ~1.3 ms per request here).
    """
    payload = json.dumps(BODY if batch == 1 else {"audits": [BODY] * batch}).encode()
    port = int(url.rsplit(":", 1)[1])
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    before = AuditRun.objects.count()
    accepted = 0

    async def connection(requests: int) -> None:
        nonlocal accepted
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(requests):
                writer.write(request)
                await read_answer(reader)
                accepted += batch
        finally:
            writer.close()

    async def hammer() -> float:
        per_connection = n // batch // INGEST_CONNECTIONS
        t0 = time.perf_counter()
        await asyncio.gather(*(connection(per_connection) for _ in range(INGEST_CONNECTIONS)))
        return time.perf_counter() - t0

    elapsed = asyncio.run(hammer())
    stored = AuditRun.objects.count() - before
    if stored != accepted:
        raise SystemExit(f"{accepted} audits accepted but {stored} stored")
    return accepted / elapsed


# --- data for export and list ------------------------------------------------------------


def populate(n: int) -> None:
    """N complete audits (2 results, some annotations, 1 trace line each) by raw inserts."""
    rng = random.Random(7)
    now = timezone.now()
    types = ["UNGROUNDED_CUSTOMER_CLAIM", "LINK_HOST_NOT_ALLOWED", "PROMPT_LEAK", "sycophancy"]
    sources = json.dumps(BODY["sources"])
    runs, results, annotations, trace = [], [], [], []
    result_id = annotation_id = 0
    fmt = "%Y-%m-%d %H:%M:%S.%f"
    finished = now.strftime(fmt)
    for i in range(n):
        run_id = uuid.uuid4().hex
        score = rng.random()
        created = (now - timedelta(seconds=n - i)).strftime(fmt)
        runs.append(
            (
                run_id,
                "complete",
                False,
                None,
                None,
                "",
                f"Question {i} about Acme search",
                BODY["response"],
                BODY["response"],
                sources,
                json.dumps({"i": i}),
                None,
                "{}",
                0.3,
                "{}",
                score,
                score >= 0.3,
                created,
                created,
                finished,
                "",
                1,
                None,
            )
        )
        for pos, analyzer in enumerate(("redflag", "grounding")):
            result_id += 1
            results.append(
                (
                    result_id,
                    run_id,
                    pos,
                    analyzer,
                    "structure",
                    "ok",
                    None,
                    1.0,
                    score,
                    False,
                    score >= 0.3,
                    "{}",
                    created,
                )
            )
            if analyzer == "grounding" and score >= 0.3:
                annotation_id += 1
                annotations.append(
                    (
                        annotation_id,
                        run_id,
                        result_id,
                        0,
                        analyzer,
                        rng.choice(types),
                        "finding",
                        rng.choice(["info", "warning", "critical"]),
                        "",
                        "Decathlon",
                        0,
                        9,
                        created,
                    )
                )
        trace.append((run_id, 0, f"[AUDIT] audit {i}"))

    def insert(model, rows: list[tuple]) -> None:
        # The tuples above give the first fields in model order; later fields are nullable.
        columns = [f.column for f in model._meta.concrete_fields][: len(rows[0])]
        cur.executemany(
            f"INSERT INTO {model._meta.db_table} ({', '.join(map(connection.ops.quote_name, columns))}) "
            f"VALUES ({', '.join(['%s'] * len(columns))})",
            rows,
        )

    with transaction.atomic(), connection.cursor() as cur:
        insert(AuditRun, runs)
        insert(AnalyzerRunRecord, results)
        insert(Annotation, annotations)
        cur.executemany(
            "INSERT INTO audits_traceline (audit_id, position, text) VALUES (%s, %s, %s)", trace
        )
    with connection.cursor() as cur:
        cur.execute("ANALYZE")


def bench_export(url: str, pid: int, key: str, n: int) -> dict:
    headers = {"Authorization": f"Bearer {key}"}
    out = {}
    newest_tenth = (timezone.now() - timedelta(seconds=n // 10)).isoformat()
    for label, params in (("tenth", {"since": newest_tenth}), ("all", {})):
        peak = [rss_kb(pid)]
        stop_flag = threading.Event()

        def sample(stop_flag: threading.Event = stop_flag, peak: list = peak) -> None:
            while not stop_flag.is_set():
                peak.append(rss_kb(pid))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        lines = 0
        t0 = time.perf_counter()
        with httpx.stream(
            "GET",
            url + "/api/audits/export",
            params={"format": "jsonl", **params},
            headers=headers,
            timeout=120,
        ) as r:
            assert r.status_code == 200
            for chunk in r.iter_bytes():
                lines += chunk.count(b"\n")
        elapsed = time.perf_counter() - t0
        stop_flag.set()
        sampler.join()
        out[label] = {"rows": lines, "rows_per_s": lines / elapsed, "peak_rss_mb": max(peak) / 1024}

    # Baseline: the raw ORM reading the same audit rows (values, no related tables).
    t0 = time.perf_counter()
    count = sum(1 for _ in AuditRun.objects.values_list("id", "user_input").iterator(2000))
    out["orm_values_rows_per_s"] = count / (time.perf_counter() - t0)
    return out


LIST_FILTERS = [
    ("none", {}),
    ("min_score", {"min_score": 0.5}),
    ("surfaced", {"surfaced": "true"}),
    ("type+severity", {"type": "PROMPT_LEAK", "severity": "critical"}),
    ("analyzer", {"analyzer": "grounding"}),
    ("q", {"q": "Question 99"}),
]


def bench_list(url: str, key: str) -> dict:
    headers = {"Authorization": f"Bearer {key}"}
    out = {}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for label, params in LIST_FILTERS:
            timings = []
            cursor = None
            for i in range(40):
                q = {"limit": 50, **params}
                if cursor and i % 2:
                    q["cursor"] = cursor
                t0 = time.perf_counter()
                r = client.get("/api/audits", params=q)
                timings.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text
                cursor = r.json()["next"]
            out[label] = statistics.median(timings)
    return out


def queries_per_request(key: str) -> dict:
    client = Client(HTTP_HOST="127.0.0.1")
    out = {}
    # Warm up: the first request also verifies the key and opens a rate-limit window.
    client.get("/api/audits", {"limit": 1}, headers={"Authorization": f"Bearer {key}"})
    for limit in (10, 100):
        with CaptureQueriesContext(connection) as ctx:
            r = client.get(
                "/api/audits",
                {"limit": limit, "surfaced": "true"},
                headers={"Authorization": f"Bearer {key}"},
            )
        assert r.status_code == 200
        out[limit] = len(ctx.captured_queries)
    return out


E2E_TARGETS = {"thread batches": 400, "thread 16 clients": 200}
E2E_PER_WORKER_TARGET = 150
CPU_RATIO_TARGET = 4


ROUND_FIGURES = (
    "accepted_per_s",
    "analysed_per_s",
    "cpu_ms_per_audit",
    "server_process_cpu_ms_per_audit",
    "engine_cpu_ms_around",
    "ratio",
)


def median_round(rounds: list[dict]) -> dict:
    """The last round's record with the medians of the rounds' figures (each round's
    figures kept under "rounds"): one round's ratio moves by a fifth with the machine."""
    r = dict(rounds[-1])
    for name in ROUND_FIGURES:
        r[name] = statistics.median(x[name] for x in rounds)
    if len(rounds) > 1:
        r["rounds"] = [{name: x[name] for name in ROUND_FIGURES} for x in rounds]
    return r


def print_scenario(tree: str, label: str, backend: str, workers: int, r: dict) -> None:
    """A scenario's lines: medians over its rounds, verdicts on the medians."""
    rate, ratio = r["analysed_per_s"], r["ratio"]
    target = E2E_TARGETS.get(label.split(",")[0])
    if backend == "database":
        target = E2E_PER_WORKER_TARGET * workers
    verdict = (
        ""
        if tree == "before"
        else (f"  (target >= {target}/s: {'ok' if rate >= target else 'MISSED'})")
    )
    workers_rss = "".join(f" + {w:.0f}" for w in r["peak_rss_mb"]["workers"])
    print(
        f"  [{tree}] {label:38s} accepted {r['accepted_per_s']:6.0f}/s  "
        f"analysed+stored {rate:6.0f}/s{verdict}"
        + (f"  ({r['retried_503']} requests retried after a 503)" if r.get("retried_503") else "")
    )
    cpu_verdict = (
        ""
        if tree == "before"
        else (
            f" (target <= {CPU_RATIO_TARGET}x: {'ok' if ratio <= CPU_RATIO_TARGET else 'MISSED'})"
        )
    )
    pad = " " * (len(tree) + 3 + 38)
    own = r["server_process_cpu_ms_per_audit"]
    print(
        f"  {pad} server CPU {r['cpu_ms_per_audit']:.2f} ms/audit "
        f"(server process {own:.2f}, analysis processes and workers "
        f"{r['cpu_ms_per_audit'] - own:.2f}) "
        f"= {ratio:.1f}x engine ({r['engine_cpu_ms_around']:.2f} ms around it)"
        f"{cpu_verdict}  peak RSS {r['peak_rss_mb']['server']:.0f}{workers_rss} MB  "
        f"(its start, before the clock: {r['warm_up_cpu_s']:.1f} s CPU)"
    )
    if "rounds" in r:
        each = ", ".join(
            f"{x['analysed_per_s']:.0f}/s {x['cpu_ms_per_audit']:.2f} ms {x['ratio']:.1f}x"
            for x in r["rounds"]
        )
        print(f"  {pad} medians of {len(r['rounds'])} rounds: {each}")


def end_to_end(key: str, args) -> dict:
    """Accepted/s and analysed-and-stored/s, the CPU per audit against the engine alone."""
    from throughput import engine_cpu_ms, run_scenario

    engine_ms = engine_cpu_ms()
    cores = os.cpu_count() or 1
    threads = {"AUDITOR_ANALYSIS_PROCESSES": "0"}  # the server's default is processes
    procs = {"AUDITOR_ANALYSIS_PROCESSES": "1"}
    procs_cores = {"AUDITOR_ANALYSIS_PROCESSES": str(cores)}
    scenarios = [
        ("thread batches", "thread", 100, 1, 0, threads),
        ("thread 16 clients", "thread", 1, 16, 0, threads),
        # The thread backend with analysis processes (audits.analysis_processes).
        ("thread batches, 1 analysis process", "thread", 100, 1, 0, procs),
        (f"thread batches, {cores} analysis processes", "thread", 100, 1, 0, procs_cores),
        (f"thread 16 clients, {cores} analysis procs", "thread", 1, 16, 0, procs_cores),
        # The same through Django's handler (audits.api.submit_asgi off): the baseline of
        # the endpoint that answers POST /api/audits in front of Django.
        (
            f"thread 16 clients, {cores} analysis procs, via Django",
            "thread",
            1,
            16,
            0,
            {**procs_cores, "AUDITOR_API_FAST_SUBMIT": "0"},
        ),
        ("database batches, 1 db_worker", "database", 100, 1, 1, {}),
        (f"database batches, {cores} db_workers", "database", 100, 1, cores, {}),
        (f"database 16 clients, {cores} db_workers", "database", 1, 16, cores, {}),
    ]
    if args.scenarios:
        scenarios = [s for s in scenarios if any(w in s[0] for w in args.scenarios)]
    trees = [("after", BASE_DIR, args.e2e)]
    if args.before:
        trees.insert(0, ("before", args.before.resolve(), args.before_e2e))
    results: dict = {
        "engine_cpu_ms_per_audit": engine_ms,
        "engine_audits_per_cpu_s": 1000 / engine_ms,
    }
    print(
        f"== end to end ({args.e2e} audits: 300-char input, 2 KB response with links; "
        f"{cores} cores, SQLite)"
    )
    print(
        f"  engine alone, same shape: {engine_ms:.2f} ms CPU per audit "
        f"({1000 / engine_ms:,.0f} audits per CPU-second; baseline)"
    )
    failures = []
    for tree, root, n in trees:
        for label, backend, batch, clients, workers, env in scenarios:
            if tree == "before" and (workers > 1 or env):
                continue  # the old tree: one worker is enough to compare
            rounds = []
            for _ in range(max(1, args.rounds)):
                # The engine's baseline measured right before and right after each round:
                # the machine's speed drifts by a third from minute to minute here, and a
                # baseline taken minutes earlier moved the ratio as much.
                around = engine_cpu_ms()
                r = run_scenario(
                    root=root,
                    db=DB_PATH,
                    key=key,
                    backend=backend,
                    n=n,
                    batch=batch,
                    clients=clients,
                    workers=workers,
                    env_extra=env,
                )
                r["engine_cpu_ms_around"] = (around + engine_cpu_ms()) / 2
                r["ratio"] = r["cpu_ms_per_audit"] / r["engine_cpu_ms_around"]
                rounds.append(r)
                if r["complete"] != r["stored"] or r["stored"] != n:
                    failures.append(
                        f"{tree} {label}: {r['stored']} stored, "
                        f"{r['complete']} complete of {n} accepted"
                    )
            r = median_round(rounds)
            results[f"{tree}: {label}"] = r
            print_scenario(tree, label, backend, workers, r)
    fast = results.get(f"after: thread 16 clients, {cores} analysis procs")
    django = results.get(f"after: thread 16 clients, {cores} analysis procs, via Django")
    if fast and django:  # the endpoint in front of Django against its baseline, this run

        def ratio(name: str) -> float:
            return fast[name] / django[name]

        print(
            f"  POST /api/audits in front of Django / via Django: server process CPU per "
            f"audit x{ratio('server_process_cpu_ms_per_audit'):.2f}, all of it "
            f"x{ratio('cpu_ms_per_audit'):.2f}, analysed and stored/s "
            f"x{ratio('analysed_per_s'):.2f}"
        )
    if args.live_probe:
        results["live probe"] = live_probe(key, args, engine_ms)
    if args.phoenix:
        shipped = f"after: thread batches, {cores} analysis processes"
        results["phoenix"] = phoenix_side_by_side(args.e2e, results.get(shipped), shipped)
    else:
        print("  Phoenix side by side: skipped (optional; --phoenix)")
    if failures:
        raise SystemExit("audits lost: " + "; ".join(failures))
    return results


def phoenix_side_by_side(n: int, ours: dict | None, label: str) -> dict:
    """Arize Phoenix's ingest measured the same way (bench/phoenix_side.py): `n` LLM spans
    of the same shape (300-character input, 2 KB output) in batches of 100, one request in
    flight; accepted/s and queryable/s (Phoenix analyses nothing), beside `ours` (the
    shipped server's batch scenario). Optional: skipped, saying why, when Phoenix cannot be
    installed or started ($PHOENIX_PYTHON: an existing install)."""
    from phoenix_side import bench_phoenix, make_bodies, phoenix_python

    python, version = phoenix_python(os.environ.get("PHOENIX_PYTHON", ""))
    if python is None:
        print(f"  Phoenix side by side: skipped ({version})")
        return {}
    project = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        theirs = bench_phoenix(
            python, [(project, make_bodies(n, 100, project, seed=7))], n, start_timeout=900
        )
    except SystemExit as exc:  # optional: say why, keep the figures above
        print(f"  Phoenix side by side: skipped ({exc})")
        return {}
    accepted, queryable = theirs["accepted"][0], theirs["queryable"][0]
    print(
        f"  Phoenix {version}, {n} spans in batches of 100: accepted {accepted:6.0f}/s  "
        f"queryable {queryable:6.0f}/s (no analysis)  peak RSS {theirs['rss_mb']:.0f} MB"
    )
    if ours:
        print(
            f"  side by side, {label.split(': ', 1)[1]}: accepted "
            f"x{ours['accepted_per_s'] / accepted:.2f}, analysed and stored "
            f"{ours['analysed_per_s']:.0f}/s against Phoenix's queryable {queryable:.0f}/s "
            f"= x{ours['analysed_per_s'] / queryable:.2f}"
        )
    return {"version": version, **theirs}


def live_probe(key: str, args, engine_ms: float) -> dict:
    """The thread backend's batch scenario again, with a staff user watching: the list
    page's latency and a lone audit's card latency while the load runs (throughput._probe)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    user = get_user_model().objects.filter(username="bench-staff").first()
    if user is None:
        user = get_user_model().objects.create_superuser("bench-staff", password=uuid.uuid4().hex)
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    out = {"thread": _probe_scenario(key, args, engine_ms, cookie, "thread", 0, {})}
    # A db_worker's events reach the server's watchers through Redis only.
    redis = shutil.which("redis-server")
    if args.probe_thread_only:
        return out
    if redis is None:
        print("  [live probe] database backend: skipped (no redis-server for the events)")
        return out
    port = free_port()
    server = subprocess.Popen(
        [redis, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        out["database"] = _probe_scenario(
            key,
            args,
            engine_ms,
            cookie,
            "database",
            1,
            {"REDIS_URL": f"redis://127.0.0.1:{port}/0"},
        )
    finally:
        server.terminate()
        server.wait(10)
    return out


def _probe_scenario(
    key: str, args, engine_ms: float, cookie: str, backend: str, workers: int, env: dict
) -> dict:
    from django.conf import settings
    from throughput import run_scenario

    r = run_scenario(
        root=BASE_DIR,
        db=DB_PATH,
        key=key,
        backend=backend,
        n=args.e2e,
        batch=100,
        clients=1,
        probe_cookie=cookie,
        workers=workers,
        env_extra={"SECRET_KEY": settings.SECRET_KEY, **env},
    )  # the session's key
    probe = r["probe"]
    label = "thread batches" if backend == "thread" else f"database batches, {workers} db_worker"

    def pct(values: list[float], p: float) -> float:
        values = sorted(values)
        return (
            values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]
            if values
            else float("nan")
        )

    print(
        f"  [live probe] {label} with a watcher: accepted {r['accepted_per_s']:.0f}/s  "
        f"analysed+stored {r['analysed_per_s']:.0f}/s  server CPU {r['cpu_ms_per_audit']:.2f} "
        f"ms/audit = {r['cpu_ms_per_audit'] / engine_ms:.1f}x engine"
    )
    print(
        f"  [live probe] list page during the load: p50 {pct(probe['list_ms'], 50):.0f} ms, "
        f"p95 {pct(probe['list_ms'], 95):.0f} ms ({len(probe['list_ms'])} requests; "
        f"target p50 < 60 ms: {'ok' if pct(probe['list_ms'], 50) < 60 else 'MISSED'})"
    )
    print(
        f"  [live probe] a lone audit's card at a watcher: p50 {pct(probe['card_ms'], 50):.0f} ms, "
        f"p95 {pct(probe['card_ms'], 95):.0f} ms (target p95 < 150 ms: "
        f"{'ok' if pct(probe['card_ms'], 95) < 150 else 'MISSED'}); complete card p50 "
        f"{pct(probe['complete_ms'], 50):.0f} ms, p95 {pct(probe['complete_ms'], 95):.0f} ms "
        f"({len(probe['card_ms'])} audits; {probe.get('missed', 0)} cards never came)"
    )
    print(
        f"  [live probe] of which the lone POST's own answer: p50 {pct(probe['post_ms'], 50):.0f} ms, "
        f"p95 {pct(probe['post_ms'], 95):.0f} ms; the page watching everything got "
        f"{probe.get('feed_messages', 0)} updates"
    )
    if r["complete"] != r["stored"] or r["stored"] != args.e2e:
        raise SystemExit(
            f"audits lost in the live probe: {r['stored']} stored, "
            f"{r['complete']} complete of {args.e2e}"
        )
    return r


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--ingest", type=int, default=2000)
    parser.add_argument("--e2e", type=int, default=5000, help="audits per end-to-end scenario")
    parser.add_argument("--before", type=Path, help="source tree to measure end to end too")
    parser.add_argument("--before-e2e", type=int, default=1000)
    parser.add_argument("--e2e-only", action="store_true")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of each end-to-end scenario (figures are their medians)",
    )
    parser.add_argument(
        "--scenarios",
        nargs="*",
        help="only the end-to-end scenarios whose label contains one of these",
    )
    parser.add_argument("--phoenix", action="store_true", help="the optional Phoenix step")
    parser.add_argument(
        "--live-probe",
        action="store_true",
        help="also the batch scenario with a watcher: list page and card "
        "latency while the load runs",
    )
    parser.add_argument(
        "--probe-thread-only",
        action="store_true",
        help="the live probe of the thread backend only (not the database's)",
    )
    parser.add_argument(
        "--probe-only",
        action="store_true",
        help="only the live probe (and the engine-alone baseline)",
    )
    args = parser.parse_args()
    try:
        call_command("migrate", verbosity=0)
        _, key = ApiKey.create_key("bench", scope="read", rate_limit_per_minute=10_000_000)
        if args.probe_only:
            from throughput import engine_cpu_ms

            live_probe(key, args, engine_cpu_ms())
            return
        e2e = end_to_end(key, args)
        if args.e2e_only:
            print(json.dumps({"end_to_end": e2e}, default=str))
            return

        ingest = bench_ingest(args.ingest, key)
        base = ingest["bulk_orm_per_s"]
        print(
            f"== ingest ({INGEST_CONNECTIONS} keep-alive connections, wait=false, "
            "server with DEBUG off)"
        )
        print(f"  raw ORM bulk insert              {base:8.0f} rows/s (baseline)")
        for label, what in (
            ("database", "POST /api/audits       "),
            ("database_batch100", "POST /api/audits/batch x100"),
        ):
            r = ingest[label]
            runs = ", ".join(f"{x:.0f}" for x in r["runs"])
            print(
                f"  {what} db queue {r['median']:6.0f} audits/s median ({runs})  "
                f"ratio to baseline {r['median'] / base:.3f}"
                + (
                    f"  (target >= 300/s: {'ok' if r['median'] >= 300 else 'MISSED'})"
                    if label == "database"
                    else ""
                )
            )

        t0 = time.perf_counter()
        populate(args.rows)
        print(f"== stored {args.rows} audits in {time.perf_counter() - t0:.1f} s")

        proc, url = start_server({"AUDITOR_TASK_BACKEND": "database"})
        try:
            export = bench_export(url, proc.pid, key, args.rows)
            print("== export (GET /api/audits/export?format=jsonl)")
            for label in ("tenth", "all"):
                e = export[label]
                print(
                    f"  {e['rows']:7d} rows  {e['rows_per_s']:10.0f} rows/s  "
                    f"server peak RSS {e['peak_rss_mb']:.0f} MB"
                )
            ratio = export["all"]["peak_rss_mb"] / export["tenth"]["peak_rss_mb"]
            print(f"  peak RSS all/tenth ratio {ratio:.2f} (constant memory: ~1.0)")
            print(
                f"  baseline raw ORM values() read {export['orm_values_rows_per_s']:.0f} rows/s; "
                f"export ratio {export['all']['rows_per_s'] / export['orm_values_rows_per_s']:.3f}"
                f"  (target >= 20000 rows/s: "
                f"{'ok' if export['all']['rows_per_s'] >= 20000 else 'MISSED'})"
            )
            listing = bench_list(url, key)
            print("== list (GET /api/audits, limit=50), p50 latency")
            for label, p50 in listing.items():
                print(
                    f"  {label:14s} {p50:7.1f} ms  (target < 50 ms: "
                    f"{'ok' if p50 < 50 else 'MISSED'})"
                )
        finally:
            stop(proc)
        qpr = queries_per_request(key)
        print(
            f"  SQL queries per request: limit=10 -> {qpr[10]}, limit=100 -> {qpr[100]} "
            f"({'constant' if qpr[10] == qpr[100] else 'GROWS WITH ROWS'})"
        )
        print(
            json.dumps(
                {
                    "end_to_end": e2e,
                    "ingest": ingest,
                    "export": export,
                    "list_p50_ms": listing,
                    "queries": qpr,
                },
                default=str,
            )
        )
    finally:
        connection.close()
        for suffix in ("", "-wal", "-shm"):
            Path(str(DB_PATH) + suffix).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
