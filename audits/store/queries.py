"""Reads that need care: list filters, keyset pagination and batch serialisation.

`serialize_runs(runs)` returns exactly what `serializers.audit_to_dict` returns, built from
`.values()` rows with one query per related table for the whole batch (fast exports).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from audits.models import (
    AnalyzerRunRecord,
    Annotation,
    AnnotationKind,
    AuditLinks,
    AuditRun,
    Review,
    TraceLine,
)
from audits.store import ordering
from audits.store.link_rows import link_dicts, with_links
from audits.store.ordering import InvalidCursor, InvalidSort  # noqa: F401 (re-exported)
from audits.store.trace_rows import texts_of


@dataclass
class AuditFilters:
    min_score: float | None = None
    max_score: float | None = None
    surfaced: bool | None = None
    analyzer: str | None = None
    type: str | None = None
    severity: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    q: str | None = None
    status: str | None = None
    reviewed: bool | None = None
    verdict: str | None = None
    meta: list[str] | None = None  # "key:value" pairs, all must match (see metadata_filter)
    top_score_min: float | None = None


class InvalidMetaFilter(ValueError):
    pass


_META_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


def parse_meta_filter(pair: str) -> tuple[str, str]:
    """`key:value` -> (key, value); a top-level metadata key of letters, digits, `_.-`."""
    key, sep, value = pair.partition(":")
    key = key.strip()
    if not sep or not _META_KEY.match(key) or "__" in key:
        raise InvalidMetaFilter(
            f"meta filter {pair[:120]!r}: write key:value, the key of letters, digits, _ . -"
        )
    return key, value


def metadata_filter(key: str, value: str) -> Q:
    """Audits whose metadata[key] equals `value` (as text, or as the number/boolean it spells)."""
    lookup = f"metadata__{key}"
    q = Q(**{lookup: value})
    if value in ("true", "false"):
        q |= Q(**{lookup: value == "true"})
    else:
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is not None and number == number and abs(number) != float("inf"):
            q |= Q(**{lookup: int(number) if number.is_integer() else number})
    return q


def filter_audits(
    filters: AuditFilters, qs: QuerySet[AuditRun] | None = None
) -> QuerySet[AuditRun]:
    qs = AuditRun.objects.all() if qs is None else qs
    f = filters
    if f.min_score is not None:
        qs = qs.filter(overall_score__gte=f.min_score)
    if f.max_score is not None:
        qs = qs.filter(overall_score__lte=f.max_score)
    if f.top_score_min is not None:
        qs = qs.filter(top_score__gte=f.top_score_min)
    if f.surfaced is not None:
        qs = qs.filter(has_card=f.surfaced)
    if f.status:
        qs = qs.filter(status=f.status)
    if f.since is not None:
        qs = qs.filter(created_at__gte=f.since)
    if f.until is not None:
        qs = qs.filter(created_at__lt=f.until)
    if f.analyzer:
        qs = qs.filter(
            Exists(
                AnalyzerRunRecord.objects.filter(
                    audit=OuterRef("pk"), analyzer_id=f.analyzer, surfaced=True
                )
            )
        )
    if f.type or f.severity:
        kinds = AnnotationKind.objects.filter(audit=OuterRef("pk"))
        if f.type:
            kinds = kinds.filter(type=f.type)
        if f.severity:
            kinds = kinds.filter(severity=f.severity)
        qs = qs.filter(Exists(kinds))
    if f.reviewed is not None:
        qs = qs.filter(reviewed_at__isnull=not f.reviewed)
    if f.verdict:
        qs = qs.filter(
            Exists(Review.objects.filter(audit=OuterRef("pk"), verdict=f.verdict, is_current=True))
        )
    for pair in f.meta or ():
        qs = qs.filter(metadata_filter(*parse_meta_filter(pair)))
    if f.q:
        qs = qs.filter(
            Q(user_input__icontains=f.q) | Q(response__icontains=f.q) | Q(external_id=f.q)
        )
    return qs


def encode_cursor(run: dict[str, Any] | AuditRun, sort: str = ordering.DEFAULT_SORT) -> str:
    return ordering.encode_row(sort, run)


def encode_cursor_raw(
    created_at_iso: str, run_id: str, sort: str = ordering.DEFAULT_SORT, score: float | None = None
) -> str:
    return ordering.encode(sort, created_at_iso, run_id, score)


def after_cursor(
    qs: QuerySet[AuditRun], cursor: str | None, sort: str = ordering.DEFAULT_SORT
) -> QuerySet[AuditRun]:
    """`qs` in `sort` order (newest first by default), the page after `cursor`."""
    return ordering.after(qs, sort, cursor)


# An analyzer result's columns, as the list and the export read them.
RESULT_FIELDS = (
    "id",
    "audit_id",
    "analyzer_id",
    "category",
    "score",
    "should_surface",
    "supplementary",
    "status",
    "error",
    "duration_ms",
    "surfaced",
)
RUN_FIELDS = (
    "id",
    "external_id",
    "created_at",
    "started_at",
    "finished_at",
    "status",
    "incomplete",
    "error",
    "attempts",
    "rerun_of_id",
    "user_input",
    "response",
    "cleaned_response",
    "sources",
    "metadata",
    "collision_key",
    "options",
    "threshold",
    "overall_score",
    "has_card",
    "reviewed_at",
    "top_score",
    "top_analyzer",
)


def page(
    qs: QuerySet[AuditRun], cursor: str | None, limit: int, sort: str = ordering.DEFAULT_SORT
) -> tuple[list[dict], str | None]:
    """One page of serialised audits and the cursor of the next page (or None)."""
    rows = list(after_cursor(qs, cursor, sort).values(*RUN_FIELDS)[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    items = serialize_runs(rows)
    return items, (encode_cursor(rows[-1], sort) if more and rows else None)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def serialize_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Audit dicts for `.values(*RUN_FIELDS)` rows: five queries for the whole batch."""
    if not rows:
        return []
    ids = [r["id"] for r in rows]
    results: dict[Any, list[dict]] = {i: [] for i in ids}
    by_result: dict[int, dict] = {}
    for r in (
        AnalyzerRunRecord.objects.filter(audit_id__in=ids)
        .order_by("audit_id", "position", "id")
        .values(*RESULT_FIELDS)
    ):
        item = {
            "analyzer_id": r["analyzer_id"],
            "category": r["category"],
            "score": r["score"],
            "should_surface": r["should_surface"],
            "annotations": [],
            "supplementary": r["supplementary"] or {},
            "status": r["status"],
            "error": r["error"],
            "duration_ms": r["duration_ms"],
            "surfaced": r["surfaced"],
        }
        by_result[r["id"]] = item
        results[r["audit_id"]].append(item)
    if by_result:
        for a in (
            Annotation.objects.filter(audit_id__in=ids)
            .order_by("result_id", "position", "id")
            .values(
                "result_id",
                "id",
                "type",
                "label",
                "severity",
                "description",
                "evidence",
                "start",
                "end",
            )
        ):
            owner = by_result.get(a.pop("result_id"))
            if owner is not None:
                owner["annotations"].append(a)
    trace: dict[Any, list[str]] = {i: [] for i in ids}
    for audit_id, line in texts_of(
        TraceLine.objects.filter(audit_id__in=ids)
        .order_by("audit_id", "position")
        .values_list("audit_id", "text")
    ):
        trace[audit_id].append(line)
    links: dict[Any, list[dict]] = {i: [] for i in ids}
    for audit_id, text in AuditLinks.objects.filter(audit_id__in=ids).values_list(
        "audit_id", "rows"
    ):
        links[audit_id] = link_dicts(text)
    for audit_id, items in results.items():
        for item in items:
            if item["analyzer_id"] == "links":
                item["supplementary"] = with_links(item["supplementary"], links[audit_id])
    reviews: dict[Any, list[dict]] = {i: [] for i in ids}
    for review in (
        Review.objects.filter(audit_id__in=ids)
        .order_by("created_at", "id")
        .values(
            "audit_id",
            "id",
            "annotation_id",
            "verdict",
            "comment",
            "reviewer_name",
            "created_at",
            "is_current",
        )
    ):
        reviews[review["audit_id"]].append(
            {
                "id": review["id"],
                "annotation_id": review["annotation_id"],
                "verdict": review["verdict"],
                "comment": review["comment"],
                "reviewer": review["reviewer_name"],
                "created_at": _iso(review["created_at"]),
                "current": review["is_current"],
            }
        )
    out = []
    for r in rows:
        res = results[r["id"]]
        out.append(
            {
                "id": str(r["id"]),
                "external_id": r["external_id"],
                "created_at": _iso(r["created_at"]),
                "started_at": _iso(r["started_at"]),
                "finished_at": _iso(r["finished_at"]),
                "status": r["status"],
                "incomplete": r["incomplete"],
                "error": r["error"] or None,
                "attempts": r["attempts"],
                "rerun_of": str(r["rerun_of_id"]) if r["rerun_of_id"] else None,
                "user_input": r["user_input"],
                "response": r["response"],
                "cleaned_response": r["cleaned_response"],
                "sources": r["sources"] or [],
                "metadata": r["metadata"] or {},
                "collision_key": r["collision_key"],
                "options": r["options"] or {},
                "threshold": r["threshold"],
                "overall_score": r["overall_score"],
                "top_score": r["top_score"],
                "top_analyzer": r["top_analyzer"] or None,
                "has_card": r["has_card"],
                "results": res,
                "surfaced_results": [x for x in res if x["surfaced"]],
                "links": links[r["id"]],
                "trace": trace[r["id"]],
                "reviewed_at": _iso(r["reviewed_at"]),
                "reviews": reviews[r["id"]],
            }
        )
    return out
