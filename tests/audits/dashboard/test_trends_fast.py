"""The trends figures, summed from cached per-day pieces, equal one straightforward query
over the window: across midnights, window edges, time zones, failures, running audits,
deletions and late completions. Results and annotations carry their audit's created_at."""

from __future__ import annotations

import random
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.db.models import Avg, Count, F, Max, Q
from django.db.models.functions import Floor, TruncDate
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from analyzers.config_store import load_config
from analyzers.engine.contract import AuditReport
from audits.dashboard import queries as dashboard
from audits.execution import execute
from audits.models import AnalyzerRunRecord, Annotation, AuditRun
from tests.factories import annotation, make_audit, result
from tests.migrating import migrate_to


def _now() -> datetime:
    """A fixed "now" late in a day (windows start late in a day too), in a DST month."""
    return datetime(2026, 3, 30, 21, 17, 5, 123456, tzinfo=UTC)


def reference_trends(days: int, now: datetime) -> dict[str, Any]:
    """The former implementation: one query per figure over the whole window."""
    bins = dashboard.HISTOGRAM_BINS
    since = now - timedelta(days=days)
    runs = AuditRun.objects.filter(created_at__gte=since)
    per_day = {
        row["day"]: row
        for row in runs.annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(total=Count("id"), cards=Count("id", filter=Q(has_card=True)))
        .order_by("day")
    }
    first_day, last_day = timezone.localdate(since), timezone.localdate(now)
    labels, totals, cards = [], [], []
    for i in range((last_day - first_day).days + 1):
        day = first_day + timedelta(days=i)
        row = per_day.get(day, {})
        labels.append(day.isoformat())
        totals.append(row.get("total", 0))
        cards.append(row.get("cards", 0))
    histogram, with_card = [0] * bins, [0] * bins
    for b, n, c in (
        runs.filter(top_score__isnull=False)
        .annotate(bin=Floor(F("top_score") * bins))
        .values("bin")
        .annotate(n=Count("id"), c=Count("id", filter=Q(has_card=True)))
        .values_list("bin", "n", "c")
    ):
        histogram[min(bins - 1, max(0, int(b)))] += n
        with_card[min(bins - 1, max(0, int(b)))] += c
    summary = runs.aggregate(
        total=Count("id"),
        cards=Count("id", filter=Q(has_card=True)),
        failed=Count("id", filter=Q(status="failed")),
        mean_score=Avg("overall_score"),
    )
    top_types = list(
        Annotation.objects.filter(audit__created_at__gte=since)
        .values("type")
        .annotate(
            n=Count("id"),
            critical=Count("id", filter=Q(severity="critical")),
            warning=Count("id", filter=Q(severity="warning")),
            info=Count("id", filter=Q(severity="info")),
        )
        .order_by("-n", "type")[:12]
    )
    analyzers = list(
        AnalyzerRunRecord.objects.filter(audit__created_at__gte=since)
        .values("analyzer_id")
        .annotate(
            total=Count("id"),
            surfaced=Count("id", filter=Q(surfaced=True)),
            failed=Count("id", filter=Q(status="failed")),
            timeout=Count("id", filter=Q(status="timeout")),
            avg_ms=Avg("duration_ms"),
            max_ms=Max("duration_ms"),
        )
        .order_by("analyzer_id")
    )
    for row in analyzers:
        row["surfaced_pct"] = round(100 * row["surfaced"] / row["total"], 1) if row["total"] else 0
        row["avg_ms"] = round(row["avg_ms"] or 0, 1)
        row["max_ms"] = round(row["max_ms"] or 0, 1)
    total = summary["total"] or 0
    mean = summary["mean_score"]
    return {
        "days": days,
        "threshold": load_config().threshold,
        "own_thresholds": {},
        "summary": {
            "total": total,
            "cards": summary["cards"] or 0,
            "card_pct": round(100 * (summary["cards"] or 0) / total, 1) if total else 0,
            "failed": summary["failed"] or 0,
            "mean_score": round(mean, 3) if mean is not None else None,
        },
        "per_day": {"labels": labels, "total": totals, "cards": cards},
        "histogram": {"labels": dashboard.bin_labels(), "counts": histogram, "cards": with_card},
        "top_types": top_types,
        "analyzers": analyzers,
    }


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


ANALYZERS = ["redflag", "links", "grounding", "bias", "tone"]
TYPES = [
    "TOO_MANY_CHARS",
    "LINK_HOST_NOT_ALLOWED",
    "UNGROUNDED_CUSTOMER_CLAIM",
    "sycophancy",
    "condescending",
    "PROMPT_LEAK",
    "EMPTY_OUTPUT",
]


