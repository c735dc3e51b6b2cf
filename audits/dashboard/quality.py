"""Measured quality: precision of the surfaced findings, from reviewers' verdicts.

Definitions (the trends and tuning pages say the same):

- The unit is a *surfaced finding*: an annotation of a surfaced result
  (`AnalyzerRunRecord.surfaced`). Annotations of results that did not surface were never
  shown to anyone, so no verdict speaks for them.
- A finding's *effective verdict* is its own current verdict (a current `Review` on that
  annotation), else the current whole-audit verdict (`annotation` empty), else none
  (unreviewed, left out). Superseded verdicts (`is_current=False`) never count.
- precision = confirmed / (confirmed + false positive). `unsure` verdicts are counted and
  shown but are not decisions, so they stay out of the ratio; `n` is the number of
  decided findings, and a figure with n = 0 is no figure (None, shown as "—").
- Time is the audit's `created_at` (when the analyzer produced the finding), so a week's
  precision describes the analyzers as they behaved that week.

Every selector is one aggregate query, grouped in the database: the row count does not
grow with the number of audits, only with analyzers x types x time buckets.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Count, FilteredRelation, Max, Q, QuerySet
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from analyzers.config_store import load_config
from audits.models import Annotation, Review

CONFIRMED = str(Review.Verdict.CONFIRMED)  # a choice's str() is its value
FALSE_POSITIVE = str(Review.Verdict.FALSE_POSITIVE)
UNSURE = str(Review.Verdict.UNSURE)
# Windows up to this many days are bucketed per day, longer ones per week.
DAILY_UP_TO_DAYS = 14


# --- the findings and their verdicts -----------------------------------------------------


def reviewed_findings(
    *, since: datetime | None = None, until: datetime | None = None
) -> QuerySet[Annotation]:
    """Surfaced annotations with an effective verdict, annotated as `verdict`.

    Two LEFT JOINs to the current verdicts (each target has at most one, by constraint, so
    no row is duplicated); only audits that were ever reviewed are read.
    """
    # has_card is implied by a surfaced result; naming it lets the planner use the
    # (has_card, reviewed_at, created_at) index.
    qs = Annotation.objects.filter(
        result__surfaced=True, audit__has_card=True, audit__reviewed_at__isnull=False
    )
    if since is not None:
        qs = qs.filter(audit__created_at__gte=since)
    if until is not None:
        qs = qs.filter(audit__created_at__lt=until)
    return (
        qs.annotate(
            own_review=FilteredRelation("reviews", condition=Q(reviews__is_current=True)),
            audit_review=FilteredRelation(
                "audit__reviews",
                condition=Q(
                    audit__reviews__is_current=True, audit__reviews__annotation__isnull=True
                ),
            ),
        )
        .annotate(verdict=Coalesce("own_review__verdict", "audit_review__verdict"))
        .filter(verdict__isnull=False)
    )


def _verdict_counts() -> dict[str, Count]:
    return {
        "confirmed": Count("id", filter=Q(verdict=CONFIRMED)),
        "false_positive": Count("id", filter=Q(verdict=FALSE_POSITIVE)),
        "unsure": Count("id", filter=Q(verdict=UNSURE)),
    }


# --- precision ---------------------------------------------------------------------------


@dataclass(slots=True)
class Precision:
    """Verdict counts of one group of findings (an analyzer, a type, a week, ...)."""

    key: str = ""
    confirmed: int = 0
    false_positive: int = 0
    unsure: int = 0

    @property
    def decided(self) -> int:
        """n: the findings with a decision (unsure is not one)."""
        return self.confirmed + self.false_positive

    @property
    def reviewed(self) -> int:
        return self.decided + self.unsure

    @property
    def precision(self) -> float | None:
        """confirmed / (confirmed + false positive); None when nothing was decided."""
        return self.confirmed / self.decided if self.decided else None

    @property
    def percent(self) -> float | None:
        value = self.precision
        return None if value is None else round(100 * value, 1)

    def add(self, other: Precision) -> None:
        self.confirmed += other.confirmed
        self.false_positive += other.false_positive
        self.unsure += other.unsure

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "confirmed": self.confirmed,
            "false_positive": self.false_positive,
            "unsure": self.unsure,
            "n": self.decided,
            "precision": self.percent,
        }


@dataclass(frozen=True, slots=True)
class VerdictRow:
    """Verdict counts of the findings of one analyzer and type on one day (local time)."""

    day: date
    analyzer_id: str
    type: str
    confirmed: int
    false_positive: int
    unsure: int

    def counts(self, key: str = "") -> Precision:
        return Precision(key, self.confirmed, self.false_positive, self.unsure)


def verdict_rows(
    *, since: datetime | None = None, until: datetime | None = None
) -> list[VerdictRow]:
    """The one query behind every precision figure: counts per day, analyzer and type.

    At most days x analyzers x types rows, whatever the number of audits; the selectors
    below sum them in Python.
    """
    rows = (
        reviewed_findings(since=since, until=until)
        .annotate(day=TruncDate("audit__created_at"))
        .values("day", "analyzer_id", "type")
        .annotate(**_verdict_counts())
        .order_by()
    )
    return [VerdictRow(**row) for row in rows]


def precision_by(
    by: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    rows: Iterable[VerdictRow] | None = None,
) -> list[Precision]:
    """One row per value of `by` ("analyzer_id" or "type") with reviewed findings, sorted
    by that value (one query, or `rows`)."""
    if rows is None:
        rows = verdict_rows(since=since, until=until)
    groups: dict[str, Precision] = {}
    for row in rows:
        key = getattr(row, by)
        groups.setdefault(key, Precision(key=key)).add(row.counts())
    return [groups[key] for key in sorted(groups)]


def precision_by_analyzer(**kwargs: Any) -> list[Precision]:
    return precision_by("analyzer_id", **kwargs)


def precision_by_type(**kwargs: Any) -> list[Precision]:
    return precision_by("type", **kwargs)


def total(rows: Iterable[Precision], key: str = "all") -> Precision:
    overall = Precision(key=key)
    for row in rows:
        overall.add(row)
    return overall


@dataclass(slots=True)
class PrecisionSeries:
    """Precision per time bucket, overall and per analyzer: what the line chart draws."""

    bucket: str  # "day" or "week"
    starts: list[date]
    overall: list[Precision]
    per_analyzer: dict[str, list[Precision]] = field(default_factory=dict)

    def chart(self) -> dict[str, Any]:
        """JSON for static/js/charts.js: percentages (null: nothing decided) and their n."""

        def series(label: str, points: list[Precision]) -> dict[str, Any]:
            return {
                "label": label,
                "precision": [p.percent for p in points],
                "n": [p.decided for p in points],
            }

        return {
            "bucket": self.bucket,
            "labels": [d.isoformat() for d in self.starts],
            "series": [
                series("all analyzers", self.overall),
                *(series(a, pts) for a, pts in sorted(self.per_analyzer.items())),
            ],
        }


def bucket_for(days: int) -> str:
    return "day" if days <= DAILY_UP_TO_DAYS else "week"


def _bucket_starts(since: datetime, until: datetime, bucket: str) -> list[date]:
    first = timezone.localdate(since)
    last = timezone.localdate(until)
    if bucket == "week":
        first -= timedelta(days=first.weekday())  # Monday, as TruncWeek
    step = timedelta(days=7 if bucket == "week" else 1)
    starts = []
    while first <= last:
        starts.append(first)
        first += step
    return starts


def precision_over_time(
    *,
    since: datetime,
    until: datetime | None = None,
    bucket: str = "week",
    rows: Iterable[VerdictRow] | None = None,
) -> PrecisionSeries:
    """Precision per day or per week (Monday first) of the audits' creation, overall and
    per analyzer; every bucket of the window is present (one query, or `rows`)."""
    if bucket not in ("day", "week"):
        raise ValueError("bucket must be 'day' or 'week'")
    until = until or timezone.now()
    if rows is None:
        rows = verdict_rows(since=since, until=until)
    starts = _bucket_starts(since, until, bucket)
    index = {d: i for i, d in enumerate(starts)}
    overall = [Precision(key=d.isoformat()) for d in starts]
    per_analyzer: dict[str, list[Precision]] = defaultdict(
        lambda: [Precision(key=d.isoformat()) for d in starts]
    )
    for row in rows:
        start = row.day - timedelta(days=row.day.weekday()) if bucket == "week" else row.day
        i = index.get(start)
        if i is None:
            continue
        overall[i].add(row.counts())
        per_analyzer[row.analyzer_id][i].add(row.counts())
    return PrecisionSeries(bucket, starts, overall, dict(per_analyzer))


# --- caching -----------------------------------------------------------------------------

# Every figure here changes only when a verdict is recorded (or an audit with verdicts is
# deleted): the cache key carries a fingerprint of the Review table, so a new verdict is
# seen at once. The TTL only bounds how far a trends window's start may lag.
CACHE_SECONDS = 300


def verdicts_fingerprint() -> str:
    """Changes whenever a verdict is added or removed (one indexed aggregate)."""
    agg = Review.objects.aggregate(n=Count("id"), last=Max("id"), at=Max("created_at"))
    at = agg["at"].timestamp() if agg["at"] else 0
    return f"{agg['n']}.{agg['last']}.{at}"


def _cached(key: str, compute):
    from django.core.cache import cache

    full = f"quality:{verdicts_fingerprint()}:{key}"
    value = cache.get(full)
    if value is None:
        value = compute()
        cache.set(full, value, CACHE_SECONDS)
    return value


def trends_quality(days: int, *, now: datetime | None = None, cache: bool = True) -> dict[str, Any]:
    """The trends page's "Measured quality" section over the last `days` days: one grouped
    query (cached until the next verdict, at most CACHE_SECONDS) and sums in Python."""
    now = now or timezone.now()
    since = now - timedelta(days=days)
    if cache:
        rows = _cached(f"rows:{days}", lambda: verdict_rows(since=since, until=now))
    else:
        rows = verdict_rows(since=since, until=now)
    by_analyzer = precision_by_analyzer(rows=rows)
    by_type = precision_by_type(rows=rows)
    series = precision_over_time(since=since, until=now, bucket=bucket_for(days), rows=rows)
    by_type.sort(key=lambda p: (-p.reviewed, p.key))
    return {
        "overall": total(by_analyzer),
        "by_analyzer": by_analyzer,
        "by_type": by_type,
        "series": series,
        "chart": series.chart(),
    }


# --- threshold evidence ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    """At one candidate threshold: reviewed findings that would no longer surface."""

    threshold: float
    fp_hidden: int
    confirmed_lost: int
    selected: bool = False


@dataclass(slots=True)
class ThresholdEvidence:
    threshold: float
    analyzer: str
    fp_total: int
    confirmed_total: int
    unsure_total: int
    rows: list[EvidenceRow]
    selected: EvidenceRow
    # Global threshold only: analyzers with their own threshold, whose findings it never hides.
    own_threshold_analyzers: list[str] = field(default_factory=list)

    @property
    def reviewed(self) -> int:
        return self.fp_total + self.confirmed_total + self.unsure_total

    def chart(self) -> dict[str, Any]:
        return {
            "thresholds": [r.threshold for r in self.rows],
            "fp_hidden": [r.fp_hidden for r in self.rows],
            "confirmed_lost": [r.confirmed_lost for r in self.rows],
            "fp_total": self.fp_total,
            "confirmed_total": self.confirmed_total,
            "selected": self.threshold,
        }


def candidate_thresholds(bins: int, selected: float) -> list[float]:
    """The histogram's bin edges 0.00, 0.05, ..., 1.00, and the selected value."""
    grid = {round(i / bins, 2) for i in range(bins + 1)}
    grid.add(round(selected, 2))
    return sorted(grid)


