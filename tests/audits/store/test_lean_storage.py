"""Fewer index entries per stored audit, with every reader's plan kept.

Migration 0009 made the results' two audit-related indexes one (audit, analyzer_id,
surfaced), and dropped the trace lines' audit index (their unique (audit, position) leads
with it). Migration 0013 moved the annotations' type, severity and trends indexes to one
`AnnotationKind` row per (audit, type, severity): the list filters on a rare type or
severity still seek (type, audit) and (severity, audit), with one entry per pair instead of
one per annotation.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from audits.models import (
    AlertRule,
    AnalyzerRunRecord,
    Annotation,
    AnnotationKind,
    AuditRun,
    TraceLine,
)
from audits.review.alert_rules import matching_audits
from audits.store.link_rows import link_dicts, row_text
from audits.store.queries import AuditFilters, filter_audits
from audits.store.trace_rows import lines_of
from tests.factories import annotation, make_audit, result
from tests.migrating import migrate_to

SQLITE_PLANS = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="SQLite's query plans (EXPLAIN QUERY PLAN)"
)

KINDS_BEFORE, KINDS = ("audits", "0012_links_in_one_row"), ("audits", "0013_annotation_kinds")
BEFORE, LEAN = (
    ("audits", "0008_surfacing_policies_and_collision_families"),
    ("audits", "0009_leaner_child_indexes"),
)


def _indexes(table: str) -> dict[str, list[str]]:
    """The table's indexes (unique constraints' included): name -> columns."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return {
        name: info["columns"]
        for name, info in constraints.items()
        if (info["index"] or info["unique"]) and not info["primary_key"]
    }


def _plan(qs) -> str:
    return qs.explain()


@pytest.mark.django_db
def test_results_and_trace_lines_keep_one_index_per_reader():
    assert sorted(_indexes(AnalyzerRunRecord._meta.db_table).values()) == sorted(
        [
            ["audit_id", "analyzer_id", "surfaced"],  # by audit, and the analyzer filters
            ["audit_created_at", "analyzer_id", "status", "surfaced", "duration_ms"],  # trends
        ]
    )
    assert list(_indexes(TraceLine._meta.db_table).values()) == [["audit_id", "position"]]


@pytest.mark.django_db
def test_annotations_keep_their_two_foreign_key_indexes_and_kinds_carry_the_filters():
    assert sorted(_indexes(Annotation._meta.db_table).values()) == [["audit_id"], ["result_id"]]
    assert sorted(_indexes(AnnotationKind._meta.db_table).values()) == sorted(
        [
            ["audit_id", "type", "severity"],  # unique: one row per pair, and by audit
            ["type", "audit_id"],
            ["severity", "audit_id"],
            ["audit_created_at", "type", "severity", "count"],  # covering, for the trends
        ]
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("filters", "seek"),
    [
        (AuditFilters(type="dismissive"), "kind_type_idx (type=? AND audit_id=?)"),
        (AuditFilters(severity="critical"), "kind_severity_idx (severity=? AND audit_id=?)"),
    ],
)
@SQLITE_PLANS
def test_list_filters_on_annotations_seek_the_value_first(filters, seek):
    """A rare type or severity: its few entries are together, one cheap probe per audit."""
    plan = _plan(filter_audits(filters).order_by("-created_at", "-id")[:50])
    assert f"COVERING INDEX {seek}" in plan, plan


@pytest.mark.django_db
@SQLITE_PLANS
def test_the_analyzer_filter_is_a_covering_seek_per_audit():
    plan = _plan(filter_audits(AuditFilters(analyzer="tone")).order_by("-created_at", "-id")[:50])
    assert (
        "COVERING INDEX result_audit_idx (audit_id=? AND analyzer_id=? AND surfaced=?)" in plan
    ), plan
    rule = AlertRule(name="r", analyzer_id="tone", webhook_url="https://hooks.example/x")
    plan = _plan(matching_audits(rule, timezone.now() - timedelta(days=1)))
    assert (
        "COVERING INDEX result_audit_idx (audit_id=? AND analyzer_id=? AND surfaced=?)" in plan
    ), plan


