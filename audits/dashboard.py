"""Reads of the dashboard pages: list filters from the URL, card pages, trends, tuning.

The list filters mean what the API's filters mean: they are translated to
`audits.selectors.AuditFilters` and applied by `selectors.filter_audits`. Every function
here issues a fixed number of queries, whatever the number of rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import (
    Case,
    Count,
    F,
    FloatField,
    Max,
    Prefetch,
    Q,
    QuerySet,
    Value,
    When,
    Window,
)
from django.db.models.functions import RowNumber
from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_date

from . import selectors
from .highlight import SEVERITY_RANK
from .models import AnalyzerRunRecord, Annotation, AuditRun, Review

PAGE_SIZE = 25
SEVERITIES = ("info", "warning", "critical")
KNOWN_ANALYZERS = ("redflag", "links", "grounding", "prompt_leak", "bias", "tone")
KNOWN_TYPES = (
    "EMPTY_OUTPUT", "TOO_MANY_CHARS", "TOO_MANY_TOKENS", "TOKEN_LENGTH_SPIKE",
    "JSON_PARSE_FAILED", "REQUIRED_FIELD_MISSING", "SELF_CONTRADICTION", "COLLISION_DETECTED",
    "VALIDATOR_FAILED", "EXCEPTION", "LINK_HOST_NOT_ALLOWED", "LINK_TECH_DOC_NOT_ALLOWED",
    "LINK_LABEL_UPGRADED", "LINK_LABEL_SUFFIX_NORMALIZED", "HTML_ANCHOR_CONVERTED",
    "DANGLING_ATTRIBUTION", "LINK_UNHEALTHY", "LINK_UNSAFE_SCHEME", "UNGROUNDED_CUSTOMER_CLAIM",
    "PROMPT_LEAK", "sycophancy", "confirmation_bias", "anchoring_bias", "authority_deference",
    "recency_bias", "false_consensus", "condescending", "dismissive", "unprofessional",
)


# --- list filters -------------------------------------------------------------------------


def _float(value: str | None, errors: dict[str, str], name: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        errors[name] = "Enter a number between 0 and 1."
        return None
    return number


def _date(value: str | None, errors: dict[str, str], name: str) -> date | None:
    if not value:
        return None
    try:
        parsed = parse_date(value)
    except ValueError:
        parsed = None
    if parsed is None:
        errors[name] = "Enter a date as YYYY-MM-DD."
    return parsed


@dataclass(slots=True)
class ListFilters:
    """The list filters, read from and written to the query string (bookmarkable)."""

    min_score: float | None = None
    max_score: float | None = None
    surfaced: bool = False
    status: str = ""
    analyzer: str = ""
    type: str = ""
    severity: str = ""
    since: date | None = None
    until: date | None = None
    q: str = ""
    reviewed: str = ""  # "", "true" or "false", as in the API
    verdict: str = ""
    errors: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_query(cls, query: QueryDict) -> ListFilters:
        errors: dict[str, str] = {}
        severity = query.get("severity", "")
        if severity and severity not in SEVERITIES:
            errors["severity"] = "Unknown severity."
            severity = ""
        status = query.get("status", "")
        if status and status not in AuditRun.Status.values:
            errors["status"] = "Unknown status."
            status = ""
        reviewed = query.get("reviewed", "")
        if reviewed and reviewed not in ("true", "false"):
            errors["reviewed"] = "Choose yes or no."
            reviewed = ""
        verdict = query.get("verdict", "")
        if verdict and verdict not in Review.Verdict.values:
            errors["verdict"] = "Unknown verdict."
            verdict = ""
        return cls(
            min_score=_float(query.get("min_score"), errors, "min_score"),
            max_score=_float(query.get("max_score"), errors, "max_score"),
            surfaced=query.get("surfaced", "") in ("1", "true", "on", "yes"),
            status=status,
            analyzer=query.get("analyzer", "").strip()[:100],
            type=query.get("type", "").strip()[:100],
            severity=severity,
            since=_date(query.get("since"), errors, "since"),
            until=_date(query.get("until"), errors, "until"),
            q=query.get("q", "").strip()[:200],
            reviewed=reviewed,
            verdict=verdict,
            errors=errors,
        )

    def as_params(self) -> dict[str, str]:
        """The non-empty filters as query parameters (what the URL carries)."""
        params: dict[str, str] = {}
        for f in fields(self):
            if f.name == "errors":
                continue
            value = getattr(self, f.name)
            if value is None or value == "" or value is False:
                continue
            params[f.name] = "1" if value is True else str(value)
        return params

    @property
    def active(self) -> bool:
        return bool(self.as_params())

    def to_selector(self) -> selectors.AuditFilters:
        """The same filters as the API applies them (dates become whole days)."""
        tz = timezone.get_current_timezone()
        return selectors.AuditFilters(
            min_score=self.min_score,
            max_score=self.max_score,
            surfaced=True if self.surfaced else None,
            analyzer=self.analyzer or None,
            type=self.type or None,
            severity=self.severity or None,
            since=datetime.combine(self.since, time.min, tzinfo=tz) if self.since else None,
            until=(
                datetime.combine(self.until + timedelta(days=1), time.min, tzinfo=tz)
                if self.until
                else None
            ),
            q=self.q or None,
            status=self.status or None,
            reviewed={"true": True, "false": False}.get(self.reviewed),
            verdict=self.verdict or None,
        )


def filter_choices(filters: ListFilters | None = None) -> dict[str, list[str]]:
    """Analyzer ids and annotation types for the filter selects.

    From the configuration and the contract's codes, not from a DISTINCT over the tables
    (which grow with every audit); a value in the URL is always offered back.
    """
    from analyzers.config_store import load_config

    analyzers = set(KNOWN_ANALYZERS) | set(load_config().analyzers)
    types = set(KNOWN_TYPES)
    if filters is not None:
        if filters.analyzer:
            analyzers.add(filters.analyzer)
        if filters.type:
            types.add(filters.type)
    return {"analyzers": sorted(analyzers), "types": sorted(types, key=str.lower)}


# --- cards --------------------------------------------------------------------------------


def card_queryset() -> QuerySet[AuditRun]:
    """Audits with what a card shows prefetched (2 extra queries per page, not per card)."""
    return AuditRun.objects.defer(
        "cleaned_response", "sources", "config_snapshot", "options", "collision_key"
    ).prefetch_related(
        Prefetch(
            "results",
            queryset=AnalyzerRunRecord.objects.filter(surfaced=True)
            .only("id", "audit_id", "analyzer_id", "score", "position")
            .order_by("-score", "position"),
            to_attr="surfaced_list",
        ),
        Prefetch(
            "annotations",
            queryset=Annotation.objects.filter(result__surfaced=True)
            .only("id", "audit_id", "type", "label", "severity", "position")
            .order_by("position", "id"),
            to_attr="surfaced_annotations",
        ),
        Prefetch(
            "reviews",
            queryset=Review.objects.filter(is_current=True, annotation__isnull=True),
            to_attr="audit_verdicts",
        ),
    )


@dataclass(frozen=True, slots=True)
class Badge:
    type: str
    label: str
    severity: str
    count: int


def card_badges(run: AuditRun, limit: int = 6) -> tuple[list[Badge], int]:
    """The surfaced findings grouped by type, most severe first; and how many were cut."""
    counts: Counter[tuple[str, str]] = Counter()
    labels: dict[tuple[str, str], str] = {}
    for a in getattr(run, "surfaced_annotations", []):
        key = (a.type, a.severity)
        counts[key] += 1
        labels.setdefault(key, a.label or a.type)
    badges = [
        Badge(type=t, label=labels[(t, s)], severity=s, count=n) for (t, s), n in counts.items()
    ]
    badges.sort(key=lambda b: (-SEVERITY_RANK.get(b.severity, 0), -b.count, b.type))
    return badges[:limit], max(0, len(badges) - limit)


def prepare_card(run: AuditRun) -> AuditRun:
    run.badges, run.more_badges = card_badges(run)
    run.current_verdict = run.audit_verdicts[0] if run.audit_verdicts else None
    return run


def get_card(audit_id: Any) -> AuditRun:
    """One audit ready for the `audits/list.html#audit-card` partial (live feed, htmx)."""
    return prepare_card(card_queryset().get(pk=audit_id))


@dataclass(slots=True)
class Page:
    audits: list[AuditRun]
    next_cursor: str | None


def audit_page(filters: ListFilters, cursor: str | None, size: int = PAGE_SIZE) -> Page:
    """One page of cards, newest first, after `cursor` (a bad cursor starts over)."""
    qs = selectors.filter_audits(filters.to_selector(), card_queryset())
    try:
        qs = selectors.after_cursor(qs, cursor)
    except selectors.InvalidCursor:
        qs = selectors.after_cursor(qs, None)
    rows = list(qs[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    for run in rows:
        prepare_card(run)
    return Page(rows, selectors.encode_cursor(rows[-1]) if more and rows else None)


# --- detail -------------------------------------------------------------------------------


def detail_queryset() -> QuerySet[AuditRun]:
    """An audit with its results and reviews; the findings, trace lines and links, which
    can be many, are read a page at a time by `detail_rows`."""
    return AuditRun.objects.prefetch_related(
        Prefetch("results", queryset=AnalyzerRunRecord.objects.order_by("position", "id")),
        Prefetch("reviews", queryset=Review.objects.order_by("created_at", "id")),
    )


FINDINGS_PER_PAGE = 25  # findings of each result on one page of the detail page
DETAIL_ROWS = 100  # trace lines and links the detail page shows (the JSON has them all)


def review_target_labels(reviews: list[Review]) -> dict[Any, str]:
    """The label of each finding a review is about (one query, whatever page is shown)."""
    ids = {r.annotation_id for r in reviews if r.annotation_id is not None}
    if not ids:
        return {}
    rows = Annotation.objects.filter(pk__in=ids).values_list("pk", "label", "type")
    return {pk: label or kind for pk, label, kind in rows}


@dataclass
class DetailRows:
    """The bounded part of a detail page: one page of each result's findings (set on the
    results as `shown_annotations`, `annotation_total` and `type_counts`), the first
    trace lines and links, and the totals."""

    page: int
    has_next: bool
    annotations: list[Annotation]
    trace_lines: list[Any]
    trace_total: int
    links: list[Any]
    links_total: int

    @property
    def has_previous(self) -> bool:
        return self.page > 1


def detail_rows(run: AuditRun, results: list[AnalyzerRunRecord], page: int = 1) -> DetailRows:
    """Page `page` of every result's findings (`FINDINGS_PER_PAGE` each, by position) with
    their counts per type; at most `DETAIL_ROWS` trace lines and links. Six queries,
    whatever the size of the audit."""
    counts: dict[Any, list[tuple[str, int]]] = {}
    rows = (
        Annotation.objects.filter(audit_id=run.pk)
        .values_list("result_id", "type")
        .annotate(n=Count("id"))
        .order_by("result_id", "-n", "type")
    )
    for result_id, kind, n in rows:
        counts.setdefault(result_id, []).append((kind, n))
    page = max(1, page)
    offset = (page - 1) * FINDINGS_PER_PAGE
    by_result: dict[Any, list[Annotation]] = {}
    if counts:
        numbered = Annotation.objects.filter(audit_id=run.pk).annotate(
            row=Window(RowNumber(), partition_by=[F("result_id")], order_by=[F("position"), F("id")])
        )
        page_rows = numbered.filter(row__gt=offset, row__lte=offset + FINDINGS_PER_PAGE)
        for annotation in page_rows.order_by("result_id", "position", "id"):
            by_result.setdefault(annotation.result_id, []).append(annotation)
    shown: list[Annotation] = []
    has_next = False
    for result in results:
        result.type_counts = counts.get(result.pk, [])
        result.annotation_total = sum(n for _, n in result.type_counts)
        result.shown_annotations = by_result.get(result.pk, [])
        result.shown_from = offset + 1 if result.shown_annotations else 0
        result.shown_to = offset + len(result.shown_annotations)
        has_next = has_next or result.annotation_total > offset + FINDINGS_PER_PAGE
        shown.extend(result.shown_annotations)
    trace_total = run.trace_lines.count()
    links_total = run.links.count()
    return DetailRows(
        page=page,
        has_next=has_next,
        annotations=shown,
        trace_lines=list(run.trace_lines.order_by("position")[:DETAIL_ROWS]),
        trace_total=trace_total,
        links=list(run.links.order_by("position", "id")[:DETAIL_ROWS]),
        links_total=links_total,
    )


# --- trends -------------------------------------------------------------------------------

HISTOGRAM_BINS = 20


def bin_labels(bins: int = HISTOGRAM_BINS) -> list[str]:
    return [f"{i / bins:.2f}" for i in range(bins)]


def trends(days: int, *, now: datetime | None = None, cache: bool = True) -> dict[str, Any]:
    """Everything the trends page charts, over the last `days` days.

    Summed from per-day figures (`audits.trend_stats`): complete past days come from the
    cache, the partial first day and today are a few index range scans.
    """
    from analyzers.config_store import load_config

    from .trend_stats import mean, window_stats

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
    return {
        "days": days,
        "threshold": load_config().threshold,
        "summary": {
            "total": total,
            "cards": totals["cards"],
            "card_pct": round(100 * totals["cards"] / total, 1) if total else 0,
            "failed": totals["failed"],
            "mean_score": round(mean_score, 3) if mean_score is not None else None,
        },
        "per_day": {"labels": day_labels, "total": day_totals, "cards": day_cards},
        "histogram": {"labels": bin_labels(), "counts": totals["hist"]},
        "top_types": top_types,
        "analyzers": analyzers,
    }


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


def _peak_expression() -> Case:
    """A result's surfacing score: 1 when forced (should_surface), else its score."""
    return Case(
        When(should_surface=True, then=Value(1.0)),
        default=F("score"),
        output_field=FloatField(),
    )


