"""Submitting a batch and analysing it never reads a whole table that grows with the audits.

Every statement of `submit_audits` and `execute_runs` (claim, duplicate checks, storing) is
planned by SQLite here and must seek its rows through an index: a full scan is invisible
on a test database and costs a read of every audit, digest or annotation ever stored once
the database is large (the duplicate checks' read once scanned every digest, once per
batch). Scans of a statement's own VALUES rows, and of tables that stay small
(`SMALL_TABLES`: a row per configuration, re-surfacing job or alert rule, the rules read
when their cache was emptied by an earlier test), are allowed.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audits.api.router import AuditIn, _item_fields
from audits.execution import execute, queueing
from audits.intake import submit

SMALL_TABLES = {"audits_alertrule", "audits_resurfacejob", "audits_surfacingpolicy"}

pytestmark = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query plans")


def _body(i: int) -> dict:
    """An audit with links, bare URLs, a claim and a source: rows in every table."""
    return {
        "user_input": f"Question {i}: how do I tune search relevance?",
        "response": (
            f"Answer {i}. Decathlon grew conversion by 50% with Acme. See "
            "[the docs](https://www.acme.example/docs), https://evil.example/x and "
            "www.other.example/p for details.\n\nTune synonyms first."
        ),
        "sources": [{"title": "Docs", "url": "https://www.acme.example/docs", "text": "x"}],
        "metadata": {"session": "plans"},
    }


def _submit(first: int, n: int) -> list:
    items = [_item_fields(AuditIn.model_validate(_body(i))) for i in range(first, first + n)]
    return submit.submit_audits(items)


def _table_scans(sql: str) -> list[str]:
    """The steps of `sql`'s plan that scan a table (by its name or an alias): not the
    statement's own VALUES rows ("SCAN 32 CONSTANT ROWS", a materialized CTE)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        plan = [str(row[-1]) for row in cursor.fetchall()]
    own_rows = {step.split()[1] for step in plan if step.startswith("MATERIALIZE ")}
    return [
        step
        for step in plan
        if (m := re.match(r"SCAN (\w+)", step))
        and not m.group(1).isdigit()
        and m.group(1) not in own_rows | SMALL_TABLES
    ]


@pytest.mark.django_db
def test_submitting_and_analysing_a_batch_seek_every_row(monkeypatch):
    monkeypatch.setattr(queueing, "enqueue_audits", lambda queued: None)  # run here, below
    execute.execute_runs([run.pk for run in _submit(0, 40)])  # rows in every table
    with CaptureQueriesContext(connection) as queries:
        runs = _submit(100, 32)
        outcome = execute.execute_runs([run.pk for run in runs])
    assert set(outcome.values()) == {"complete"}
    statements = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith(("SELECT", "WITH", "UPDATE", "INSERT", "DELETE"))
    ]
    for table in (
        "audits_collisiondigest",
        "audits_annotation",
        "audits_traceline",
        "audits_auditlinks",
    ):  # the whole path ran
        assert any(table in sql for sql in statements), table
    scans = {sql[:120]: found for sql in statements if (found := _table_scans(sql))}
    assert not scans, scans