@pytest.mark.django_db
def test_readers_by_audit_seek_an_index():
    run = make_audit(
        results=[result("tone", 0.5, [annotation("dismissive")])], trace=["[AUDIT] a", "[AUDIT] b"]
    )
    for qs in (
        AnalyzerRunRecord.objects.filter(audit_id__in=[run.pk]).order_by("audit_id", "position"),
        AnalyzerRunRecord.objects.filter(audit_id=run.pk, surfaced=True),
        Annotation.objects.filter(audit_id=run.pk, result__surfaced=True),
        Annotation.objects.filter(audit_id__in=[run.pk]).order_by("audit_id", "position"),
        TraceLine.objects.filter(audit_id__in=[run.pk]).order_by("audit_id", "position"),
        TraceLine.objects.filter(audit_id=run.pk, position__gt=0).order_by("position"),
    ):
        plan = _plan(qs)
        assert "SCAN audits_" not in plan, plan
    assert [t.text for t in run.trace_lines.order_by("position")] == ["[AUDIT] a", "[AUDIT] b"]


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_the_rows_and_swaps_only_indexes_both_ways():
    old = migrate_to(BEFORE)
    tables = ("audits_analyzerrunrecord", "audits_annotation", "audits_traceline")
    before = {t: _indexes(t) for t in tables}
    assert "result_analyzer_idx" in before["audits_analyzerrunrecord"]
    assert ["audit_id"] in before["audits_traceline"].values()
    run = old.get_model("audits", "AuditRun").objects.create(status="complete")
    record = old.get_model("audits", "AnalyzerRunRecord").objects.create(
        audit_id=run.pk, analyzer_id="tone", audit_created_at=run.created_at
    )
    old.get_model("audits", "Annotation").objects.create(
        audit_id=run.pk,
        result_id=record.pk,
        analyzer_id="tone",
        type="dismissive",
        audit_created_at=run.created_at,
    )
    old.get_model("audits", "TraceLine").objects.create(audit_id=run.pk, position=0, text="x")

    migrate_to(LEAN)
    assert _indexes("audits_annotation") == before["audits_annotation"]
    assert "result_analyzer_idx" not in _indexes("audits_analyzerrunrecord")
    assert ["audit_id"] not in _indexes("audits_analyzerrunrecord").values()
    assert ["audit_id"] not in _indexes("audits_traceline").values()
    assert Annotation.objects.get().type == "dismissive"
    assert AnalyzerRunRecord.objects.get().audit_id == run.pk
    assert TraceLine.objects.get().audit_id == run.pk

    migrate_to(BEFORE)  # back: the same indexes, by the same names
    assert {t: _indexes(t) for t in before} == before
    migrate_to()
    assert AuditRun.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_kinds_migration_counts_the_stored_annotations_and_goes_back():
    old = migrate_to(KINDS_BEFORE)
    before = _indexes("audits_annotation")
    assert "annotation_type_idx" in before
    run = old.get_model("audits", "AuditRun").objects.create(status="complete")
    other = old.get_model("audits", "AuditRun").objects.create(status="complete")
    record = old.get_model("audits", "AnalyzerRunRecord").objects.create(
        audit_id=run.pk, analyzer_id="links", audit_created_at=run.created_at
    )
    for audit, type_, severity in [(run, "LINK_HOST_NOT_ALLOWED", "warning")] * 3 + [
        (run, "LINK_HOST_NOT_ALLOWED", "critical"),
        (other, "sycophancy", "info"),
    ]:
        old.get_model("audits", "Annotation").objects.create(
            audit_id=audit.pk,
            result_id=record.pk,
            analyzer_id="links",
            type=type_,
            severity=severity,
            audit_created_at=audit.created_at,
        )

    migrate_to(KINDS)
    assert _kinds(run) == {
        ("LINK_HOST_NOT_ALLOWED", "warning"): 3,
        ("LINK_HOST_NOT_ALLOWED", "critical"): 1,
    }
    assert _kinds(other) == {("sycophancy", "info"): 1}
    assert AnnotationKind.objects.get(audit_id=other.pk).audit_created_at == other.created_at
    assert filter_audits(AuditFilters(severity="critical")).get().pk == run.pk
    assert "annotation_type_idx" not in _indexes("audits_annotation")

    migrate_to(KINDS_BEFORE)  # back: the annotations' indexes again
    assert _indexes("audits_annotation") == before
    migrate_to()
    assert Annotation.objects.count() == 5