def _audit(rng: random.Random, created_at: datetime, status: str = "complete") -> AuditRun:
    results = []
    for analyzer_id in rng.sample(ANALYZERS, k=rng.randint(1, len(ANALYZERS))):
        roll = rng.random()
        duration = rng.choice([0.0, 0.5, 12.25, rng.random() * 3000])
        if roll < 0.08:
            results.append(
                result(analyzer_id, 0.0, status="failed", error="boom", duration_ms=duration)
            )
        elif roll < 0.15:
            results.append(
                result(analyzer_id, 0.0, status="timeout", error="slow", duration_ms=duration)
            )
        else:
            # Scores on the bins' edges too (0.05 * k, 1.0).
            score = rng.choice([round(rng.random(), 3), 0.05 * rng.randint(0, 20), 1.0, 0.0])
            notes = [
                annotation(rng.choice(TYPES), rng.choice(["info", "warning", "critical"]))
                for _ in range(rng.randint(0, 3) if score >= 0.2 else 0)
            ]
            results.append(result(analyzer_id, score, notes, duration_ms=duration))
    fields: dict[str, Any] = {}
    if status == "failed":
        fields = {"overall_score": None, "has_card": False, "error": "worker died"}
    return make_audit(results=results, status=status, created_at=created_at, **fields)


def _midnight(day_offset: int, now: datetime) -> datetime:
    """Local midnight `day_offset` days from `now`'s day."""
    day = timezone.localdate(now) + timedelta(days=day_offset)
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


def _populate(now: datetime, seed: int = 3, *, unfinished: bool = True) -> list[AuditRun]:
    """Audits spread over 70 days, plus ones on the edges that matter."""
    rng = random.Random(seed)
    running = "running" if unfinished else "failed"
    runs = []
    for _ in range(90):
        at = now - timedelta(seconds=rng.random() * 70 * 86400)
        status = rng.choices(["complete", "failed", "pending", running], [20, 3, 1, 1])[0]
        status = status if unfinished or status != "pending" else "complete"
        runs.append(_audit(rng, at, status))
    micro = timedelta(microseconds=1)
    edges = []
    for offset in (-1, -6, -7, -8, -13, -14, -30, -59, -60, -61, 0):
        midnight = _midnight(offset, now)
        edges += [midnight - micro, midnight, midnight + micro, midnight + timedelta(hours=23)]
    for days in (7, 14, 30, 60, 90):
        since = now - timedelta(days=days)
        edges += [since - micro, since, since + micro]
    edges += [now, now + timedelta(minutes=5), now + timedelta(days=2)]  # skewed clocks
    for at in edges:
        runs.append(_audit(rng, at, rng.choice(["complete", "complete", "failed", running])))
    return runs


@pytest.mark.django_db
@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata", "America/New_York"])
def test_figures_equal_one_query_over_the_window_in_any_time_zone(tz):
    now = _now()
    with timezone.override(tz):
        _populate(now)
        for days in (7, 14, 30, 60, 90):
            expected = reference_trends(days, now)
            assert dashboard.trends(days, now=now) == expected, days  # cold
            assert dashboard.trends(days, now=now) == expected, days  # past days cached
            assert dashboard.trends(days, now=now, cache=False) == expected, days


@pytest.mark.django_db
def test_figures_equal_the_reference_as_the_window_slides_over_midnight():
    now = _now()
    _populate(now, seed=5)
    midnight = _midnight(1, now)
    for at in (
        midnight - timedelta(seconds=1),
        midnight,
        midnight + timedelta(seconds=1),
        midnight + timedelta(hours=30),
    ):
        for days in (7, 60):
            assert dashboard.trends(days, now=at) == reference_trends(days, at), (at, days)


@pytest.mark.django_db
def test_past_days_come_from_the_cache():
    now = _now()
    _populate(now, seed=7, unfinished=False)
    load_config()
    with CaptureQueriesContext(connection) as cold:
        dashboard.trends(60, now=now)
    with CaptureQueriesContext(connection) as warm:
        data = dashboard.trends(60, now=now)
    assert data == reference_trends(60, now)
    # The configuration's version check (at most once a second) may fall in either run;
    # the re-surfacing generation (part of the cache key) is one seek in each.
    warm = [q for q in warm if "analyzers_" not in q["sql"] and "resurfacejob" not in q["sql"]]
    cold = [q for q in cold if "analyzers_" not in q["sql"] and "resurfacejob" not in q["sql"]]
    # Warm: a count and two index seeks to check the cached days; audits, results and
    # annotations of the live days (the first, today, the future). Cold: which days are
    # settled, then audits, results and annotations of every day.
    assert len(warm) == 6
    assert len(cold) == 4

    # One grouped range scan per day and child table cold; only the live days warm.
    def scans(queries) -> int:
        return sum(q["sql"].count("UNION ALL") + 1 for q in queries if "_annotation" in q["sql"])

    assert scans(warm) <= 3 < 40 < scans(cold)


@pytest.mark.django_db
def test_a_deleted_audit_of_a_cached_day_leaves_the_figures():
    now = _now()
    rng = random.Random(11)
    runs = [_audit(rng, now - timedelta(days=d, hours=2)) for d in (3, 3, 4, 10)]
    dashboard.trends(14, now=now)
    runs[0].delete()
    assert dashboard.trends(14, now=now) == reference_trends(14, now)
    assert dashboard.trends(14, now=now)["summary"]["total"] == 3


