"""What storing a batch of analysed audits costs, in figures that do not depend on the load.

Runs `execute.execute_runs` (claim, read, analyse, store) on batches of the end-to-end
benchmark's audits (bench/throughput.audit_body: 300-character input, 2 KB response with
links) in this process, on a fresh SQLite file, and prints per audit:

- SQL statements, and rows written per table (counted in the tables);
- the index entries those rows write (each row writes its table's b-tree plus one entry
  per index: the repeatable measure of what an insert costs SQLite);
- the database pages those commits wrote (frames of SQLite's write-ahead log);
- Python function calls per audit in storing (cProfile; repeatable on a loaded machine);
- CPU time in the claim, in the engine and in storing (median of the batches), and
  storing against the engine's time in the same run (the baseline);
- how long each transaction holds SQLite's write lock while a CPU-bound thread runs
  beside it, as in the server (each statement gives the interpreter lock up, and the
  writer waits for it again while it holds the write lock).

    .venv/bin/python bench/bench_store.py [--audits 640] [--batch 32] [--root OTHER_TREE]

`--root` measures another source tree (e.g. main's, for a before/after in one run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    try:
        run()
    finally:
        shutil.rmtree(DB_DIR, ignore_errors=True)


DB_DIR = Path(tempfile.mkdtemp(prefix="bench-store-"))


def run() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--audits", type=int, default=640)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--root", type=Path, default=HERE.parent)
    args = parser.parse_args()

    root = args.root.resolve()
    db = DB_DIR / "store.sqlite3"
    os.environ["DATABASE_URL"] = f"sqlite:///{db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-any-server-0123456789abcdef")
    os.environ["AUDITOR_ANALYSIS_PROCESSES"] = "0"
    sys.path.insert(0, str(root))
    sys.path.insert(1, str(HERE))

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from throughput import audit_body

    from analyzers.config_store import load_config_with_snapshot
    from audits.execution import execute
    from audits.models import AuditRun

    call_command("migrate", verbosity=0)
    for statement in filter(None, os.environ.get("BENCH_STORE_EXPERIMENT", "").split(";")):
        with connection.cursor() as cursor:
            cursor.execute(statement)
    config, snapshot = load_config_with_snapshot()
    runs = []
    profiled = 4 * args.batch  # then counted under cProfile (not timed)
    contended = 8 * args.batch  # then stored beside a busy thread (`_store_beside_busy_thread`)
    for i in range(args.audits + args.batch + profiled + contended):  # the first warms up
        body = audit_body(i)
        runs.append(
            AuditRun(
                user_input=body["user_input"],
                response=body["response"],
                sources=body["sources"],
                metadata=body["metadata"],
                threshold=config.threshold,
                config_snapshot=snapshot,
            )
        )
    AuditRun.objects.bulk_create(runs)
    ids = [run.pk for run in runs]
    ids, contended_ids = ids[:-contended], ids[-contended:]
    ids, profiled_ids = ids[:-profiled], ids[-profiled:]

    phases = {"claim+read": 0.0, "engine": 0.0, "store": 0.0}
    phase_fns = {
        "claim+read": ["_claim_many", "_nothing_stored"],
        "engine": ["_analyse"],
        "store": ["store_reports"],
    }

    def timed(name, fn):
        def wrapper(*a, **kw):
            start = time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                phases[name] += time.process_time() - start

        return wrapper

    for name, fns in phase_fns.items():
        for fn in fns:
            if hasattr(execute, fn):
                setattr(execute, fn, timed(name, getattr(execute, fn)))

    execute.execute_runs(ids[: args.batch])
    per_batch: dict[str, list[float]] = {name: [] for name in phases}
    statements = 0

    def count_statement(execute, sql, params, many, context):
        nonlocal statements
        statements += 1
        return execute(sql, params, many, context)

    frames = 0
    rows: dict[str, int] = {}
    for start in range(args.batch, len(ids), args.batch):
        batch = ids[start : start + args.batch]
        for name in phases:
            phases[name] = 0.0
        _wal_frames(connection, "TRUNCATE")  # (not timed) the batch's pages, counted below
        counts = _row_counts(connection)  # (not timed) the rows it writes, counted below
        begin = time.process_time()
        # (counted by a wrapper: the debug cursor of CaptureQueriesContext would quote
        # every parameter of every statement, a cost the server does not pay)
        with connection.execute_wrapper(count_statement):
            outcome = execute.execute_runs(batch)
        total = time.process_time() - begin
        frames += _wal_frames(connection, "PASSIVE")
        assert set(outcome.values()) == {"complete"}, outcome
        for table, count in _row_counts(connection).items():
            if table != "audits_auditrun":  # (its rows were written before, and updated)
                rows[table] = rows.get(table, 0) + count - counts.get(table, 0)
        for name in phases:
            per_batch[name].append(1000 * phases[name] / len(batch))
        per_batch.setdefault("total", []).append(1000 * total / len(batch))

    calls = _calls_storing(execute, profiled_ids, args.batch)
    held = _store_beside_busy_thread(execute, contended_ids, args.batch)
    n = args.audits
    print(f"tree: {root}")
    print(f"{n} audits in batches of {args.batch}, SQLite {db}")
    print(f"SQL statements per audit: {statements / n:.2f}")
    indexes = _index_count(connection)
    written = 0.0
    for table, count in sorted(rows.items()):
        if not count:
            continue
        per = count / n
        entries = per * (1 + indexes.get(table, 0))
        written += entries
        print(
            f"  rows into {table}: {per:.1f} per audit ({indexes.get(table, 0)} indexes: "
            f"{entries:.0f} b-tree entries)"
        )
    print(f"b-tree entries written per audit (inserts): {written:.0f}")
    print(f"database pages written per audit (WAL frames, commits included): {frames / n:.1f}")
    print(
        f"Python function calls per audit in storing (cProfile, {profiled} more audits): "
        f"{calls:.0f}"
    )
    print(
        f"write lock held per store transaction ({args.batch} audits) beside a CPU-bound "
        f"thread (the server's other work): median {statistics.median(held):.1f} ms, max "
        f"{max(held):.1f} ms ({len(held)} transactions)"
    )
    medians = {name: statistics.median(values) for name, values in per_batch.items()}
    for name, value in medians.items():
        print(f"CPU ms per audit, {name}: {value:.2f}")
    print(
        f"storing / engine (baseline of the same run): {medians['store'] / medians['engine']:.2f}x"
    )


def _calls_storing(execute, ids: list, batch: int) -> float:
    """Function calls per audit inside `execute.store_reports` (a repeatable CPU figure:
    the same on a loaded machine)."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    store = execute.store_reports

    def profiled(*a, **kw):
        profile.enable()
        try:
            return store(*a, **kw)
        finally:
            profile.disable()

    execute.store_reports = profiled
    try:
        for start in range(0, len(ids), batch):
            execute.execute_runs(ids[start : start + batch])
    finally:
        execute.store_reports = store
    return pstats.Stats(profile).total_calls / len(ids)


