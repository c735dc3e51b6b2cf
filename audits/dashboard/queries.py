"""Reads of the trends and tuning pages (the list and cards are `audits.cards.cards`).

Every function here issues a fixed number of queries, whatever the number of rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db.models import Count, Q
from django.db.models.functions import TruncHour
from django.utils import timezone

from analyzers.config_store import load_config
from analyzers.engine.surfacing import Thresholds
from audits.dashboard.trend_stats import day_start, mean, window_stats
from audits.models import AnalyzerRunRecord, AuditRun

# --- trends -------------------------------------------------------------------------------

HISTOGRAM_BINS = 20


def bin_labels(bins: int = HISTOGRAM_BINS) -> list[str]:
    return [f"{i / bins:.2f}" for i in range(bins)]


def trends(days: int, *, now: datetime | None = None, cache: bool = True) -> dict[str, Any]:
    """Everything the trends page charts, over the last `days` days.

    Summed from per-day figures (`audits.dashboard.trend_stats`): complete past days come from the
    cache, the partial first day and today are a few index range scans.
    """
    now = now or timezone.now()
    since = now - timedelta(days=days)
    totals, per_day = window_stats(since, now, HISTOGRAM_BINS, use_cache=cache)

    day_labels, day_totals, day_cards = [], [], []
    for day in sorted(per_day):
        day_labels.append(day.isoformat())
        day_totals.append(per_day[day]["total"])
        day_cards.append(per_day[day]["cards"])

    top_types = []
    for type_, severities in totals["types"].items():
        top_types.append(
            {
                "type": type_,
                "n": sum(severities.values()),
                "critical": severities.get("critical", 0),
                "warning": severities.get("warning", 0),
                "info": severities.get("info", 0),
            }
        )
    top_types.sort(key=lambda row: (-row["n"], row["type"]))
    top_types = top_types[:12]

    analyzers = []
    for analyzer_id in sorted(totals["analyzers"]):
        n, surfaced, failed, timeout, dur_sums, dur_n, dur_max = totals["analyzers"][analyzer_id]
        avg_ms = mean(dur_sums, dur_n)
        analyzers.append(
            {
                "analyzer_id": analyzer_id,
                "total": n,
                "surfaced": surfaced,
                "failed": failed,
                "timeout": timeout,
                "avg_ms": round(avg_ms or 0, 1),
                "max_ms": round(dur_max or 0, 1),
                "surfaced_pct": round(100 * surfaced / n, 1) if n else 0,
            }
        )

    total = totals["total"]
    mean_score = mean(totals["score_sum"], totals["score_n"])
    config = load_config()
    return {
        "days": days,
        "threshold": config.threshold,
        # Analyzers with a threshold of their own (the histogram marks them too).
        "own_thresholds": {
            a: float(section["threshold"])
            for a, section in sorted(config.analyzers.items())
            if section.get("threshold") is not None
        },
        "summary": {
            "total": total,
            "cards": totals["cards"],
            "card_pct": round(100 * totals["cards"] / total, 1) if total else 0,
            "failed": totals["failed"],
            "mean_score": round(mean_score, 3) if mean_score is not None else None,
        },
        "per_day": {"labels": day_labels, "total": day_totals, "cards": day_cards},
        # Audits per bin of their highest score (what decides surfacing), and of those how
        # many have a card: bars left of the threshold with cards were forced, or surfaced
        # at an analyzer's own lower threshold.
        "histogram": {
            "labels": bin_labels(),
            "counts": totals["hist"],
            "cards": totals["hist_cards"],
        },
        "top_types": top_types,
        "analyzers": analyzers,
    }


HOURLY_SPAN_DAYS = 2  # audits on at most this many days: the activity chart counts hours


def activity_series(data: dict[str, Any], *, now: datetime | None = None) -> dict[str, Any]:
    """The activity chart's series for `trends(...)`'s figures: per day, or per hour when
    the days with audits span at most HOURLY_SPAN_DAYS (a day's single bar says nothing).

    Hourly: one query over those days' audits, from the first hour with an audit to the
    last (at most HOURLY_SPAN_DAYS * 24 + 1 buckets).
    """
    per_day = data["per_day"]
    days = zip(per_day["labels"], per_day["total"], strict=True)
    busy = [date.fromisoformat(day) for day, n in days if n]
    if not busy or (busy[-1] - busy[0]).days >= HOURLY_SPAN_DAYS:
        return {"bucket": "day", **per_day}
    since = (now or timezone.now()) - timedelta(days=data["days"])
    rows = (
        AuditRun.objects.filter(
            created_at__gte=max(since, day_start(busy[0])),
            created_at__lt=day_start(busy[-1] + timedelta(days=1)),
        )
        .annotate(hour=TruncHour("created_at"))
        .order_by()
        .values("hour")
        .annotate(total=Count("*"), cards=Count("created_at", filter=Q(has_card=True)))
    )
    # Stepped in UTC: an hour's start is an instant, whatever the zone's DST does.
    counts = {row["hour"].astimezone(UTC): row for row in rows}
    if not counts:  # deleted meanwhile
        return {"bucket": "day", **per_day}
    series: dict[str, Any] = {"bucket": "hour", "labels": [], "total": [], "cards": []}
    hour, last = min(counts), max(counts)
    while hour <= last:
        row = counts.get(hour, {})
        series["labels"].append(timezone.localtime(hour).strftime("%Y-%m-%dT%H:%M"))
        series["total"].append(row.get("total", 0))
        series["cards"].append(row.get("cards", 0))
        hour += timedelta(hours=1)
    return series


# --- threshold tuning ---------------------------------------------------------------------

WINDOWS = (200, 500, 1000, 5000)
DEFAULT_WINDOW = 1000


@dataclass(slots=True)
class TuningPreview:
    threshold: float
    current: float
    analyzer: str
    window: int
    considered: int
    surfacing: int
    surfacing_now: int
    newly: int
    dropped: int
    examples: list[AuditRun]
    per_analyzer: list[dict[str, Any]]
    histogram: list[int]

    @property
    def surfacing_pct(self) -> float:
        return round(100 * self.surfacing / self.considered, 1) if self.considered else 0.0

    @property
    def delta(self) -> int:
        return self.surfacing - self.surfacing_now


def tuning_preview(
    *,
    threshold: float,
    current: float,
    analyzer: str = "",
    window: int = DEFAULT_WINDOW,
    examples: int = 15,
    own_thresholds: dict[str, float] | None = None,
    global_threshold: float | None = None,
) -> TuningPreview:
    """Which of the last `window` completed audits would surface at `threshold`.

    An audit surfaces when one of its successful results surfaces by the engine's one rule
    (`analyzers.engine.surfacing`, docs/reference/contract.md section 1). The slider governs the global
    threshold (the results of analyzers without `own_thresholds`) or, with `analyzer`, that
    analyzer's own; every other result surfaces as it does now, at its saved threshold.
    Three queries, whatever the window (a window's results are a few thousand small rows).
    """
    own = dict(own_thresholds or {})
    if analyzer:
        default = current if global_threshold is None else global_threshold
        at_slider = Thresholds(default=default, own={**own, analyzer: threshold})
        at_current = Thresholds(default=default, own={**own, analyzer: current})
    else:
        at_slider = Thresholds(default=threshold, own=own)
        at_current = Thresholds(default=current, own=own)

    def governed(analyzer_id: str) -> bool:
        return analyzer_id == analyzer if analyzer else analyzer_id not in own

    recent_ids = list(
        AuditRun.objects.filter(status=AuditRun.Status.COMPLETE)
        .order_by("-created_at", "-id")
        .values_list("id", flat=True)[:window]
    )
    results = AnalyzerRunRecord.objects.filter(
        audit_id__in=recent_ids, status=AnalyzerRunRecord.Status.OK
    ).values_list("audit_id", "analyzer_id", "score", "should_surface")

    surfacing_set: set[Any] = set()
    now_set: set[Any] = set()
    peaks: dict[Any, float] = {}
    per_analyzer: dict[str, dict[str, Any]] = {}
    for audit_id, analyzer_id, score, forced in results.iterator(chunk_size=2000):
        shown_now = at_current.surfaced(
            analyzer_id=analyzer_id, status="ok", score=score, should_surface=forced
        )
        shown_then = at_slider.surfaced(
            analyzer_id=analyzer_id, status="ok", score=score, should_surface=forced
        )
        if shown_now:
            now_set.add(audit_id)
        if shown_then:
            surfacing_set.add(audit_id)
        row = per_analyzer.get(analyzer_id)
        if row is None:
            row = per_analyzer[analyzer_id] = {
                "analyzer_id": analyzer_id,
                "total": 0,
                "at_threshold": 0,
                "at_current": 0,
                "governed": governed(analyzer_id),
                "saved_threshold": at_current.for_analyzer(analyzer_id),
            }
        row["total"] += 1
        row["at_threshold"] += shown_then
        row["at_current"] += shown_now
        if row["governed"]:
            peak = 1.0 if forced else score
            if peak > peaks.get(audit_id, -1.0):
                peaks[audit_id] = peak
    for row in per_analyzer.values():
        row["delta"] = row["at_threshold"] - row["at_current"]
    surfacing = [pk for pk in recent_ids if pk in surfacing_set]

    histogram = [0] * HISTOGRAM_BINS
    for peak in peaks.values():
        histogram[min(HISTOGRAM_BINS - 1, max(0, int(peak * HISTOGRAM_BINS)))] += 1

    shown_ids = surfacing[:examples]
    shown = AuditRun.objects.only(
        "id", "created_at", "overall_score", "response", "user_input", "has_card", "status"
    ).in_bulk(shown_ids)
    example_runs = []
    for pk in shown_ids:
        run = shown[pk]
        run.peak = peaks.get(pk)
        run.is_new = pk not in now_set
        example_runs.append(run)

    return TuningPreview(
        threshold=threshold,
        current=current,
        analyzer=analyzer,
        window=window,
        considered=len(recent_ids),
        surfacing=len(surfacing),
        surfacing_now=len(now_set),
        newly=len(surfacing_set - now_set),
        dropped=len(now_set - surfacing_set),
        examples=example_runs,
        per_analyzer=[per_analyzer[name] for name in sorted(per_analyzer)],
        histogram=histogram,
    )
