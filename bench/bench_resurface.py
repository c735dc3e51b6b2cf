"""Re-surfacing 100,000 stored audits after a threshold change, and the list page meanwhile.

A threshold change queues a `ResurfaceJob` (audits.surfacing); here a separate worker
process runs it, as a db_worker or the server's task thread would, on its own SQLite
file under var/bench/ (built once with bench_dashboard's rows: six results per audit,
reused by later runs; each run moves the global threshold between 0.3 and 0.5, so every
audit is re-surfaced each time). Measured:

- the job's time for every stored audit (target: under 30 s; judged on the worker's CPU
  time, as bench_guardrails does, because the development machine is shared: the wall
  clock is printed next to it with the load average);
- list page p50 (django.test.Client in-process, the full middleware stack) while idle
  and while the job runs, as a ratio (the page stays usable: SQLite in WAL mode, the
  job writes in short transactions of `audits.surfacing.jobs.BATCH` audits).

    .venv/bin/python bench/bench_resurface.py [--audits 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_dashboard import BENCH_DIR, populate, setup_django  # noqa: E402

TARGET_S = 30.0
IDLE_ROUNDS = 40
PAUSE_S = 0.2


def worker(db_path: Path, job_id: int) -> None:
    """The child: run one job, print its seconds and outcome as JSON."""
    setup_django(db_path)
    from audits.surfacing import jobs

    started, cpu = time.perf_counter(), time.process_time()
    status = jobs.run_job(job_id)
    print(
        json.dumps(
            {
                "seconds": time.perf_counter() - started,
                "cpu_seconds": time.process_time() - cpu,
                "status": status,
            }
        )
    )


def list_latencies(client, until, pause: float = PAUSE_S) -> list[float]:
    """List page requests until `until()`, `pause` seconds apart (a person paging, not a
    load test: a tight loop here would take one of the job's two cores)."""
    times = []
    while not until():
        t = time.perf_counter()
        response = client.get("/")
        elapsed = time.perf_counter() - t
        times.append(elapsed * 1000)
        assert response.status_code == 200, response.status_code
        time.sleep(pause)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--audits", type=int, default=100_000)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.db, args.worker)
        return

    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    db_path = BENCH_DIR / f"resurface-{args.audits}.sqlite3"
    setup_django(db_path)

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.tasks import task_backends
    from django.test import Client

    from analyzers.config_store import load_config, save_config
    from audits.models import AnalyzerRunRecord, AuditRun, ResurfaceJob

    # Jobs are queued, not run here: the worker process below runs them.
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
    task_backends._settings = task_backends.configure_settings(settings.TASKS)

    call_command("migrate", verbosity=0)
    if AuditRun.objects.count() != args.audits:
        AuditRun.objects.all().delete()
        populate(args.audits)
    results = AnalyzerRunRecord.objects.count()
    User = get_user_model()
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.com", "bench-password-1"
    )
    client = Client()
    client.force_login(user)
    client.get("/")  # warm up
    idle = list_latencies(client, iter([False] * IDLE_ROUNDS + [True]).__next__)

    config = load_config()
    new = 0.5 if config.threshold != 0.5 else 0.3
    cards_before = AuditRun.objects.filter(has_card=True).count()
    save_config(config.model_copy(update={"threshold": new}), actor="bench", source="bench")
    job = ResurfaceJob.objects.order_by("-id").first()
    assert job is not None and job.status == "pending", "the threshold change queued no job"

    child = subprocess.Popen(
        [sys.executable, __file__, "--worker", str(job.pk), "--db", str(db_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter()
    busy = list_latencies(client, lambda: child.poll() is not None)
    wall = time.perf_counter() - wall
    out, _ = child.communicate()
    assert child.returncode == 0, child.returncode
    outcome = json.loads(out.strip().splitlines()[-1])
    job.refresh_from_db()
    stale = AuditRun.objects.filter(status="complete").exclude(surfacing_policy=job.policy).count()
    cards_after = AuditRun.objects.filter(has_card=True).count()

    print(f"{args.audits} audits, {results} results; global threshold -> {new}")
    print(
        f"  re-surfacing job ({outcome['status']}): {outcome['seconds']:.2f} s "
        f"({args.audits / outcome['seconds']:,.0f} audits/s; {outcome['cpu_seconds']:.2f} s "
        f"CPU in the worker; worker process wall {wall:.1f} s)"
    )
    print(
        f"  cards {cards_before} -> {cards_after}, {job.changed} changed; "
        f"audits still at older thresholds: {stale}"
    )
    p50_idle, p50_busy = statistics.median(idle), statistics.median(busy)
    print(f"  list page p50 idle          {p50_idle:7.2f} ms  ({len(idle)} requests)")
    print(
        f"  list page p50 during job    {p50_busy:7.2f} ms  ({len(busy)} requests, "
        f"max {max(busy):.1f} ms)   x{p50_busy / p50_idle:4.1f} idle"
    )
    load = os.getloadavg()[0]
    verdict = "OK" if outcome["cpu_seconds"] < TARGET_S and stale == 0 else "OVER TARGET"
    print(
        f"target: {args.audits} audits re-surfaced in < {TARGET_S:.0f} s (CPU "
        f"{outcome['cpu_seconds']:.1f} s, wall {outcome['seconds']:.1f} s at load "
        f"{load:.1f} on {os.cpu_count()} cores) -> {verdict}"
    )


if __name__ == "__main__":
    main()