def _store_beside_busy_thread(execute, ids: list, batch: int) -> list[float]:
    """Milliseconds from each store's BEGIN to its COMMIT (SQLite's write lock held) while the
    batches are analysed and stored beside another thread of this process that computes,
    as the server's event loop and request threads do: each statement gives the
    interpreter lock up, and the writer waits for it again while it holds the write lock."""
    import threading

    from django.db import connection

    held: list[float] = []
    began: list[float] = []
    writes = [False]  # the transaction inserts (a store, not a claim)
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(10_000))

    def begin(execute, sql, params, many, context):
        if sql.startswith("BEGIN"):
            began.append(time.perf_counter())
            writes[0] = False
        writes[0] = writes[0] or sql.startswith("INSERT")
        return execute(sql, params, many, context)

    commit = connection._commit

    def committed():
        try:
            return commit()
        finally:
            if began:
                ms = (time.perf_counter() - began.pop()) * 1000
                if writes[0]:
                    held.append(ms)

    spinner = threading.Thread(target=busy, daemon=True)
    connection._commit = committed
    spinner.start()
    try:
        with connection.execute_wrapper(begin):
            for start in range(0, len(ids), batch):
                execute.execute_runs(ids[start : start + batch])
    finally:
        stop.set()
        spinner.join()
        del connection._commit
    return held


def _wal_frames(connection, mode: str) -> int:
    """Frames in the write-ahead log (pages written since the last checkpoint); checkpoints."""
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA wal_checkpoint({mode})")
        return cursor.fetchone()[1]


def _row_counts(connection) -> dict[str, int]:
    """Rows per table of the audits app (multi-row INSERTs: the statements do not tell)."""
    counts = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            if table.startswith("audits_"):
                cursor.execute(f'SELECT count(*) FROM "{table}"')
                counts[table] = cursor.fetchone()[0]
    return counts


def _index_count(connection) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tbl_name, count(*) FROM sqlite_master WHERE type = 'index' GROUP BY tbl_name"
        )
        return dict(cursor.fetchall())


if __name__ == "__main__":
    main()