@pytest.mark.django_db(transaction=True)
def test_a_batch_stores_each_reports_rows_under_its_own_audit_and_result(monkeypatch):
    from audits.execution import execute
    from audits.intake import submit

    responses = [
        "Everyone agrees Acme is the best search engine, obviously. See https://a.example/x.",
        "Namedrop: Decathlon. Decathlon grew conversion by 50%.",
        "Read [this article](https://random-blog.example.org/tips) first.",
    ]
    runs = [
        submit.submit_audit(user_input="Which retailers use Acme?", response=text, enqueue=False)
        for text in responses
    ]
    reports = {}
    store = execute.store_reports

    def recording(pairs, **kwargs):
        reports.update({run.pk: report for run, report in pairs})
        return store(pairs, **kwargs)

    monkeypatch.setattr(execute, "store_reports", recording)
    assert set(execute.execute_runs([r.pk for r in runs]).values()) == {"complete"}
    assert len(reports) == 3
    for run in runs:
        report = reports[run.pk]
        stored = list(AnalyzerRunRecord.objects.filter(audit=run).order_by("position"))
        assert [r.analyzer_id for r in stored] == [r.analyzer_id for r in report.results]
        for record, outcome in zip(stored, report.results, strict=True):
            assert [(a.type, a.start, a.end) for a in record.annotations.order_by("position")] == [
                (a.type, a.start, a.end) for a in outcome.annotations
            ]
            assert set(record.annotations.values_list("audit_id", flat=True)) <= {run.pk}
            assert record.audit_created_at == AuditRun.objects.get(pk=run.pk).created_at
        rows = run.trace_lines.order_by("position").values_list("position", "text")
        assert [line.text for line in lines_of(rows)] == list(report.trace)
        assert len(rows) == 1  # one row per stored audit (audits.store.trace_rows)
        assert [link["url"] for link in link_dicts(row_text(run))] == [
            link.url for link in report.links
        ]  # one row per audit (audits.store.link_rows)
        assert _kinds(run) == Counter(
            (a.type, a.severity) for r in report.results for a in r.annotations
        )
    assert (
        Annotation.objects.count()
        == sum(len(r.annotations) for report in reports.values() for r in report.results)
        > 0
    )


class _Count:
    """The server's count of requests waiting for the write lock (a shared RawValue)."""

    def __init__(self, value: int) -> None:
        self.value = value


def _reports(n: int):
    """`n` submitted runs and reports for them (a result with 0-2 findings, a trace line)."""
    from analyzers.engine.contract import AnalyzerRun, AuditReport
    from analyzers.engine.contract import Annotation as Finding
    from audits.intake import submit

    runs = [submit.submit_audit(user_input="q", response=f"r{i}", enqueue=False) for i in range(n)]
    finding = Finding(type="sycophancy", label="s", severity="warning", description="d")
    return [
        (
            run,
            AuditReport(
                threshold=0.3,
                overall_score=0.5,
                cleaned_response=f"clean {i}",
                trace=[f"t{i}"],
                results=[
                    AnalyzerRun(
                        analyzer_id="bias",
                        category="bias",
                        score=0.5,
                        status="ok",
                        annotations=[finding] * (i % 3),
                    )
                ],
            ),
        )
        for i, run in enumerate(runs)
    ]


def _kinds(run) -> dict[tuple[str, str], int]:
    return {(k.type, k.severity): k.count for k in AnnotationKind.objects.filter(audit_id=run.pk)}


def _assert_stored(pairs) -> None:
    for i, (run, _) in enumerate(pairs):
        run.refresh_from_db()
        assert (run.status, run.cleaned_response) == ("complete", f"clean {i}")
        record = AnalyzerRunRecord.objects.get(audit=run)  # one result, not two
        assert record.annotations.count() == i % 3
        assert _kinds(run) == ({("sycophancy", "warning"): i % 3} if i % 3 else {})
        assert [
            line.text for line in lines_of(run.trace_lines.values_list("position", "text"))
        ] == [f"t{i}"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("waiting", "transactions"), [(0, 1), (1, 3)])
