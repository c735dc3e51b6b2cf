"""Audit cards, shared by the dashboard pages and the live feed: list filters from the URL,
card pages, the detail queryset (trends and tuning: `audits.dashboard.queries`).

The list filters mean what the API's filters mean: they are translated to
`audits.store.queries.AuditFilters` and applied by `queries.filter_audits`. Every function
here issues a fixed number of queries, whatever the number of rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from datetime import date, datetime, time, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import CharField, Count, F, Prefetch, QuerySet, Window
from django.db.models.functions import Cast, RowNumber
from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_date

from analyzers.config_store import current_registry, load_config
from analyzers.engine.contract import SEVERITY_RANK
from analyzers.engine.surfacing import Thresholds
from audits.models import AnalyzerRunRecord, Annotation, AuditRun, Review
from audits.store import link_rows, ordering, queries, scoring, trace_rows
from audits.surfacing import policies

PAGE_SIZE = 25
TABLE_PAGE_SIZE = 50  # rows of the table view per page
SEVERITIES = ("info", "warning", "critical")


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
    meta: str = ""  # one metadata "key:value" (the API takes several)
    top_score_min: float | None = None
    sort: str = ""  # one of ordering.SORTS; empty: newest first
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
        meta = query.get("meta", "").strip()[:500].replace("\x00", "")
        if meta:
            try:
                queries.parse_meta_filter(meta)
            except queries.InvalidMetaFilter:
                errors["meta"] = "Write key:value, e.g. model:gpt-4o."
                meta = ""
        sort = query.get("sort", "")
        try:
            ordering.check_sort(sort)
        except ordering.InvalidSort as exc:
            errors["sort"] = str(exc)
            sort = ""
        return cls(
            top_score_min=_float(query.get("top_score_min"), errors, "top_score_min"),
            sort=sort,
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
            meta=meta,
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
        """A filter is set (the sort is no filter)."""
        return any(name != "sort" for name in self.as_params())

    @property
    def panel_count(self) -> int:
        """How many of the folded filters are set (all but the search, which is on the
        line): the number beside "Filters"."""
        return sum(1 for name in self.as_params() if name != "q")

    @property
    def sort_key(self) -> str:
        return self.sort or ordering.DEFAULT_SORT

    def params_with(self, **changes: str) -> dict[str, str]:
        """`as_params()` with some parameters changed (an empty value removes one)."""
        params = {**self.as_params(), **changes}
        return {k: v for k, v in params.items() if v}

    def to_selector(self) -> queries.AuditFilters:
        """The same filters as the API applies them (dates become whole days)."""
        tz = timezone.get_current_timezone()
        return queries.AuditFilters(
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
            meta=[self.meta] if self.meta else None,
            top_score_min=self.top_score_min,
        )

    def as_api_params(self) -> dict[str, str]:
        """These filters as `GET /api/audits/export` takes them (the Export menu): dates
        become the instants that bound whole days, as `to_selector` reads them."""
        params = self.as_params()
        selector = self.to_selector()
        if self.surfaced:
            params["surfaced"] = "true"
        for name in ("since", "until"):
            if name in params:
                params[name] = getattr(selector, name).isoformat()
        return params

    @property
    def export_query(self) -> str:
        return urlencode(self.as_api_params())


def filter_choices(filters: ListFilters | None = None) -> dict[str, list[str]]:
    """Analyzer ids and annotation types for the filter selects.

    From the engine's registry (its analyzers and the annotation types they declare) and
    the configuration, not from a DISTINCT over the tables (which grow with every audit); a
    value in the URL is always offered back, so a stored type no analyzer declares still
    filters.
    """
    registry = current_registry()
    analyzers = set(registry.ids()) | set(load_config().analyzers)
    types = set(registry.annotation_types())
    if filters is not None:
        if filters.analyzer:
            analyzers.add(filters.analyzer)
        if filters.type:
            types.add(filters.type)
    return {"analyzers": sorted(analyzers), "types": sorted(types, key=str.lower)}


# --- cards --------------------------------------------------------------------------------


# The columns a card or a table row shows (and the cursor reads): nothing else is loaded.
CARD_FIELDS = (
    "id",
    "status",
    "user_input",
    "response",
    "threshold",
    "overall_score",
    "top_score",
    "top_analyzer",
    "has_card",
    "created_at",
)


def card_queryset() -> QuerySet[AuditRun]:
    """Audits with the columns a card shows; `prepare_cards` reads the rest."""
    return AuditRun.objects.only(*CARD_FIELDS)


@dataclass(frozen=True, slots=True)
class SurfacedResult:
    """What a card reads of a surfaced result (`scoring.headline` takes it)."""

    analyzer_id: str
    score: float
    should_surface: bool


@dataclass(frozen=True, slots=True)
class SurfacedFinding:
    type: str
    label: str
    severity: str


@dataclass(frozen=True, slots=True)
class CardVerdict:
    """A card's current verdict on the whole audit (what its verdict form shows)."""

    verdict: str
    comment: str
    reviewer_name: str
    created_at: datetime

    def get_verdict_display(self) -> str:
        return dict(Review.Verdict.choices).get(self.verdict, self.verdict)


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