def score_counts(
    analyzer: str = "", *, exclude: Sequence[str] = ()
) -> list[tuple[float, bool, str, int]]:
    """(result score, forced, verdict, findings) of the reviewed findings of `analyzer`, or
    of every analyzer but `exclude` (one query)."""
    qs = reviewed_findings()
    if analyzer:
        qs = qs.filter(analyzer_id=analyzer)
    elif exclude:
        qs = qs.exclude(analyzer_id__in=exclude)
    return list(
        qs.values_list("result__score", "result__should_surface", "verdict")
        .annotate(n=Count("id"))
        .order_by()
    )


def threshold_evidence(
    *,
    threshold: float,
    analyzer: str = "",
    config=None,
    candidates: Sequence[float] | None = None,
    bins: int = 20,
    cache: bool = False,
) -> ThresholdEvidence:
    """For each candidate threshold: reviewed false positives hidden, confirmed findings lost.

    The unit is the tuning page's: with `analyzer`, that analyzer's own threshold governs
    only its findings; without, the global threshold governs the findings of every analyzer
    that has no threshold of its own (`config.threshold_for`, as the engine decides). A
    finding is hidden at `t` when its result's score < t and the result is not forced
    (`should_surface` surfaces whatever the score). Every reviewed audit counts, not only the
    preview's window: verdicts are scarce. One query, grouped by score (with `cache`, kept
    until the next verdict, so moving the slider costs no query).
    """
    own: list[str] = []
    if not analyzer:
        if config is None:
            config = load_config()
        own = sorted(
            a for a, section in config.analyzers.items() if section.get("threshold") is not None
        )
    if cache:
        rows = _cached(
            f"scores:{analyzer}:{','.join(own)}", lambda: score_counts(analyzer, exclude=own)
        )
    else:
        rows = score_counts(analyzer, exclude=own)
    totals = {CONFIRMED: 0, FALSE_POSITIVE: 0, UNSURE: 0}
    for _, _, verdict, n in rows:
        totals[verdict] = totals.get(verdict, 0) + n
    # Scores of the findings a threshold can hide, ascending, with running counts: the
    # count below t is one bisect, however many distinct scores there are.
    hideable = sorted(
        (score, verdict, n)
        for score, forced, verdict, n in rows
        if not forced and verdict in (CONFIRMED, FALSE_POSITIVE)
    )
    scores = [score for score, _, _ in hideable]
    below: dict[str, list[int]] = {CONFIRMED: [0], FALSE_POSITIVE: [0]}
    for _, verdict, n in hideable:
        for v, running in below.items():
            running.append(running[-1] + (n if v == verdict else 0))

    def hidden(t: float, verdict: str) -> int:
        return below[verdict][bisect_left(scores, t)]  # scores < t

    selected_value = round(threshold, 2)
    table = [
        EvidenceRow(
            threshold=t,
            fp_hidden=hidden(t, FALSE_POSITIVE),
            confirmed_lost=hidden(t, CONFIRMED),
            selected=t == selected_value,
        )
        for t in (candidates if candidates is not None else candidate_thresholds(bins, threshold))
    ]
    selected = next((r for r in table if r.selected), None) or EvidenceRow(
        threshold=selected_value,
        fp_hidden=hidden(selected_value, FALSE_POSITIVE),
        confirmed_lost=hidden(selected_value, CONFIRMED),
        selected=True,
    )
    return ThresholdEvidence(
        threshold=selected_value,
        analyzer=analyzer,
        fp_total=totals[FALSE_POSITIVE],
        confirmed_total=totals[CONFIRMED],
        unsure_total=totals[UNSURE],
        rows=table,
        selected=selected,
        own_threshold_analyzers=own,
    )
