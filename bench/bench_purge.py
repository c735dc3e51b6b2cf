"""How long a retention purge holds SQLite's write lock while submissions go on.

On a fresh SQLite file: `--audits` expired audits (default 20,000), each with 3 results,
6 annotations and 10 trace lines; then a thread submits audits without pause
(`intake.submit.submit_audit`, each one write transaction) while the main thread purges
the expired ones (`audits.store.erasure.purge_expired`: 500 a transaction, a pause
between). Prints the purge's duration, its longest and median batch transaction (the
write-lock hold: the transaction takes the lock at its first DELETE and keeps it to its
commit) and the submissions' latency during the purge (longest and 99th percentile).

    .venv/bin/python bench/bench_purge.py [--audits 20000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
DB_DIR = Path(tempfile.mkdtemp(prefix="bench-purge-"))


def main() -> None:
    try:
        run()
    finally:
        shutil.rmtree(DB_DIR, ignore_errors=True)


def run() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--audits", type=int, default=20_000)
    args = parser.parse_args()
    os.environ["DATABASE_URL"] = f"sqlite:///{DB_DIR / 'purge.sqlite3'}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-any-server-0123456789abcdef")
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(1, str(HERE))

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections
    from django.utils import timezone
    from throughput import audit_body

    from analyzers.config_store import save_config
    from audits.intake.submit import submit_audit
    from audits.models import AnalyzerRunRecord, Annotation, AuditRun, TraceLine
    from audits.store import erasure

    call_command("migrate", verbosity=0)
    save_config({"retention_days": 30}, actor="bench")
    old = timezone.now() - timedelta(days=40)
    started = time.perf_counter()
    for start in range(0, args.audits, 1000):
        runs = []
        for i in range(start, min(start + 1000, args.audits)):
            body = audit_body(i)
            runs.append(
                AuditRun(
                    user_input=body["user_input"],
                    response=body["response"],
                    status="complete",
                    created_at=old,
                )
            )
        AuditRun.objects.bulk_create(runs)
        results = AnalyzerRunRecord.objects.bulk_create(
            [
                AnalyzerRunRecord(
                    audit=run, analyzer_id=f"a{k}", score=0.1, position=k, audit_created_at=old
                )
                for run in runs
                for k in range(3)
            ]
        )
        Annotation.objects.bulk_create(
            [
                Annotation(
                    audit_id=result.audit_id,
                    result=result,
                    analyzer_id=result.analyzer_id,
                    type="T",
                    label="label",
                    evidence="some evidence text",
                    position=k,
                    audit_created_at=old,
                )
                for result in results
                for k in range(2)
            ]
        )
        TraceLine.objects.bulk_create(
            [
                TraceLine(audit=run, position=k, text=f"[AUDIT] KEEP | line {k}")
                for run in runs
                for k in range(10)
            ]
        )
    print(
        f"{args.audits} expired audits with 19 rows each, made in "
        f"{time.perf_counter() - started:.1f} s"
    )

    latencies: list[float] = []
    stop = threading.Event()

    def submit_forever() -> None:
        i = 0
        try:
            while not stop.is_set():
                body = audit_body(10_000_000 + i)
                begin = time.perf_counter()
                submit_audit(
                    user_input=body["user_input"], response=body["response"], enqueue=False
                )
                latencies.append(time.perf_counter() - begin)
                i += 1
        finally:
            connections.close_all()

    submitter = threading.Thread(target=submit_forever)
    submitter.start()
    time.sleep(0.5)  # the submissions' pace before the purge
    before = len(latencies)
    holds: list[float] = []
    begin = time.perf_counter()
    erased = erasure.purge_expired(on_batch=holds.append)
    took = time.perf_counter() - begin
    during = latencies[before:]
    stop.set()
    submitter.join()
    assert erased == args.audits, erased
    assert not AuditRun.objects.filter(created_at__lt=timezone.now() - timedelta(days=30)).exists()
    during.sort()
    print(
        f"purge: {erased} audits in {took:.1f} s, {len(holds)} transactions; write lock held "
        f"at most {1000 * max(holds):.0f} ms (median {1000 * statistics.median(holds):.0f} ms)"
    )
    print(
        f"submissions during the purge: {len(during)}, latency at most "
        f"{1000 * during[-1]:.0f} ms, p99 {1000 * during[int(0.99 * (len(during) - 1))]:.0f} ms, "
        f"median {1000 * statistics.median(during):.1f} ms"
    )


if __name__ == "__main__":
    main()