def _saved_surfacing(saved: dict[str, float], default: float) -> Q:
    """A result surfaces at the saved thresholds: its analyzer's own, else the global one."""
    condition = Q(should_surface=True) | (
        Q(score__gte=default) & ~Q(analyzer_id__in=list(saved))
    )
    for analyzer_id, value in saved.items():
        condition |= Q(analyzer_id=analyzer_id, score__gte=value)
    return condition


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

    An audit surfaces when one of its successful results reaches its threshold or is
    forced (CONTRACT.md section 1). The slider governs the global threshold (the results
    of analyzers without `own_thresholds`) or, with `analyzer`, that analyzer's own; every
    other result surfaces as it does now, at its saved threshold. Five queries, whatever
    the window.
    """
    own = dict(own_thresholds or {})
    recent_ids = list(
        AuditRun.objects.filter(status=AuditRun.Status.COMPLETE)
        .order_by("-created_at", "-id")
        .values_list("id", flat=True)[:window]
    )
    ok_results = AnalyzerRunRecord.objects.filter(
        audit_id__in=recent_ids, status=AnalyzerRunRecord.Status.OK
    )
    if analyzer:
        governed = Q(analyzer_id=analyzer)
        saved = {a: t for a, t in own.items() if a != analyzer}
        default = current if global_threshold is None else global_threshold
    else:
        governed = ~Q(analyzer_id__in=list(own))
        saved, default = own, current
    peaks: dict[Any, float] = dict(
        ok_results.filter(governed)
        .values("audit_id")
        .annotate(peak=Max(_peak_expression()))
        .values_list("audit_id", "peak")
    )
    # Audits a result outside the slider's reach surfaces anyway.
    fixed = set(
        ok_results.exclude(governed)
        .filter(_saved_surfacing(saved, default))
        .values_list("audit_id", flat=True)
        .distinct()
    )
    surfacing = [pk for pk in recent_ids if pk in fixed or peaks.get(pk, -1.0) >= threshold]
    surfacing_set = set(surfacing)
    now_set = {pk for pk in recent_ids if pk in fixed or peaks.get(pk, -1.0) >= current}

    per_analyzer = list(
        ok_results.values("analyzer_id")
        .annotate(
            total=Count("id"),
            at_threshold=Count("id", filter=Q(score__gte=threshold) | Q(should_surface=True)),
            at_current=Count("id", filter=Q(score__gte=current) | Q(should_surface=True)),
            at_saved=Count("id", filter=_saved_surfacing(saved, default)),
        )
        .order_by("analyzer_id")
    )
    for row in per_analyzer:
        name = row["analyzer_id"]
        row["governed"] = name == analyzer if analyzer else name not in own
        if not row["governed"]:
            # Outside the slider's reach: it surfaces at its saved threshold either way.
            row["at_threshold"] = row["at_current"] = row["at_saved"]
            row["saved_threshold"] = own.get(name, default)
        row["delta"] = row["at_threshold"] - row["at_current"]

    histogram = [0] * HISTOGRAM_BINS
    for peak in peaks.values():
        if peak is not None:
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
        per_analyzer=per_analyzer,
        histogram=histogram,
    )
