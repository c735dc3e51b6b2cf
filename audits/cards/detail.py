"""What an audit's detail page shows, for the page and for its live updates alike.

`detail_context` feeds `audits/detail.html` and its partials; `stream_context` the live
parts while the audit runs (`audits/live.html#connector`, `#stream`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest

from analyzers.config_store import load_config
from analyzers.engine.textdiff import bounded_word_diff
from audits.cards import cards
from audits.cards.highlight import highlight_segments, side_by_side
from audits.models import Annotation, AuditRun
from audits.store import scoring
from audits.store.link_rows import with_links
from audits.surfacing import policies

MAX_MARKED_CHANGES = 2000  # changes the live stream marks at most


def _surfaced_severities(run: AuditRun) -> list[str]:
    """The distinct severities of the surfaced findings (one small query)."""
    if not run.has_card:
        return []
    return list(
        Annotation.objects.filter(audit_id=run.pk, result__surfaced=True)
        .values_list("severity", flat=True)
        .distinct()
    )


def detail_context(run: AuditRun, request: HttpRequest | None = None) -> dict[str, Any]:
    """What `audits/detail.html` and its partials need (also for live updates)."""
    results = list(run.results.all())
    surfaced = sorted((r for r in results if r.surfaced), key=lambda r: -r.score)
    others = [r for r in results if not r.surfaced]
    # One page of findings (`?page=`), so a response with 27,000 of them stays a page.
    rows = cards.detail_rows(run, results, _page_number(request))
    annotations = [(f"ann-{a.pk}", a) for a in rows.annotations]
    reviews = list(run.reviews.all())
    current = {r.annotation_id: r for r in reviews if r.is_current}
    labels = cards.review_target_labels(reviews)
    for _, a in annotations:
        a.current_review = current.get(a.pk)
    for review in reviews:
        review.target_label = labels.get(review.annotation_id, "a finding")
    applied = policies.applied_thresholds(run)
    for result in results:
        result.applied_threshold = applied.for_analyzer(result.analyzer_id)
        # the links result's list is the link table the page shows (audits.store.link_rows)
        result.supplementary = with_links(
            result.supplementary, f"the audit's link table ({rows.links_total} links)"
        )
    can_rerun = bool(request is not None and request.user.has_perm("audits.add_auditrun"))
    return {
        "audit": run,
        "results": results,
        "surfaced_results": surfaced,
        "other_results": others,
        "highlights": highlight_segments(run.response, annotations),
        "highlight_count": sum(1 for _, a in annotations if a.evidence or a.start is not None),
        "diff": side_by_side(run.response, run.cleaned_response)
        if run.status == AuditRun.Status.COMPLETE
        else None,
        "links": rows.links,
        "links_total": rows.links_total,
        "trace_lines": rows.trace_lines,
        "trace_total": rows.trace_total,
        "findings_page": rows,
        "can_rerun": can_rerun,
        "reviews": reviews,
        "audit_verdict": current.get(None),
        "headline": scoring.headline(
            run, surfaced, _surfaced_severities(run), applied.for_analyzer
        ),
        "trace_context": trace_context(run),
        "applied_thresholds": applied,
        "applied_own": sorted(applied.own.items()),
        "surfacing_outdated": run.status == AuditRun.Status.COMPLETE and policies.is_outdated(run),
        # The live parts while it runs (audits/live.html#connector, #stream).
        **_stream_context(run),
    }


_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
_SPAN_ID = re.compile(r"^[0-9a-f]{16}$")


def trace_context(run: AuditRun) -> dict[str, Any] | None:
    """The OpenTelemetry trace of an audit (metadata `trace_id`, `span_id`: OTLP ingestion
    stores them) and its link by the configuration's `otel.trace_url_template`."""
    meta = run.metadata if isinstance(run.metadata, dict) else {}
    trace_id = str(meta.get("trace_id") or "").lower()
    if not _TRACE_ID.match(trace_id):
        return None
    span_id = str(meta.get("span_id") or "").lower()
    span_id = span_id if _SPAN_ID.match(span_id) else ""

    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "service_name": meta.get("service_name"),
        "url": load_config().otel.trace_url(trace_id, span_id),
    }


def _page_number(request: HttpRequest | None) -> int:
    value = request.GET.get("page", "") if request is not None and hasattr(request, "GET") else ""
    return int(value) if value.isdigit() and 0 < len(value) < 7 else 1


def _stream_context(run: AuditRun) -> dict[str, Any]:
    return {k: v for k, v in stream_context(run).items() if k != "audit"}


@dataclass(frozen=True, slots=True)
class Piece:
    kind: str  # "same" | "removed" | "added"
    text: str


def marked_pieces(original: str, cleaned: str) -> list[Piece]:
    """The cleaned text with what the rules removed (and put in its place) marked.

    Linear in the length of the texts (`analyzers.engine.textdiff`); the changes after the
    first `MAX_MARKED_CHANGES` are not marked."""
    kinds = {"equal": "same", "removed": "removed", "added": "added"}
    diff = bounded_word_diff(original, cleaned, MAX_MARKED_CHANGES)
    pieces = [Piece(kinds[kind], text) for kind, text in diff.pieces]
    if diff.cleaned_rest:  # beyond the bound: the rest of the cleaned text, unmarked
        pieces.append(Piece("same", diff.cleaned_rest))
    return pieces


def stream_context(run: AuditRun) -> dict[str, Any]:
    live = run.status in (AuditRun.Status.PENDING, AuditRun.Status.RUNNING)
    return {
        "audit": run,
        "stream_live": live,
        "stream_pieces": marked_pieces(run.response, run.cleaned_response) if live else [],
    }