def applied_thresholds(ids: list[Any]) -> dict[Any, Thresholds]:
    """The thresholds each audit's surfacing applied (`policies.applied_thresholds`), in
    one query: only for audits with a result its analyzer asked to surface (whether the
    score alone would have surfaced it is what the card says)."""
    if not ids:
        return {}
    rows = (
        AuditRun.objects.filter(pk__in=ids)
        .select_related("surfacing_policy")
        .only("id", "threshold", "options", "config_snapshot", "surfacing_policy__thresholds")
    )
    return {run.pk: policies.applied_thresholds(run) for run in rows}


def prepare_cards(runs: list[AuditRun]) -> list[AuditRun]:
    """`runs` with what their cards show: surfaced results, badges, headline and verdict.

    At most two queries for any number of runs, rows as tuples (the three prefetches of
    model instances they replace cost more than the rest of the page): the surfaced
    results with their findings (a left join: a result's row once per finding), and the
    current verdicts of the runs that show a verdict form."""
    ids = [run.pk for run in runs]
    results: dict[Any, list[SurfacedResult]] = {pk: [] for pk in ids}
    findings: dict[Any, list[tuple]] = {pk: [] for pk in ids}
    verdicts: dict[Any, CardVerdict] = {}
    if ids:
        seen: set[int] = set()
        # The audit id as the database's text, not a UUID made per row (a row per finding:
        # ~900 for a page of 50 cards, a third of the page's CPU): either spelling maps.
        audit_of = {key: pk for pk in ids for key in (str(pk), getattr(pk, "hex", pk))}
        for audit_key, result_id, analyzer_id, score, forced, *finding in (
            AnalyzerRunRecord.objects.filter(audit_id__in=ids, surfaced=True)
            .order_by("-score", "position", "id")
            .values_list(
                Cast("audit_id", output_field=CharField()),
                "id",
                "analyzer_id",
                "score",
                "should_surface",
                "annotations__position",
                "annotations__id",
                "annotations__type",
                "annotations__label",
                "annotations__severity",
            )
        ):
            audit_id = audit_of[audit_key]
            if result_id not in seen:
                seen.add(result_id)
                results[audit_id].append(SurfacedResult(analyzer_id, score, forced))
            if finding[1] is not None:
                findings[audit_id].append(finding)
    # The verdict forms: on complete audits with a card. Every current review of those,
    # the findings' ones dropped here (on `annotation_id IS NULL` SQLite would walk the
    # index of every audit-wide review).
    judged = [run.pk for run in runs if run.has_card and run.status == AuditRun.Status.COMPLETE]
    if judged:
        for audit_id, annotation_id, *verdict in (
            Review.objects.filter(audit_id__in=judged, is_current=True)
            .order_by()
            .values_list(
                "audit_id", "annotation_id", "verdict", "comment", "reviewer_name", "created_at"
            )
        ):
            if annotation_id is None:
                verdicts[audit_id] = CardVerdict(*verdict)
    thresholds = applied_thresholds(
        [pk for pk in ids if any(r.should_surface for r in results[pk])]
    )
    for run in runs:
        run.surfaced_list = results[run.pk]
        # The findings in their order on the detail page (position, then id).
        run.surfaced_annotations = [
            SurfacedFinding(kind, label, severity)
            for _, _, kind, label, severity in sorted(findings[run.pk], key=lambda f: f[:2])
        ]
        run.badges, run.more_badges = card_badges(run)
        applied = thresholds.get(run.pk) or Thresholds(default=run.threshold)
        run.headline = scoring.headline(
            run,
            run.surfaced_list,
            (a.severity for a in run.surfaced_annotations),
            applied.for_analyzer,
        )
        run.current_verdict = verdicts.get(run.pk)
    return runs


@dataclass(slots=True)
class Page:
    audits: list[AuditRun]
    next_cursor: str | None


def audit_page(filters: ListFilters, cursor: str | None, size: int = PAGE_SIZE) -> Page:
    """One page of cards in the filters' sort order (newest first by default), after
    `cursor` (a bad cursor, or one of another sort, starts over)."""
    sort = filters.sort_key
    qs = queries.filter_audits(filters.to_selector(), card_queryset())
    try:
        qs = queries.after_cursor(qs, cursor, sort)
    except queries.InvalidCursor:
        qs = queries.after_cursor(qs, None, sort)
    rows = list(qs[: size + 1])
    more = len(rows) > size
    rows = prepare_cards(rows[:size])
    return Page(rows, queries.encode_cursor(rows[-1], sort) if more and rows else None)


# --- detail -------------------------------------------------------------------------------


def detail_queryset() -> QuerySet[AuditRun]:
    """An audit with its results and reviews; the findings, trace lines and links, which
    can be many, are read a page at a time by `detail_rows`."""
    return AuditRun.objects.select_related("surfacing_policy").prefetch_related(
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
            row=Window(
                RowNumber(), partition_by=[F("result_id")], order_by=[F("position"), F("id")]
            )
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
    trace_total = trace_rows.line_count(run.trace_lines.all())
    links = link_rows.stored_links(link_rows.row_text(run))
    return DetailRows(
        page=page,
        has_next=has_next,
        annotations=shown,
        trace_lines=trace_rows.first_lines(run.trace_lines.all(), DETAIL_ROWS),
        trace_total=trace_total,
        links=links[:DETAIL_ROWS],
        links_total=len(links),
    )
