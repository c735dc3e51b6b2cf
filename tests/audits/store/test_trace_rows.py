"""A stored report's trace lines in one row, read back line by line everywhere
(audits.store.trace_rows): the API, the export, the detail page and the Live catch-up."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from analyzers.engine.contract import AuditReport
from audits.cards import cards
from audits.execution.execute import store_report
from audits.live import fragments
from audits.models import AuditRun, TraceLine
from audits.store.trace_rows import Line, first_lines, line_count, lines_after, lines_of, packed
from tests.migrating import migrate_to

pytestmark = pytest.mark.django_db

LINES = [f"[AUDIT] line {i}" for i in range(600)]


def _stored(trace: list[str]) -> AuditRun:
    run = AuditRun.objects.create(user_input="q", response="r", status="running")
    report = AuditReport(
        threshold=0.3, overall_score=0.0, results=[], cleaned_response="r", trace=trace
    )
    store_report(run, report, fresh=True)
    return run


def test_rows_hold_lines_and_give_them_back_in_order_with_their_positions():
    rows = [(0, packed(["a", "", "b"])), (3, "c"), (4, packed(["d", "e"]))]
    assert list(lines_of(rows)) == [
        Line(0, "a"),
        Line(1, ""),
        Line(2, "b"),
        Line(3, "c"),
        Line(4, "d"),
        Line(5, "e"),
    ]
    # a trace line is one line: a break inside one is kept as a space
    assert packed(["x\ny", "z"]) == "x y\nz"
    assert packed(["x\r\ny"]) == "x\r y"  # only "\n" separates lines


def test_a_stored_report_is_one_row_and_reads_back_as_its_lines():
    run = _stored([*LINES[:5], "[AUDIT] two\nlines", *LINES[5:]])
    rows = TraceLine.objects.filter(audit=run)
    assert rows.count() == 1
    expected = [*LINES[:5], "[AUDIT] two lines", *LINES[5:]]
    assert line_count(rows) == 601
    assert [line.text for line in first_lines(rows, 7)] == expected[:7]
    after = lines_after(rows, 299, 500)
    assert [line.position for line in after] == list(range(300, 601))
    assert [line.text for line in after] == expected[300:]
    assert lines_after(rows, 600, 500) == []


def test_no_trace_stores_no_row():
    run = _stored([])
    assert not TraceLine.objects.filter(audit=run).exists()
    assert line_count(TraceLine.objects.filter(audit=run)) == 0


def test_a_streams_rows_of_one_line_each_read_the_same_way():
    run = AuditRun.objects.create(user_input="q", response="r", status="running")
    TraceLine.objects.bulk_create(
        [TraceLine(audit=run, position=i, text=t) for i, t in enumerate(LINES[:10])]
    )
    rows = TraceLine.objects.filter(audit=run)
    assert line_count(rows) == 10
    assert [line.position for line in lines_after(rows, 3, 4)] == [4, 5, 6, 7]


def test_the_api_the_export_and_the_pages_read_every_line(api_client, staff_user):
    run = _stored(LINES)
    detail = api_client.get(f"/api/audits/{run.pk}")
    assert detail.status_code == 200
    assert detail.json()["trace"] == LINES
    export = api_client.get("/api/audits/export", {"format": "jsonl"})
    (line,) = b"".join(export.streaming_content).decode().split("\n")[:-1]
    assert json.loads(line)["trace"] == LINES

    client = Client()
    client.force_login(staff_user)
    html = client.get(reverse("audits:detail", args=[run.pk])).content.decode()
    rows = cards.DETAIL_ROWS
    assert f"The first {rows} of 600 trace lines" in html
    assert f'id="trace-{run.pk}-{rows - 1}">[AUDIT] line {rows - 1}<' in html
    assert f"[AUDIT] line {rows}<" not in html

    # the Live page catching up from the middle of the row: the rest, in batches
    text, last = fragments.trace_lines_after(run.pk, 99)
    assert last == 99 + fragments.TRACE_BATCH
    assert f'id="trace-{run.pk}-100">[AUDIT] line 100<' in text
    assert f"[AUDIT] line {last}<" in text and f"[AUDIT] line {last + 1}<" not in text
    assert fragments.trace_lines_after(run.pk, 599) == ("", 599)


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_a_break_inside_an_older_line_as_a_space():
    before = ("audits", "0010_audit_ids_ordered_by_time")
    after = ("audits", "0011_trace_lines_without_breaks")
    old = migrate_to(before)
    run = old.get_model("audits", "AuditRun").objects.create(status="complete")
    old.get_model("audits", "TraceLine").objects.create(
        audit_id=run.pk, position=0, text="[AUDIT] a\nb"
    )
    migrate_to(after)
    assert TraceLine.objects.get().text == "[AUDIT] a b"
    migrate_to()