@pytest.mark.django_db
def test_cached_days_replaced_by_other_audits_with_the_same_counts_are_recomputed():
    """As after a restore, or between tests sharing a process: same counts, other rows."""
    now = _now()
    rng = random.Random(19)
    first = [_audit(rng, now - timedelta(days=3, hours=h)) for h in (1, 2)]
    before = dashboard.trends(7, now=now)
    for run in first:
        run.delete()
    for h in (3, 4):
        make_audit(
            results=[result("links", 0.99 if h == 3 else 0.0, duration_ms=77.0)],
            created_at=now - timedelta(days=3, hours=h),
        )
    after = dashboard.trends(7, now=now)
    assert after == reference_trends(7, now)
    assert after != before


@pytest.mark.django_db
def test_an_audit_created_before_midnight_and_finished_after_it_is_counted():
    now = _now()
    rng = random.Random(13)
    _audit(rng, now - timedelta(days=5))
    late = make_audit(status="running", created_at=_midnight(-2, now) - timedelta(seconds=1))
    assert dashboard.trends(7, now=now) == reference_trends(7, now)
    report = AuditReport.model_validate(
        {
            "results": [
                {
                    "analyzer_id": "grounding",
                    "category": "grounding",
                    "status": "ok",
                    "score": 0.9,
                    "should_surface": False,
                    "surfaced": True,
                    "duration_ms": 40.0,
                    "annotations": [
                        {
                            "type": "UNGROUNDED_CUSTOMER_CLAIM",
                            "label": "Claim",
                            "severity": "critical",
                            "description": "",
                            "evidence": "Acme",
                            "start": 0,
                            "end": 4,
                        }
                    ],
                }
            ],
            "overall_score": 0.9,
            "has_card": True,
            "threshold": 0.3,
            "cleaned_response": "Acme",
            "trace": [],
            "links": [],
        }
    )
    execute.store_report(late, report)
    data = dashboard.trends(7, now=now)
    assert data == reference_trends(7, now)
    assert {
        "type": "UNGROUNDED_CUSTOMER_CLAIM",
        "n": 1,
        "critical": 1,
        "warning": 0,
        "info": 0,
    } in data["top_types"]


@pytest.mark.django_db
def test_a_failed_audit_completed_by_a_late_worker_is_seen():
    """recover_stale_runs marked it failed; the worker still stored its report."""
    now = _now()
    rng = random.Random(17)
    _audit(rng, now - timedelta(days=3))
    failed = _audit(rng, now - timedelta(days=4), status="failed")
    assert dashboard.trends(7, now=now)["summary"]["failed"] == 1
    AuditRun.objects.filter(pk=failed.pk).update(
        status="complete", overall_score=0.8, has_card=True
    )
    AnalyzerRunRecord.objects.create(
        audit=failed, analyzer_id="tone", score=0.8, surfaced=True, duration_ms=3.0
    )
    data = dashboard.trends(7, now=now)
    assert data == reference_trends(7, now)
    assert data["summary"]["failed"] == 0


@pytest.mark.django_db
def test_results_and_annotations_carry_their_audits_created_at():
    at = timezone.now() - timedelta(days=3, minutes=7)
    run = make_audit(
        results=[result("tone", 0.7, [annotation("dismissive", "info")])], created_at=at
    )
    assert set(run.results.values_list("audit_created_at", flat=True)) == {at}
    assert set(run.annotations.values_list("audit_created_at", flat=True)) == {at}
    # Built with the audit's id only (no cached audit object): one lookup fills it.
    record = AnalyzerRunRecord.objects.bulk_create(
        [AnalyzerRunRecord(audit_id=run.pk, analyzer_id="links", position=9)]
    )[0]
    assert AnalyzerRunRecord.objects.get(pk=record.pk).audit_created_at == at


@pytest.mark.django_db
def test_an_empty_database_gives_empty_figures():
    data = dashboard.trends(7, now=_now())
    assert data == reference_trends(7, _now())
    assert data["summary"]["mean_score"] is None


@pytest.mark.django_db(transaction=True)
def test_the_migration_copies_created_at_onto_existing_results_and_annotations():
    old = migrate_to(("audits", "0003_alerts"))
    at = datetime(2026, 1, 2, 23, 59, 59, 999999, tzinfo=UTC)
    run = old.get_model("audits", "AuditRun").objects.create(created_at=at, status="complete")
    record = old.get_model("audits", "AnalyzerRunRecord").objects.create(
        audit_id=run.pk, analyzer_id="tone"
    )
    old.get_model("audits", "Annotation").objects.create(
        audit_id=run.pk, result_id=record.pk, analyzer_id="tone", type="dismissive"
    )
    migrate_to()
    assert AnalyzerRunRecord.objects.get().audit_created_at == at
    assert Annotation.objects.get().audit_created_at == at
