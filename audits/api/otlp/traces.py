"""Retrieval documents joined to LLM spans of the same trace across export requests.

An exporter sends a trace's spans as they end, in batches (the SDK's BatchSpanProcessor:
every 5 s or 512 spans), so a retrieval span and the LLM span it fed may arrive in two
requests, in either order. Bounded semantics, per ingest key:

- every retrieval span's documents are remembered (`TraceDocuments` rows) for
  `AUDITOR_OTLP_TRACE_WINDOW_S` (900 s), at most `AUDITOR_OTLP_TRACE_MEMORY_ROWS`
  (10,000; the oldest go first); an LLM span gets the remembered documents of its trace
  (one query per request) with those of its own request;
- a retrieval span arriving after an LLM span of its trace (within the window): an audit
  still pending gets the documents added in place (before its analysis starts); one
  already analysed is re-run once with them (external id `<trace>:<span>:late`,
  `rerun_of` the first audit, `metadata.late_sources` true). Later retrievals for a
  span that was re-run are added to that re-run while it is pending, else dropped
  (counted in `X-Auditor-Late-Sources-Dropped`). At most `MAX_LATE_AUDITS` (200) traces and
  audits are looked at per request.
`metadata.source_spans` lists the retrieval spans an audit's sources came from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from audits.api.otlp import spans
from audits.intake import submit
from audits.models import AuditRun, TraceDocuments

DEFAULT_WINDOW_S = 900
DEFAULT_MEMORY_ROWS = 10_000
MAX_LATE_AUDITS = 200
LATE = ":late"


@dataclass
class Late:
    joined: int = 0  # pending audits that got late documents in place
    reruns: int = 0  # analysed audits re-run with them
    dropped: int = 0  # a re-run already happened and was analysed


def _cutoff():
    window = int(getattr(settings, "AUDITOR_OTLP_TRACE_WINDOW_S", DEFAULT_WINDOW_S))
    return timezone.now() - timedelta(seconds=window)


def recall(api_key, trace_ids: set[str]) -> dict[str, list[spans.Retrieved]]:
    """Remembered retrievals of these traces (within the window), by trace id."""
    out: dict[str, list[spans.Retrieved]] = {}
    if not trace_ids:
        return out
    rows = TraceDocuments.objects.filter(
        api_key=api_key, trace_id__in=sorted(trace_ids), created_at__gte=_cutoff()
    ).values_list("trace_id", "span_id", "start_ns", "sources")
    for trace_id, span_id, start_ns, sources in rows:
        out.setdefault(trace_id, []).append(spans.Retrieved(trace_id, span_id, start_ns, sources))
    return out


def remember(api_key, retrieved: list[spans.Retrieved]) -> None:
    """Keep these retrievals for the window; drop expired rows and the oldest over the cap."""
    if not retrieved:
        return
    TraceDocuments.objects.bulk_create(
        [
            TraceDocuments(
                api_key=api_key,
                trace_id=r.trace_id,
                span_id=r.span_id,
                start_ns=min(r.start_ns, 2**63 - 1),
                sources=r.sources,
            )
            for r in retrieved
        ],
        ignore_conflicts=True,  # the same span sent again
    )
    TraceDocuments.objects.filter(created_at__lt=_cutoff()).delete()
    cap = max(1, int(getattr(settings, "AUDITOR_OTLP_TRACE_MEMORY_ROWS", DEFAULT_MEMORY_ROWS)))
    oldest_kept = list(
        TraceDocuments.objects.order_by("-id").values_list("id", flat=True)[cap - 1 : cap]
    )
    if oldest_kept:
        TraceDocuments.objects.filter(id__lt=oldest_kept[0]).delete()


def _audits_of_traces(api_key, trace_ids: list[str]) -> list[AuditRun]:
    """This key's OTLP audits of these traces created within the window (external ids
    `<trace>:<span>` and `<trace>:<span>:late`, found by index range)."""
    ranges = Q()
    for trace_id in trace_ids:
        ranges |= Q(external_id__gte=f"{trace_id}:", external_id__lt=f"{trace_id};")
    return list(
        AuditRun.objects.filter(ranges, api_key=api_key, created_at__gte=_cutoff())
        .only(
            "id",
            "external_id",
            "status",
            "sources",
            "metadata",
            "user_input",
            "response",
            "collision_key",
            "options",
            "incomplete",
            "request_hash",
        )
        .order_by("external_id")[:MAX_LATE_AUDITS]
    )


def join_late(api_key, retrieved: list[spans.Retrieved], limits: spans.Limits) -> Late:
    """Give the documents of these retrievals to audits of their traces stored before."""
    late = Late()
    trace_ids = sorted({r.trace_id for r in retrieved})[:MAX_LATE_AUDITS]
    if not trace_ids:
        return late
    audits = [
        a
        for a in _audits_of_traces(api_key, trace_ids)
        if (a.metadata or {}).get("source") == "otlp"
    ]
    if not audits:
        return late
    memory = recall(api_key, set(trace_ids))
    by_span: dict[str, dict[str, AuditRun]] = {}
    for audit in audits:
        base = audit.external_id.removesuffix(LATE)
        by_span.setdefault(base, {})["late" if audit.external_id.endswith(LATE) else "first"] = (
            audit
        )
    reruns = []
    for base, pair in by_span.items():
        first, rerun = pair.get("first"), pair.get("late")
        target = rerun or first
        if target is None:
            continue
        known = set((target.metadata or {}).get("source_spans") or [])
        missing = [r for r in memory.get(base.split(":", 1)[0], []) if r.span_id not in known]
        if not missing:
            continue
        extra, extra_spans = spans.joined(missing, limits)
        room = max(0, limits.max_sources - len(target.sources or []))
        if not extra[:room]:
            continue  # nothing to add: the sources are full, or the retrievals found nothing
        sources = list(target.sources or []) + extra[:room]
        metadata = {**(target.metadata or {}), "source_spans": sorted(known) + extra_spans}
        if target.status == AuditRun.Status.PENDING and AuditRun.objects.filter(
            pk=target.pk, status=AuditRun.Status.PENDING
        ).update(sources=sources, metadata=metadata):
            late.joined += 1  # claimed after this: the analysis reads the new sources
        elif rerun is None and first is not None:
            reruns.append(
                {
                    "user_input": first.user_input,
                    "response": first.response,
                    "sources": sources,
                    "metadata": {**metadata, "late_sources": True},
                    "external_id": base + LATE,
                    "collision_key": first.collision_key,
                    "options": copy.deepcopy(first.options),
                    "incomplete": first.incomplete,
                    "rerun_of": first,
                }
            )
        else:
            late.dropped += 1
    for result in submit.submit_audits_once(reruns, api_key=api_key) if reruns else []:
        if isinstance(result, AuditRun) and result.was_created:
            late.reruns += 1
    return late


__all__ = ["Late", "join_late", "recall", "remember"]