def test_a_batch_commits_between_chunks_only_while_a_request_waits_for_the_lock(
    monkeypatch, waiting, transactions
):
    """20 reports: one transaction, or (a request waiting) a commit after each chunk of
    STORE_CHUNK (8, 8, 4), the request's turn between them; stored alike either way."""
    from django.test.utils import CaptureQueriesContext

    from analyzers import lock_wait
    from audits.execution import execute
    from audits.surfacing.policies import current_policy

    monkeypatch.setattr(lock_wait, "_requests_waiting", _Count(waiting))
    monkeypatch.setattr(lock_wait, "_deferring", False)
    pairs = _reports(20)
    current_policy()  # made on first use, in a transaction of its own
    with CaptureQueriesContext(connection) as queries:
        execute.store_reports(pairs, fresh=True)
    begins = [q for q in queries.captured_queries if q["sql"].startswith("BEGIN")]
    assert len(begins) == transactions
    _assert_stored(pairs)


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_fails_after_a_committed_chunk_is_stored_again_from_a_clean_slate(
    monkeypatch,
):
    from analyzers import lock_wait
    from audits.execution import execute
    from audits.store import reports

    monkeypatch.setattr(lock_wait, "_requests_waiting", _Count(1))
    monkeypatch.setattr(lock_wait, "_deferring", False)
    pairs = _reports(20)
    write, calls = reports._write_chunk, []

    def failing_second(*args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the disk is full")
        return write(*args)

    monkeypatch.setattr(reports, "_write_chunk", failing_second)
    with pytest.raises(RuntimeError):
        execute.store_reports(pairs, fresh=True)
    assert AuditRun.objects.filter(status="complete").count() == reports.STORE_CHUNK
    monkeypatch.setattr(reports, "_write_chunk", write)
    execute.store_reports(pairs, fresh=execute._nothing_stored([r for r, _ in pairs]))
    _assert_stored(pairs)


@pytest.mark.django_db
@SQLITE_PLANS
def test_a_chunk_of_runs_is_finished_by_one_update_that_seeks_each_run_by_its_id():
    """One statement, not a step per run (each step handed the interpreter lock back and
    forth while the write lock was held), and no scan of the runs' table."""
    from django.test.utils import CaptureQueriesContext

    from audits.execution import execute
    from audits.store import reports

    pairs = _reports(5)
    with CaptureQueriesContext(connection) as ctx:
        execute.store_reports(pairs, fresh=True)
    updates = [
        q["sql"] for q in ctx.captured_queries if 'UPDATE "audits_auditrun"' in q["sql"][:40]
    ]
    assert len(updates) == 1 and updates[0].startswith("UPDATE"), updates  # not "5 times:"
    _assert_stored(pairs)

    statement = reports._finished_update([run for run, _ in pairs], "default")
    sql = statement.sql + ", ".join([statement.row_group] * 5) + statement.tail
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, [v for row in statement.rows for v in row])
        plan = " | ".join(row[-1] for row in cursor.fetchall())
    assert "SEARCH audits_auditrun USING COVERING INDEX" in plan and "(id=?)" in plan, plan
    assert "SCAN audits_auditrun" not in plan, plan


@pytest.mark.django_db
@SQLITE_PLANS
def test_the_trends_top_types_read_only_the_kinds_covering_index():
    from django.db.models import Sum

    from audits.dashboard.trend_stats import _grouped

    make_audit(results=[result("tone", 0.5, [annotation("dismissive")] * 3)])
    now = timezone.now()
    day = [(None, now - timedelta(days=1), now + timedelta(days=1))]
    qs = (
        AnnotationKind.objects.filter(
            audit_created_at__gte=day[0][1], audit_created_at__lt=day[0][2]
        )
        .values("type", "severity")
        .annotate(n=Sum("count"))
        .order_by()
    )
    assert "COVERING INDEX kind_trends_idx (audit_created_at>? AND audit_created_at<?)" in (
        _plan(qs)
    ), _plan(qs)
    rows = [
        row
        for _, row in _grouped(
            AnnotationKind.objects.all(),
            "audit_created_at",
            day,
            [0],
            ["type", "severity"],
            n=Sum("count"),
        )
    ]
    assert [(r["type"], r["n"]) for r in rows] == [("dismissive", 3)]
