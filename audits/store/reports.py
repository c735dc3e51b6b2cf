"""An analysed run's report written: its results, annotations, trace lines and links as plain
rows, a statement per table (audits.store.bulk); `mark_failed` for a run that failed.
The caller decides the surfacing (audits.execution.execute)."""

from __future__ import annotations

import bisect
import itertools
import logging
from typing import Any

from django.db import connections, router, transaction
from django.utils import timezone

from analyzers import lock_wait
from analyzers.engine.contract import AuditReport
from audits.events import (
    publish,
)
from audits.models import (
    AnalyzerRunRecord,
    Annotation,
    AnnotationKind,
    AuditLinks,
    AuditRun,
    TraceLine,
)
from audits.store import link_rows
from audits.store.bulk import (
    Statement,
    converter,
    db_value,
    prepare_insert,
    row_group,
    run_statement,
)
from audits.store.collisions import CollisionBatch
from audits.store.scoring import top_result
from audits.store.trace_rows import packed

logger = logging.getLogger(__name__)


STORE_CHUNK = 8  # audits written between two looks at requests waiting for the lock


def write_reports(
    pairs: list[tuple[AuditRun, AuditReport]],
    surfaced: dict[Any, list[bool]],
    *,
    fresh: bool = False,
    collisions: CollisionBatch | None = None,
) -> None:
    """The engine's reports on `pairs` written to their runs and child rows (`surfaced`:
    each run's results' surfacing flags, decided by the caller). One statement per table
    (rows as plain tuples through `audits.store.bulk.insert_rows`, no model instance per
    row), written `STORE_CHUNK` runs at a time, and the digests their duplicate checks
    recorded (`collisions`, which may raise CollisionRace: then nothing is stored). All in
    one transaction unless a request of the server waits for SQLite's write lock
    (`lock_wait.requests_waiting`): then what is written so far commits and the request
    goes first. Runs stored before a later chunk fails are complete; the caller's retries
    store them again from a clean slate."""
    if not pairs:
        return
    runs = [run for run, _ in pairs]
    using = runs[0]._state.db or router.db_for_write(AuditRun)
    audit_ids, *inserts = _report_rows(pairs, surfaced, using)
    now = timezone.now()
    for run, report in pairs:
        run.cleaned_response = report.cleaned_response
        run.overall_score = report.overall_score  # threshold, has_card: apply_current
        run.top_score, run.top_analyzer = top_result(report.results)
        run.status = AuditRun.Status.COMPLETE
        run.finished_at = now
        run.error = ""
    finished = _finished_update(runs, using)
    # Each statement's rows, per chunk of runs (the rows come in the runs' order).
    chunks = [audit_ids[i : i + STORE_CHUNK] for i in range(0, len(audit_ids), STORE_CHUNK)]
    chunk_of = {audit_id: i // STORE_CHUNK for i, audit_id in enumerate(audit_ids)}
    pieces = [
        _rows_by_chunk(statement, chunk_of, len(chunks), key)
        for statement, key in [*((insert, 0) for insert in inserts), (finished, -1)]
    ]
    done = 0
    while done < len(chunks):
        with transaction.atomic(using=using):  # the write lock: only the writes in here
            if done == 0 and collisions is not None:
                collisions.flush()
            while done < len(chunks):
                start = done * STORE_CHUNK
                _write_chunk(
                    runs[start : start + STORE_CHUNK],
                    chunks[done],
                    [piece[done] for piece in pieces],
                    fresh,
                    using,
                )
                done += 1
                if lock_wait.requests_waiting():
                    break


def _write_chunk(
    runs: list[AuditRun], audit_ids: list[Any], statements: list[Statement], fresh: bool, using: str
) -> None:
    """The rows of a chunk of runs' reports (`store_reports`), inside its transaction."""
    if not fresh:
        # A retried run starts from a clean slate.
        AnalyzerRunRecord.objects.using(using).filter(audit__in=runs).delete()
        TraceLine.objects.using(using).filter(audit__in=runs).delete()
        AuditLinks.objects.using(using).filter(audit__in=runs).delete()
        AnnotationKind.objects.using(using).filter(audit__in=runs).delete()
    results, annotations, kinds, trace, links, finished = statements
    run_statement(results)
    result_ids = _result_ids(audit_ids, using)
    for row in annotations.rows:
        row[1] = result_ids[row[1]]  # (audit id, position) -> the new result's id
    run_statement(annotations)
    run_statement(kinds)
    run_statement(trace)
    run_statement(links)
    run_statement(finished)


def _rows_by_chunk(
    statement: Statement, chunk_of: dict[Any, int], chunks: int, key: int
) -> list[Statement]:
    """`statement` split into one statement per chunk (`chunk_of`: an audit id's chunk;
    `key`: the column of a row's audit id; rows in the chunks' order)."""
    of_row = [chunk_of[row[key]] for row in statement.rows]
    if of_row != sorted(of_row):  # never write a row with the wrong chunk
        raise ValueError("rows are not in the runs' order")
    bounds = [bisect.bisect_left(of_row, i) for i in range(chunks + 1)]
    return [
        statement.with_rows(statement.rows[start:end]) for start, end in itertools.pairwise(bounds)
    ]


def _report_rows(
    pairs: list[tuple[AuditRun, AuditReport]],
    surfaced: dict[Any, list[bool]],
    using: str,
) -> tuple[list[Any], Statement, Statement, Statement, Statement, Statement]:
    """The stored audit ids and the INSERTs of the reports' results, annotations, their
    kinds, trace lines and links, built before the transaction (its write lock holds the
    other writers and the requests). An annotation's `result_id` is its result's (audit
    id, position) until the new results' ids are read."""
    # Each audit's id and creation time converted once, not once per row and table.
    keys = [
        (
            run,
            report,
            db_value(AuditRun, "id", run.pk, using=using),
            db_value(AuditRun, "created_at", run.created_at, using=using),
        )
        for run, report in pairs
    ]
    results: list[tuple[Any, ...]] = []
    annotations: list[tuple[Any, ...]] = []
    kinds: list[tuple[Any, ...]] = []
    trace: list[tuple[Any, ...]] = []
    links: list[tuple[Any, ...]] = []
    for run, report, audit_id, created_at in keys:
        # one row: audits.store.link_rows (the links result's copy of it is not stored again)
        table = link_rows.contract_dicts(report.links)
        if table:
            links.append((audit_id, link_rows.row_json(table)))
        shown = surfaced[run.pk]
        for i, r in enumerate(report.results):
            results.append(
                (
                    audit_id,
                    i,
                    r.analyzer_id,
                    r.category,
                    r.status,
                    r.error,
                    r.duration_ms,
                    r.score,
                    r.should_surface,
                    shown[i],
                    link_rows.stored_supplementary(r.analyzer_id, r.supplementary, table),
                    created_at,
                )
            )
            annotations.extend(
                (
                    audit_id,
                    (audit_id, i),
                    j,
                    r.analyzer_id,
                    a.type,
                    a.label,
                    a.severity,
                    a.description,
                    a.evidence,
                    a.start,
                    a.end,
                    created_at,
                )
                for j, a in enumerate(r.annotations)
            )
        counted = AnnotationKind.counted(a for r in report.results for a in r.annotations)
        kinds.extend(
            (audit_id, type_, severity, n, created_at) for (type_, severity), n in counted.items()
        )
        if report.trace:  # one row: audits.store.trace_rows
            trace.append((audit_id, 0, packed(report.trace)))
    return (
        [audit_id for _, _, audit_id, _ in keys],
        prepare_insert(AnalyzerRunRecord, RESULT_COLUMNS, results, using=using, prepared=PREPARED),
        prepare_insert(
            Annotation,
            ANNOTATION_COLUMNS,
            annotations,
            using=using,
            prepared=(*PREPARED, "result_id"),
        ),
        prepare_insert(
            AnnotationKind,
            ("audit_id", "type", "severity", "count", "audit_created_at"),
            kinds,
            using=using,
            prepared=PREPARED,
        ),
        prepare_insert(
            TraceLine, ("audit_id", "position", "text"), trace, using=using, prepared=PREPARED
        ),
        prepare_insert(
            AuditLinks, ("audit_id", "rows"), links, using=using, prepared=("audit_id",)
        ),
    )


PREPARED = ("audit_id", "audit_created_at")  # converted once per audit (db_value)
RESULT_COLUMNS = (
    "audit_id",
    "position",
    "analyzer_id",
    "category",
    "status",
    "error",
    "duration_ms",
    "score",
    "should_surface",
    "surfaced",
    "supplementary",
    "audit_created_at",
)
ANNOTATION_COLUMNS = (
    "audit_id",
    "result_id",
    "position",
    "analyzer_id",
    "type",
    "label",
    "severity",
    "description",
    "evidence",
    "start",
    "end",
    "audit_created_at",
)
_FINISHED_FIELDS = (
    "cleaned_response",
    "threshold",
    "overall_score",
    "has_card",
    "top_score",
    "top_analyzer",
    "surfacing_policy",
    "status",
    "finished_at",
    "error",
    "started_at",  # the start again (heartbeats refreshed it while running)
)


def _result_ids(audit_ids: list[Any], using: str) -> dict[tuple[Any, int], int]:
    """{(audit id as stored, position): result id} of these audits' results: one query,
    the audit ids compared as the driver gives them (no model, no UUID per row)."""

    connection = connections[using]
    quote = connection.ops.quote_name
    sql = (
        f"SELECT {quote('id')}, {quote('audit_id')}, {quote('position')} "
        f"FROM {quote(AnalyzerRunRecord._meta.db_table)} "
        f"WHERE {quote('audit_id')} IN ({', '.join(['%s'] * len(audit_ids))})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, audit_ids)
        return {(audit_id, position): pk for pk, audit_id, position in cursor.fetchall()}


def _finished_update(runs: list[AuditRun], using: str) -> Statement:
    """The UPDATE writing the finished runs' fields."""

    connection = connections[using]
    fields = [AuditRun._meta.get_field(name) for name in _FINISHED_FIELDS]
    quote = connection.ops.quote_name
    table, pk = quote(AuditRun._meta.db_table), quote(AuditRun._meta.pk.column)
    if connection.vendor == "sqlite":
        # One statement for every run, the values in a VALUES list (SQLite names its
        # columns column1, column2 …): a statement run per row hands the interpreter lock
        # back and forth once per run while the write lock is held (see audits.store.bulk).
        sets = ", ".join(f"{quote(f.column)} = v.column{i}" for i, f in enumerate(fields, 1))
        return Statement(
            f"UPDATE {table} SET {sets} FROM (VALUES ",
            _finished_rows(runs, fields, connection),
            using,
            row_group=row_group(len(fields) + 1),
            tail=f") AS v WHERE {table}.{pk} = v.column{len(fields) + 1}",
        )
    sql = (
        f"UPDATE {table} SET "
        + ", ".join(f"{quote(f.column)} = %s" for f in fields)
        + f" WHERE {pk} = %s"
    )
    types = [f.db_type(connection) for f in [*fields, AuditRun._meta.pk]]
    columns_sql = (
        f"UPDATE {table} SET "
        + ", ".join(f"{quote(f.column)} = v.c{i}" for i, f in enumerate(fields))
        + f" FROM unnest({', '.join(f'%s::{t}[]' for t in types)})"
        + f" AS v({', '.join(f'c{i}' for i in range(len(types)))})"
        + f" WHERE {table}.{pk} = v.c{len(fields)}"
    )
    return Statement(sql, _finished_rows(runs, fields, connection), using, columns_sql=columns_sql)


def _finished_rows(runs: list[AuditRun], fields: list[Any], connection: Any) -> list[list[Any]]:
    """Each run's finished fields and its id, as the driver takes them."""
    # Only the columns whose type needs it are converted (dates, the id), and the same
    # value (the batch's finish time) once.
    converters = [converter(f, connection) for f in [*fields, AuditRun._meta.pk]]
    rows = [
        [
            value if convert is None else convert(value)
            for value, convert in zip(
                [*(getattr(run, f.attname) for f in fields), run.pk], converters, strict=True
            )
        ]
        for run in runs
    ]
    return rows


def mark_failed(run_id: Any, error: str) -> None:
    AuditRun.objects.filter(pk=run_id).update(
        status=AuditRun.Status.FAILED, error=error[:10_000], finished_at=timezone.now()
    )
    publish(
        {
            "type": "audit_finished",
            "audit_id": str(run_id),
            "status": "failed",
            "overall_score": None,
            "has_card": False,
            "error": error[:500],
        }
    )
