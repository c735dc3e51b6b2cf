"""Measured quality: precision from reviewers' verdicts, over time, and threshold evidence.

One known set of verdicts (the `verdicts` fixture) with every rule in it: an annotation's
own verdict overrides the whole audit's, superseded verdicts are ignored, unsure verdicts
are counted but not decisions, findings of results that did not surface and of audits
nobody reviewed are left out, and forced results are never hidden by a threshold.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from analyzers.config_store import load_config
from audits.dashboard import quality
from audits.models import Annotation, AuditRun
from audits.store.verdicts import record_review
from tests.factories import annotation, make_audit, result


def _ann(run: AuditRun, type: str) -> int:
    return Annotation.objects.get(audit=run, type=type).pk


@pytest.fixture
def verdicts(db) -> dict[str, AuditRun]:
    now = timezone.now()
    # Whole audit confirmed; its EMPTY_OUTPUT finding marked a false positive on its own.
    # The tone result did not surface: its finding is never counted.
    a = make_audit(
        results=[
            result("redflag", 0.8, [annotation("TOO_MANY_CHARS"), annotation("EMPTY_OUTPUT")]),
            result("tone", 0.1, [annotation("dismissive")]),
        ],
        created_at=now - timedelta(days=3),
    )
    record_review(audit_id=a.pk, verdict="confirmed")
    record_review(audit_id=a.pk, annotation_id=_ann(a, "EMPTY_OUTPUT"), verdict="false_positive")
    # Whole audit first called a false positive, then confirmed (the first is superseded);
    # the sycophancy finding is unsure.
    b = make_audit(
        results=[
            result("grounding", 0.9, [annotation("UNGROUNDED_CUSTOMER_CLAIM", "critical")]),
            result("bias", 0.5, [annotation("sycophancy")]),
        ],
        created_at=now - timedelta(days=10),
    )
    record_review(audit_id=b.pk, verdict="false_positive")
    record_review(audit_id=b.pk, verdict="confirmed")
    record_review(audit_id=b.pk, annotation_id=_ann(b, "sycophancy"), verdict="unsure")
    # Only one finding reviewed (confirmed, then changed to a false positive); the other
    # has no verdict of its own and the audit none as a whole: unreviewed.
    c = make_audit(
        results=[result("bias", 0.4, [annotation("sycophancy"), annotation("false_consensus")])],
        created_at=now - timedelta(days=10),
    )
    record_review(audit_id=c.pk, annotation_id=_ann(c, "sycophancy"), verdict="confirmed")
    record_review(audit_id=c.pk, annotation_id=_ann(c, "sycophancy"), verdict="false_positive")
    # Nobody reviewed this one.
    make_audit(
        results=[result("redflag", 0.9, [annotation("EMPTY_OUTPUT", "critical")])],
        created_at=now - timedelta(days=1),
    )
    # A forced result (score below any threshold) called a false positive as a whole.
    d = make_audit(
        results=[result("prompt_leak", 0.05, [annotation("PROMPT_LEAK")], should_surface=True)],
        created_at=now - timedelta(days=40),
    )
    record_review(audit_id=d.pk, verdict="false_positive")
    return {"a": a, "b": b, "c": c, "d": d}


def _counts(rows: list[quality.Precision]) -> dict[str, tuple[int, int, int]]:
    return {r.key: (r.confirmed, r.false_positive, r.unsure) for r in rows}


# --- precision -----------------------------------------------------------------------------


def test_effective_verdicts_follow_the_rules(verdicts):
    got = {(f.audit_id, f.type): f.verdict for f in quality.reviewed_findings()}
    assert got == {
        (verdicts["a"].pk, "TOO_MANY_CHARS"): "confirmed",  # the whole audit's verdict
        (verdicts["a"].pk, "EMPTY_OUTPUT"): "false_positive",  # its own overrides it
        (verdicts["b"].pk, "UNGROUNDED_CUSTOMER_CLAIM"): "confirmed",  # not the superseded one
        (verdicts["b"].pk, "sycophancy"): "unsure",
        (verdicts["c"].pk, "sycophancy"): "false_positive",  # latest of its own verdicts
        (verdicts["d"].pk, "PROMPT_LEAK"): "false_positive",
    }


def test_precision_by_analyzer_from_known_verdicts(verdicts):
    rows = quality.precision_by_analyzer()
    assert _counts(rows) == {
        "redflag": (1, 1, 0),
        "grounding": (1, 0, 0),
        "bias": (0, 1, 1),
        "prompt_leak": (0, 1, 0),
    }
    by_key = {r.key: r for r in rows}
    assert by_key["redflag"].precision == pytest.approx(0.5)
    assert by_key["redflag"].decided == 2
    assert by_key["bias"].precision == 0.0 and by_key["bias"].decided == 1  # unsure left out
    assert by_key["grounding"].percent == 100.0
    overall = quality.total(rows)
    assert (overall.confirmed, overall.false_positive, overall.unsure) == (2, 3, 1)
    assert overall.percent == 40.0


def test_precision_by_type_from_known_verdicts(verdicts):
    assert _counts(quality.precision_by_type()) == {
        "TOO_MANY_CHARS": (1, 0, 0),
        "EMPTY_OUTPUT": (0, 1, 0),  # the unreviewed audit's EMPTY_OUTPUT is not counted
        "UNGROUNDED_CUSTOMER_CLAIM": (1, 0, 0),
        "sycophancy": (0, 1, 1),
        "PROMPT_LEAK": (0, 1, 0),
    }


def test_a_group_with_only_unsure_verdicts_has_no_precision():
    row = quality.Precision(key="tone", unsure=3)
    assert row.decided == 0 and row.reviewed == 3
    assert row.precision is None and row.percent is None


def test_precision_respects_the_time_window(verdicts):
    now = timezone.now()
    recent = quality.precision_by_analyzer(since=now - timedelta(days=7), until=now)
    assert _counts(recent) == {"redflag": (1, 1, 0)}


def test_no_verdicts_no_figures(db):
    make_audit(results=[result("redflag", 0.9, [annotation("EMPTY_OUTPUT")])])
    assert quality.precision_by_analyzer() == []
    assert quality.total([]).precision is None


# --- over time -----------------------------------------------------------------------------

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)  # a Wednesday


def _reviewed_audit(created_at: datetime, verdict: str, analyzer: str = "redflag") -> AuditRun:
    run = make_audit(
        results=[result(analyzer, 0.8, [annotation("TOO_MANY_CHARS")])], created_at=created_at
    )
    record_review(audit_id=run.pk, verdict=verdict)
    return run


def test_precision_over_time_is_bucketed_per_week_from_monday(db):
    _reviewed_audit(datetime(2026, 11, 24, 9, tzinfo=UTC), "confirmed")  # Tue, this week
    _reviewed_audit(datetime(2026, 11, 23, 0, 30, tzinfo=UTC), "false_positive")  # Mon, this week
    _reviewed_audit(datetime(2026, 11, 22, 23, 30, tzinfo=UTC), "confirmed", "tone")  # Sun, last
    _reviewed_audit(datetime(2026, 11, 10, 9, tzinfo=UTC), "unsure")  # two weeks earlier
    _reviewed_audit(datetime(2026, 9, 1, 9, tzinfo=UTC), "confirmed")  # outside the window
    series = quality.precision_over_time(since=NOW - timedelta(days=30), until=NOW, bucket="week")
    chart = series.chart()
    # The window starts on Monday 2026-10-26 (30 days before NOW).
    assert chart["labels"] == ["2026-10-26", "2026-11-02", "2026-11-09", "2026-11-16", "2026-11-23"]
    overall = chart["series"][0]
    assert overall["label"] == "all analyzers"
    assert overall["precision"] == [None, None, None, 100.0, 50.0]
    assert overall["n"] == [0, 0, 0, 1, 2]
    assert series.overall[2].unsure == 1  # counted, not decided
    per = {s["label"]: s for s in chart["series"][1:]}
    assert per["redflag"]["precision"] == [None, None, None, None, 50.0]
    assert per["tone"]["precision"] == [None, None, None, 100.0, None]


def test_precision_over_time_per_day_for_short_windows(db):
    _reviewed_audit(datetime(2026, 11, 24, 9, tzinfo=UTC), "confirmed")
    _reviewed_audit(datetime(2026, 11, 24, 18, tzinfo=UTC), "false_positive")
    _reviewed_audit(datetime(2026, 11, 20, 9, tzinfo=UTC), "false_positive")
    assert quality.bucket_for(7) == "day" and quality.bucket_for(30) == "week"
    chart = quality.precision_over_time(
        since=NOW - timedelta(days=7), until=NOW, bucket="day"
    ).chart()
    assert chart["labels"][0] == "2026-11-18" and chart["labels"][-1] == "2026-11-25"
    overall = dict(zip(chart["labels"], chart["series"][0]["precision"], strict=True))
    assert overall["2026-11-24"] == 50.0
    assert overall["2026-11-20"] == 0.0
    assert overall["2026-11-21"] is None


# --- threshold evidence --------------------------------------------------------------------


def test_threshold_evidence_counts_at_several_thresholds(verdicts):
    evidence = quality.threshold_evidence(
        threshold=0.45, candidates=[0.0, 0.3, 0.45, 0.8, 0.85, 0.95, 1.0]
    )
    # Decided findings the global threshold governs: a (0.8: C + FP), b (0.9: C), c (0.4: FP),
    # d (forced: FP, never hidden). b's unsure finding is neither.
    assert (evidence.fp_total, evidence.confirmed_total, evidence.unsure_total) == (3, 2, 1)
    got = {r.threshold: (r.fp_hidden, r.confirmed_lost) for r in evidence.rows}
    assert got == {
        0.0: (0, 0),
        0.3: (0, 0),
        0.45: (1, 0),  # c's false positive
        0.8: (1, 0),  # a score equal to the threshold still surfaces
        0.85: (2, 1),  # a's two findings
        0.95: (2, 2),  # and b's confirmed one
        1.0: (2, 2),  # the forced false positive always surfaces
    }
    assert evidence.selected.threshold == 0.45 and evidence.selected.selected
    assert [r.selected for r in evidence.rows].count(True) == 1


def test_threshold_evidence_default_grid_includes_the_selected_value(verdicts):
    evidence = quality.threshold_evidence(threshold=0.42)
    thresholds = [r.threshold for r in evidence.rows]
    assert thresholds[0] == 0.0 and thresholds[-1] == 1.0 and 0.05 in thresholds
    assert 0.42 in thresholds and len(thresholds) == 22
    assert (evidence.selected.fp_hidden, evidence.selected.confirmed_lost) == (1, 0)


def test_threshold_evidence_for_one_analyzers_own_threshold(verdicts):
    evidence = quality.threshold_evidence(threshold=0.45, analyzer="bias", candidates=[0.45])
    assert (evidence.fp_total, evidence.confirmed_total, evidence.unsure_total) == (1, 0, 1)
    assert (evidence.selected.fp_hidden, evidence.selected.confirmed_lost) == (1, 0)


def test_global_evidence_leaves_out_analyzers_with_their_own_threshold(verdicts):
    config = load_config()
    config = config.model_copy(
        update={"analyzers": {**config.analyzers, "bias": {"threshold": 0.5}}}
    )
    evidence = quality.threshold_evidence(threshold=0.45, config=config, candidates=[0.45, 0.95])
    assert evidence.own_threshold_analyzers == ["bias"]
    assert (evidence.fp_total, evidence.confirmed_total) == (2, 2)
    got = {r.threshold: (r.fp_hidden, r.confirmed_lost) for r in evidence.rows}
    assert got == {0.45: (0, 0), 0.95: (1, 2)}


# --- the pages -----------------------------------------------------------------------------


@pytest.fixture
def staff_client(staff_user) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


def _json_script(html: str, element_id: str) -> dict:
    marker = f'<script id="{element_id}" type="application/json">'
    start = html.index(marker) + len(marker)
    return json.loads(html[start : html.index("</script>", start)])


def test_trends_page_shows_precision_per_analyzer_and_type(staff_client, verdicts):
    html = staff_client.get(reverse("audits:trends"), {"days": "60"}).content.decode()
    assert 'id="quality"' in html
    assert 'id="precision-overall">40.0%<' in html
    assert "n = 5" in html
    row = html[html.index('id="precision-analyzer-redflag"') :]
    row = row[: row.index("</tr>")]
    assert '"Precision">50.0% <span' in row and "n = 2" in row
    row = html[html.index('id="precision-type-sycophancy"') :]
    row = row[: row.index("</tr>")]
    assert '"Precision">0.0% <span' in row  # one false positive, one unsure
    assert '"False positives">1</td>' in row and '"Unsure">1</td>' in row
    data = _json_script(html, "trends-data")
    assert data["quality"]["bucket"] == "week"
    assert data["quality"]["series"][0]["label"] == "all analyzers"
    assert sum(data["quality"]["series"][0]["n"]) == 5


def test_trends_page_shows_a_dash_without_decisions(staff_client, db):
    run = make_audit(results=[result("tone", 0.7, [annotation("dismissive")])])
    record_review(audit_id=run.pk, verdict="unsure")
    html = staff_client.get(reverse("audits:trends"), {"days": "7"}).content.decode()
    assert 'id="precision-overall">—<' in html
    row = html[html.index('id="precision-analyzer-tone"') :]
    assert "—" in row[: row.index("</tr>")]
    assert _json_script(html, "trends-data")["quality"]["bucket"] == "day"


def test_trends_page_says_when_nothing_was_reviewed(staff_client, db):
    make_audit(results=[result("tone", 0.7, [annotation("dismissive")])])
    html = staff_client.get(reverse("audits:trends")).content.decode()
    assert "No reviewed findings in this window" in html


def test_tuning_page_shows_the_evidence_at_the_selected_threshold(staff_client, verdicts):
    html = staff_client.get(
        reverse("audits:tuning"), {"threshold": "0.45"}, headers={"HX-Request": "true"}
    ).content.decode()
    assert html.strip().startswith('<section id="tuning-preview"')  # the partial, with it
    assert "At 0.45: hides 1 of 3 reviewed false positives, loses 0 of 2 confirmed findings" in html
    selected = html[html.index('class="selected"') :]
    assert "0.45" in selected[: selected.index("</tr>")]
    data = _json_script(html, "tuning-evidence-data")
    assert data["selected"] == 0.45 and data["fp_total"] == 3


def test_tuning_page_evidence_for_one_analyzer(staff_client, verdicts):
    html = staff_client.get(
        reverse("audits:tuning"), {"threshold": "0.95", "analyzer": "redflag"}
    ).content.decode()
    assert "At 0.95: hides 1 of 1 reviewed false positives, loses 1 of 1 confirmed findings" in html


def test_tuning_page_without_verdicts_says_so(staff_client, db):
    make_audit(results=[result("redflag", 0.9, [annotation("EMPTY_OUTPUT")])])
    html = staff_client.get(reverse("audits:tuning")).content.decode()
    assert "No reviewed findings yet" in html


def test_pages_see_a_new_verdict_at_once_despite_the_cache(staff_client, verdicts):
    trends_url, tuning_url = reverse("audits:trends"), reverse("audits:tuning")
    assert 'id="precision-overall">40.0%<' in staff_client.get(trends_url).content.decode()
    assert (
        "hides 1 of 3 reviewed false positives"
        in staff_client.get(tuning_url, {"threshold": "0.45"}).content.decode()
    )
    # The unreviewed false_consensus finding of audit c, now called a false positive.
    record_review(
        audit_id=verdicts["c"].pk,
        annotation_id=_ann(verdicts["c"], "false_consensus"),
        verdict="false_positive",
    )
    assert 'id="precision-overall">33.3%<' in staff_client.get(trends_url).content.decode()
    assert (
        "hides 2 of 4 reviewed false positives"
        in staff_client.get(tuning_url, {"threshold": "0.45"}).content.decode()
    )


def test_moving_the_slider_reuses_the_cached_evidence(staff_client, verdicts):
    url = reverse("audits:tuning")
    with CaptureQueriesContext(connection) as cold:
        staff_client.get(url, {"threshold": "0.45"}, headers={"HX-Request": "true"})
    with CaptureQueriesContext(connection) as warm:
        html = staff_client.get(url, {"threshold": "0.85"}, headers={"HX-Request": "true"})
    assert "At 0.85: hides 2 of 3" in html.content.decode()
    # The findings' verdicts are read once (the only query joining the verdicts).
    assert sum("COALESCE" in q["sql"] for q in cold.captured_queries) == 1
    assert sum("COALESCE" in q["sql"] for q in warm.captured_queries) == 0


def test_quality_sections_use_a_fixed_number_of_queries(
    staff_client, verdicts, django_assert_max_num_queries
):
    for i in range(10):
        _reviewed_audit(timezone.now() - timedelta(days=i), "confirmed", "tone")
    with django_assert_max_num_queries(20):
        staff_client.get(reverse("audits:trends"))
    with django_assert_max_num_queries(20):
        staff_client.get(reverse("audits:tuning"))


# --- demo data -----------------------------------------------------------------------------


def test_demo_reviews_about_half_of_the_cards_and_leaves_the_rest_for_the_queue(
    settings, tmp_path, db
):
    from io import StringIO

    from django.core.management import call_command
    from django.db.models import Max

    from audits.models import Review

    settings.VAR_DIR = tmp_path
    call_command("setup_demo", audits=80, days=21, stdout=StringIO())
    cards = AuditRun.objects.filter(has_card=True)
    reviewed = cards.filter(reviewed_at__isnull=False).count()
    assert 0.2 * cards.count() <= reviewed <= 0.75 * cards.count()
    assert cards.filter(reviewed_at__isnull=True).exists()
    assert not AuditRun.objects.filter(has_card=False, reviewed_at__isnull=False).exists()
    # reviewed_at is the time of the audit's latest verdict, as record_review leaves it.
    latest = dict(
        Review.objects.values("audit_id")
        .annotate(at=Max("created_at"))
        .values_list("audit_id", "at")
    )
    for audit_id, at in cards.filter(reviewed_at__isnull=False).values_list("id", "reviewed_at"):
        assert latest[audit_id] == at
    verdicts = set(Review.objects.filter(is_current=True).values_list("verdict", flat=True))
    assert {"confirmed", "false_positive"} <= verdicts
    assert Review.objects.filter(annotation__isnull=False).exists()
    overall = quality.total(quality.precision_by_analyzer())
    assert overall.decided > 0 and overall.confirmed > overall.false_positive
