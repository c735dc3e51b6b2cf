"""The trends page's aggregates, summed from per-day pieces; complete past days are cached.

A window (the last N days, up to now) is cut into segments: the partial first day, every
whole day in between, and today (plus anything created after today, which counts in the
totals but has no day of its own, as before). The segments are aggregated with three
queries on covering indexes: audits grouped by segment (a binary search over the day
starts in a CASE) and score bin; results and annotation kinds (one row per audit, type
and severity, with its count), through their copy of the audit's `created_at`, as a UNION
ALL of one grouped range scan per day (cheaper than a CASE per row over 6 times as many
rows). The window's figures are sums of the segments': the same numbers one query over the
window gives (averages from partial sums added with math.fsum, equal after the page's
rounding).

A whole past day is cached (Django's cache, the default alias: per process with LocMem)
once it is *settled*: no audit created that day is pending or running. A finished audit
does not change any more (reruns are new audits, created now; results are only written
to a run that was pending), except in two rare ways the cache must still see:

- deletion (admin only) removes audits of a past day;
- a worker that outlived `recover_stale_runs` stores its report on an audit already
  marked failed (failed -> complete).

Both change the number of audits, or of failed audits, over the cached days: one indexed
count over those days (audits, failed) and the first and last creation times are
compared with the cached figures, and on any difference every day is computed afresh. Assumed: an audit's `created_at` never changes, and a finished
audit is never edited otherwise (the admin is read-only). Day boundaries are in the
current time zone, which is part of the key. Cold (nothing cached: a new process with
LocMem) every day is computed; warm, only today (figures: docs/contributing/performance.md).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import Case, Count, F, Max, Min, Q, Sum, Value, When
from django.utils import timezone

from audits.models import AnalyzerRunRecord, AnnotationKind, AuditRun
from audits.surfacing.policies import generation

CACHE_VERSION = 2  # 2: the histogram bins the highest score (top_score), with cards per bin
CACHE_SECONDS = 7 * 24 * 3600
CACHE_DAYS = 400  # stored days older than a window's start by this are dropped
UNFINISHED = (AuditRun.Status.PENDING, AuditRun.Status.RUNNING)

# One segment's figures: plain, picklable data.
#   runs: total, cards, failed, score_sum, score_n, first, last (created_at);
#   hist, hist_cards: audits (with a card) per bin of the highest score (top_score)
#   types: {type: {severity: n}}
#   analyzers: {id: [total, surfaced, failed, timeout, [dur_sum], dur_n, dur_max]}
#   (sums are lists of SQL partial sums, added with math.fsum at the end)
Stats = dict[str, Any]


def empty_stats(bins: int) -> Stats:
    return {
        "total": 0,
        "cards": 0,
        "failed": 0,
        "score_sum": [],
        "score_n": 0,
        "hist": [0] * bins,
        "hist_cards": [0] * bins,
        "types": {},
        "analyzers": {},
    }


def _bin_expression(bins: int) -> Case:
    """floor(top_score * bins) clamped to [0, bins - 1]; -1 without a score.

    A binary search over `score * bins < i`, which holds exactly when floor(score * bins)
    < i: the same bins as the former Floor() grouping, without SQLite's per-row Python
    FLOOR and in a handful of comparisons. Needs the `scaled` alias.
    """

    def search(lo: int, hi: int):
        if hi - lo == 1:
            return Value(lo)
        mid = (lo + hi) // 2
        return Case(When(scaled__lt=mid, then=search(lo, mid)), default=search(mid, hi))

    return Case(When(top_score__isnull=True, then=Value(-1)), default=search(0, bins))


Segment = tuple[Any, datetime | None, datetime | None]  # (key, from, until): [from, until)
# Segments per UNION ALL (SQLite allows 500 terms): a window of up to 100 days is one query.
CHUNK = 100


def _span(field: str, segments: Sequence[Segment]) -> Q:
    """Rows of any of the (sorted, disjoint) segments: one range per contiguous run."""
    ranges: list[list[datetime | None]] = []
    for _, lo, hi in segments:
        if ranges and ranges[-1][1] == lo:
            ranges[-1][1] = hi
        else:
            ranges.append([lo, hi])
    where = []
    for lo, hi in ranges:
        q = Q(**{f"{field}__gte": lo})
        if hi is not None:
            q &= Q(**{f"{field}__lt": hi})
        where.append(q)
    return functools.reduce(operator.or_, where)


def _segment_index(field: str, starts: Sequence[datetime | None], lo: int, hi: int):
    """Which of the segments starting at starts[lo:hi] a row lies in (a binary search)."""
    if hi - lo == 1:
        return Value(lo)
    mid = (lo + hi) // 2
    return Case(
        When(**{f"{field}__lt": starts[mid]}, then=_segment_index(field, starts, lo, mid)),
        default=_segment_index(field, starts, mid, hi),
    )


def _grouped_by_case(qs, field: str, segments: list[Segment], keys: list[str], **aggs):
    """(segment number, row) pairs of `qs` grouped by segment and `keys`, in one grouped
    query; a row lies in one of the (sorted, disjoint) segments: a binary search over their
    starts finds which."""
    starts = [lo for _, lo, _ in segments]
    rows = (
        qs.filter(_span(field, segments))
        .annotate(seg=_segment_index(field, starts, 0, len(starts)))
        .values("seg", *keys)
        .annotate(**aggs)
        .order_by()
    )
    return [(row["seg"], row) for row in rows]


def _grouped(qs, field: str, segments: list[Segment], numbers: list[int], keys: list[str], **aggs):
    """(segment number, row) pairs of `qs` grouped by segment and `keys`.

    One query: a UNION ALL of one grouped range scan per segment (faster than a CASE over
    the segments' bounds evaluated for every row, which needs one sort of all the rows).
    """
    parts = []
    for number, (_, lo, hi) in zip(numbers, segments, strict=True):
        parts.append(
            qs.filter(_span(field, [(None, lo, hi)]))
            .annotate(seg=Value(number))
            .values("seg", *keys)
            .annotate(**aggs)
            .order_by()
        )
    if not parts:
        return []
    rows = parts[0].union(*parts[1:], all=True).order_by() if len(parts) > 1 else parts[0]
    return [(row["seg"], row) for row in rows]


def segments_stats(segments: list[Segment], bins: int) -> list[Stats]:
    """The figures of each segment (sorted, disjoint): one query of audits, then one of
    results and one of annotation kinds (per CHUNK segments) over the segments with audits."""
    out = [empty_stats(bins) for _ in segments]
    if not segments:
        return out
    runs = AuditRun.objects.alias(scaled=F("top_score") * bins).annotate(bin=_bin_expression(bins))
    for i, row in _grouped_by_case(
        runs,
        "created_at",
        segments,
        ["bin"],
        total=Count("*"),
        cards=Count("created_at", filter=Q(has_card=True)),
        failed=Count("created_at", filter=Q(status=AuditRun.Status.FAILED)),
        score_sum=Sum("overall_score"),
        score_n=Count("overall_score"),
        first=Min("created_at"),
        last=Max("created_at"),
    ):
        stats = out[i]
        stats["total"] += row["total"]
        stats["cards"] += row["cards"]
        stats["failed"] += row["failed"]
        stats["first"] = min(filter(None, (stats.get("first"), row["first"])))
        stats["last"] = max(filter(None, (stats.get("last"), row["last"])))
        if row["bin"] >= 0:
            stats["hist"][row["bin"]] += row["total"]
            stats["hist_cards"][row["bin"]] += row["cards"]
        if row["score_n"]:
            stats["score_sum"].append(row["score_sum"])
            stats["score_n"] += row["score_n"]

    # Segments without audits have no results or annotations either.
    busy = [i for i, stats in enumerate(out) if stats["total"]]
    for start in range(0, len(busy), CHUNK):
        chunk = busy[start : start + CHUNK]
        part = [segments[i] for i in chunk]
        for i, row in _grouped(
            AnnotationKind.objects.all(),
            "audit_created_at",
            part,
            chunk,
            ["type", "severity"],
            n=Sum("count"),
        ):
            types = out[i]["types"].setdefault(row["type"], {})
            types[row["severity"]] = types.get(row["severity"], 0) + row["n"]
        for i, row in _grouped(
            AnalyzerRunRecord.objects.all(),
            "audit_created_at",
            part,
            chunk,
            ["analyzer_id"],
            total=Count("*"),
            surfaced=Count("audit_created_at", filter=Q(surfaced=True)),
            failed=Count("audit_created_at", filter=Q(status=AnalyzerRunRecord.Status.FAILED)),
            timeout=Count("audit_created_at", filter=Q(status=AnalyzerRunRecord.Status.TIMEOUT)),
            dur_sum=Sum("duration_ms"),
            dur_max=Max("duration_ms"),
        ):
            # duration_ms is NOT NULL: its count is the row count.
            out[i]["analyzers"][row["analyzer_id"]] = [
                row["total"],
                row["surfaced"],
                row["failed"],
                row["timeout"],
                [row["dur_sum"] or 0.0],
                row["total"],
                row["dur_max"],
            ]
    return out


def merge(parts: list[Stats], bins: int) -> Stats:
    """The figures of several segments together."""
    out = empty_stats(bins)
    for part in parts:
        for key in ("total", "cards", "failed", "score_n"):
            out[key] += part[key]
        out["score_sum"].extend(part["score_sum"])
        for key in ("hist", "hist_cards"):
            out[key] = [a + b for a, b in zip(out[key], part[key], strict=True)]
        for type_, severities in part["types"].items():
            mine = out["types"].setdefault(type_, {})
            for severity, n in severities.items():
                mine[severity] = mine.get(severity, 0) + n
        for analyzer_id, row in part["analyzers"].items():
            mine = out["analyzers"].get(analyzer_id)
            if mine is None:
                out["analyzers"][analyzer_id] = [*row[:4], list(row[4]), *row[5:]]
                continue
            for i in (0, 1, 2, 3, 5):
                mine[i] += row[i]
            mine[4] = mine[4] + row[4]
            if row[6] is not None and (mine[6] is None or row[6] > mine[6]):
                mine[6] = row[6]
    return out


def day_start(day: date) -> datetime:
    """The first instant of `day` in the current time zone (DST-safe with zoneinfo)."""
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


def _cache_key(bins: int) -> str:
    # Re-surfacing changes past days' cards: each one starts (and ends) a new generation.

    return (
        f"trends-days:v{CACHE_VERSION}:{bins}:{timezone.get_current_timezone_name()}"
        f":s{generation()}"
    )


def window_stats(
    since: datetime, now: datetime, bins: int, *, use_cache: bool = True
) -> tuple[Stats, dict[date, Stats]]:
    """The window's figures and each day's (the first day from `since`)."""
    from django.core.cache import cache

    first_day = timezone.localdate(since)
    last_day = timezone.localdate(now)
    days = [first_day + timedelta(days=i) for i in range((last_day - first_day).days + 1)]
    middle = days[1:-1]
    segments: list[Segment] = [(first_day, since, day_start(first_day + timedelta(days=1)))]
    segments += [(d, day_start(d), day_start(d + timedelta(days=1))) for d in days[1:]]
    # Created after today (clock skew): in the totals, as before, but in no day.
    segments.append((None, day_start(last_day + timedelta(days=1)), None))

    key = _cache_key(bins)  # once: figures read during a re-surfacing stay in its generation
    stored: dict[str, Stats] = (cache.get(key) or {}) if use_cache else {}
    per_day: dict[Any, Stats] = {
        d: stored[d.isoformat()] for d in middle if d.isoformat() in stored
    }
    if per_day and not _still_valid(per_day):
        per_day = {}
    todo = [seg for seg in segments if seg[0] not in per_day]
    # Settled is read before the figures: a day settled then stays so (see above).
    settled = _settled([seg[0] for seg in todo if seg[0] in middle])
    per_day.update(zip([seg[0] for seg in todo], segments_stats(todo, bins), strict=True))
    fresh = {seg[0].isoformat(): per_day[seg[0]] for seg in todo if seg[0] in settled}
    if use_cache and fresh:
        horizon = (first_day - timedelta(days=CACHE_DAYS)).isoformat()
        kept = {key: value for key, value in stored.items() if key >= horizon}
        cache.set(key, {**kept, **fresh}, CACHE_SECONDS)

    future = per_day.pop(None)
    return merge([*per_day.values(), future], bins), per_day


def _settled(days: list[date]) -> set[date]:
    """Those of `days` (past days) without a pending or running audit: one query."""
    if not days:
        return set()
    unfinished = {
        timezone.localdate(created)
        for created in AuditRun.objects.filter(
            created_at__gte=day_start(min(days)),
            created_at__lt=day_start(max(days) + timedelta(days=1)),
            status__in=UNFINISHED,
        )
        .order_by()
        .values_list("created_at", flat=True)
    }
    return set(days) - unfinished


def _still_valid(cached: dict[Any, Stats]) -> bool:
    """Whether the cached days still have the audits they had: no deletion (count), no
    late failed -> complete (failed count), not another database's rows (the first and
    last creation times of the first and last cached days with audits). A count over
    those days' index range and two index seeks."""
    days = sorted(cached)
    segments = [(d, day_start(d), day_start(d + timedelta(days=1))) for d in days]
    live = AuditRun.objects.filter(_span("created_at", segments)).aggregate(
        total=Count("*"), failed=Count("created_at", filter=Q(status=AuditRun.Status.FAILED))
    )
    if live["total"] != sum(s["total"] for s in cached.values()) or live["failed"] != sum(
        s["failed"] for s in cached.values()
    ):
        return False
    busy = [seg for seg in segments if cached[seg[0]]["total"]]
    if not busy:
        return True
    first, last = busy[0], busy[-1]
    on = AuditRun.objects.order_by()
    return (
        on.filter(_span("created_at", [first])).aggregate(at=Min("created_at"))["at"]
        == cached[first[0]]["first"]
        and on.filter(_span("created_at", [last])).aggregate(at=Max("created_at"))["at"]
        == cached[last[0]]["last"]
    )


def mean(values: list[float], n: int) -> float | None:
    """An average of SQL partial sums (math.fsum: no rounding drift between pieces)."""
    return math.fsum(values) / n if n else None
