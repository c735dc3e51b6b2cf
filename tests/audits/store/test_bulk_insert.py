"""audits.store.bulk.insert_rows: plain tuples in, the same rows as the ORM would store."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from audits.models import AnalyzerRunRecord, AuditRun, TraceLine
from audits.store.bulk import insert_rows

pytestmark = pytest.mark.django_db


def test_rows_are_stored_with_json_uuids_dates_and_the_defaults_of_columns_left_out():
    created = timezone.now() - timedelta(days=3)
    run_id = uuid.uuid4()
    columns = [
        "id",
        "request_hash",
        "user_input",
        "response",
        "sources",
        "metadata",
        "config_snapshot",
        "created_at",
    ]
    insert_rows(
        AuditRun,
        columns,
        [
            (
                run_id,
                "h" * 64,
                "question",
                "answer",
                [{"title": "t", "url": None}],
                {"nested": {"n": 1.5}, "list": [1, "two"]},
                {"threshold": 0.4},
                created,
            ),
        ],
    )
    run = AuditRun.objects.get(pk=run_id)
    assert run.sources == [{"title": "t", "url": None}]
    assert run.metadata == {"nested": {"n": 1.5}, "list": [1, "two"]}
    assert run.config_snapshot == {"threshold": 0.4}
    assert run.created_at == created
    # Left out: the field defaults.
    assert (run.status, run.options, run.threshold, run.has_card, run.attempts) == (
        "pending",
        {},
        0.3,
        False,
        0,
    )

    insert_rows(
        AnalyzerRunRecord,
        ["audit_id", "position", "analyzer_id", "supplementary", "audit_created_at", "surfaced"],
        [(run_id, i, f"a{i}", {"i": i}, created, i == 1) for i in range(3)],
    )
    records = list(run.results.order_by("position"))
    assert [(r.analyzer_id, r.supplementary, r.surfaced) for r in records] == [
        ("a0", {"i": 0}, False),
        ("a1", {"i": 1}, True),
        ("a2", {"i": 2}, False),
    ]
    assert {r.audit_created_at for r in records} == {created}
    assert len({r.pk for r in records}) == 3  # the database numbered them


def test_one_statement_for_every_row(django_assert_num_queries):
    run = AuditRun.objects.create(user_input="q", response="r")
    with django_assert_num_queries(1):
        assert (
            insert_rows(
                TraceLine,
                ["audit_id", "position", "text"],
                [(run.pk, i, f"[AUDIT] {i}") for i in range(250)],
            )
            == 250
        )
    assert list(run.trace_lines.values_list("text", flat=True))[:2] == ["[AUDIT] 0", "[AUDIT] 1"]
    assert insert_rows(TraceLine, ["audit_id", "text"], []) == 0


def test_rows_past_the_statement_size_go_in_further_statements_in_order(monkeypatch):
    """On PostgreSQL the rows go in by one COPY instead."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from audits.store import bulk

    monkeypatch.setattr(bulk, "MAX_ROWS_PER_INSERT", 3)
    run = AuditRun.objects.create(user_input="q", response="r")
    with CaptureQueriesContext(connection) as ctx:
        insert_rows(
            TraceLine,
            ["audit_id", "position", "text"],
            [(run.pk, i, f"line {i}") for i in range(7)],
        )
    sql = [q["sql"] for q in ctx.captured_queries]
    if connection.vendor == "postgresql":  # one COPY, whatever the number of rows
        assert len(sql) == 1 and sql[0].startswith('COPY "audits_traceline" (')
        assert sql[0].endswith("FROM STDIN (7 rows)")
    else:
        assert len(sql) == 3 and all(s.startswith('INSERT INTO "audits_traceline"') for s in sql)
        assert [s.count("line ") for s in sql] == [3, 3, 1]  # multi-row, not a step per row
    assert list(run.trace_lines.order_by("id").values_list("text", flat=True)) == [
        f"line {i}" for i in range(7)
    ]


def test_a_statement_holds_no_more_parameters_than_the_database_allows():
    import sqlite3

    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("SQLite's limit of parameters, lowered on this connection")
    run = AuditRun.objects.create(user_input="q", response="r")
    connection.ensure_connection()
    raw = connection.connection
    before = raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 7)  # two rows of three
    try:
        assert (
            insert_rows(
                TraceLine,
                ["audit_id", "position", "text"],
                [(run.pk, i, f"line {i}") for i in range(5)],
            )
            == 5
        )
    finally:
        raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, before)
    assert run.trace_lines.count() == 5


def test_a_statement_without_a_row_group_runs_once_per_row():
    from django.db import connection

    from audits.store.bulk import Statement, db_value, run_statement

    runs = [AuditRun.objects.create(user_input=f"q{i}", response="r") for i in range(3)]
    table = connection.ops.quote_name(AuditRun._meta.db_table)
    rows = [[f"new {i}", db_value(AuditRun, "id", run.pk)] for i, run in enumerate(runs)]
    update = Statement(f"UPDATE {table} SET response = %s WHERE id = %s", rows, "default")
    assert run_statement(update) == 3
    assert [AuditRun.objects.get(pk=run.pk).response for run in runs] == ["new 0", "new 1", "new 2"]


def test_a_primary_key_without_a_database_default_must_be_given():
    with pytest.raises(ValueError, match="primary key"):
        insert_rows(AuditRun, ["user_input"], [("q",)])
    assert not AuditRun.objects.exists()


def test_prepared_columns_are_passed_to_the_driver_as_they_are():
    import json

    from audits.store.bulk import db_value

    run = AuditRun.objects.create(user_input="q", response="r")
    audit_id = db_value(AuditRun, "id", run.pk)  # converted once, e.g. for every table
    created = db_value(AuditRun, "created_at", run.created_at)
    insert_rows(
        AnalyzerRunRecord,
        ["audit_id", "position", "analyzer_id", "supplementary", "audit_created_at"],
        [(audit_id, 0, "tone", json.dumps({"k": [1, 2]}), created)],
        prepared=("audit_id", "supplementary", "audit_created_at"),
    )
    record = run.results.get()
    # Encoded once: a second conversion would have stored the JSON text as a JSON string.
    assert record.supplementary == {"k": [1, 2]}
    assert record.audit_created_at == run.created_at


def test_a_batch_of_reports_stores_each_annotation_under_its_own_result():
    """The reports' rows are built before the write transaction, each annotation keyed by
    its result's (audit, position) until the new results' ids are read inside it."""
    from audits.execution import execute
    from audits.intake import submit
    from audits.models import Annotation

    responses = [
        "See [docs](https://evil.example/a) and [more](https://evil.example/b).",
        "Decathlon grew conversion by 50%. Read [this](https://other.example/x).",
        "Plain answer with [one link](https://third.example/y).",
    ]
    runs = [
        submit.submit_audit(user_input=f"q{i}", response=text, enqueue=False)
        for i, text in enumerate(responses)
    ]
    outcome = execute.execute_runs([run.pk for run in runs])
    assert set(outcome.values()) == {"complete"}
    annotations = list(Annotation.objects.select_related("result"))
    assert {a.audit_id for a in annotations} == {run.pk for run in runs}
    for a in annotations:
        assert a.result.audit_id == a.audit_id
        assert a.result.analyzer_id == a.analyzer_id
    for run in runs:
        stored = [(a.result.position, a.position) for a in annotations if a.audit_id == run.pk]
        report = [
            (i, j)
            for i, r in enumerate(run.results.order_by("position"))
            for j in range(r.annotations.count())
        ]
        assert sorted(stored) == report
