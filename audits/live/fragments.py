"""HTML fragments of the live pages: rendered from the pages' own partials, read from the DB.

Every fragment is an `hx-swap-oob` element: replaced by id (`hx-swap-oob="true"`) or, for
new rows, inserted (`afterbegin:#live-rows`, the client turns an insert of an id it already
shows into a replacement). Model text is escaped by the templates, never marked safe.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Count, Q
from django.db.models.expressions import RawSQL
from django.http import QueryDict
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from audits.cards import cards, html
from audits.cards.detail import detail_context, stream_context
from audits.models import AuditRun, TraceLine
from audits.store import queries
from audits.store.trace_rows import lines_after

LIVE_ROWS = 50  # rows the Live page keeps visible (the client trims to the same cap)
TRACE_BATCH = 500  # trace lines one update appends at most (the next one continues)
RESET_MARKER = " data-live-reset"  # on feed rows that replace the list (static/js/live.js)
CURSOR_MARGIN = timedelta(seconds=2)  # catch-up overlaps a little: duplicates are harmless


# --- the live feed ------------------------------------------------------------------------


def parse_filters(query: str | bytes) -> cards.ListFilters:
    if isinstance(query, bytes):
        query = query.decode("latin-1")
    return cards.ListFilters.from_query(QueryDict(query))


def parse_cursor(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = parse_datetime(value)
    except ValueError:
        return None
    if parsed is not None and timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, timezone.UTC)
    return parsed


def counters() -> dict[str, Any]:
    """Audits in the last minute; surfaced % and failures of the audits of the last hour.

    One query, sent every second to every Live page: it reads only the covering index
    `audit_trends_idx` (created_at, status, has_card) over the last hour, never the table
    rows (a whole-table scan past every row's texts before)."""
    now = timezone.now()
    data = AuditRun.objects.filter(created_at__gte=now - timedelta(hours=1)).aggregate(
        last_minute=Count("created_at", filter=Q(created_at__gte=now - timedelta(minutes=1))),
        finished=Count("created_at", filter=Q(status=AuditRun.Status.COMPLETE)),
        surfaced=Count("created_at", filter=Q(status=AuditRun.Status.COMPLETE, has_card=True)),
        failed=Count("created_at", filter=Q(status=AuditRun.Status.FAILED)),
    )
    finished = data["finished"]
    return {
        "per_minute": data["last_minute"],
        "surfaced_pct": round(100 * data["surfaced"] / finished) if finished else None,
        "failed": data["failed"],
        "finished": finished,
    }


def matching_cards(filters: cards.ListFilters, ids: list[Any], limit: int) -> list[AuditRun]:
    """The cards of `ids` that match `filters`, newest on top, at most `limit`."""
    qs = queries.filter_audits(filters.to_selector(), cards.card_queryset())
    rows = qs.filter(pk__in=ids).order_by("-created_at", "-id")[:limit]
    return cards.prepare_cards(list(rows))


# The audit ids of an update as ONE parameter, per database (elsewhere: the ORM's IN list).
_ID_SETS = {
    "sqlite": ("SELECT value FROM json_each(%s)", lambda ids: json.dumps([i.hex for i in ids])),
    "postgresql": ("SELECT unnest(%s::uuid[])", lambda ids: [str(i) for i in ids]),
}


class NewsQuery:
    """Which audits of an update (those with news) a Live page with `filters` shows: the
    newest `LIVE_ROWS + 1` that match.

    Under load a filtered page is updated many times a second, for a few dozen audits
    each time, most of which do not match. Built through the ORM (the filters, an IN
    list of every id) that query cost many times its run in the database (figures in
    docs/contributing/performance.md); so it is compiled once per page and its ids go in as one parameter,
    and the ORM reads only the cards that matched."""

    def __init__(self, filters: cards.ListFilters) -> None:
        self.filters = filters
        self._compiled: tuple[str, list[Any], int] | None = None
        self._nothing = False  # the filters match no audit at all

    def cards(self, ids: list[Any]) -> list[AuditRun]:
        """The cards to show, newest first (`news_rows`)."""
        limit = LIVE_ROWS + 1
        vendor = connections[AuditRun.objects.db].vendor
        if vendor not in _ID_SETS:
            return matching_cards(self.filters, ids, limit)
        found = self._matching_ids(vendor, _uuids(ids))
        if not found:
            return []
        rows = cards.card_queryset().filter(pk__in=found).order_by("-created_at", "-id")
        return cards.prepare_cards(list(rows))

    def _matching_ids(self, vendor: str, ids: list[uuid.UUID]) -> list[Any]:
        if self._compiled is None and not self._nothing:
            self._compile(vendor)
        if self._nothing or not ids or self._compiled is None:
            return []
        sql, params, at = self._compiled
        params = list(params)
        params[at] = _ID_SETS[vendor][1](ids)
        with connections[AuditRun.objects.db].cursor() as cursor:
            cursor.execute(sql, params)
            return [row[0] for row in cursor.fetchall()]

    def _compile(self, vendor: str) -> None:
        marker = object()  # where the ids go
        qs = (
            queries.filter_audits(self.filters.to_selector(), AuditRun.objects.all())
            .filter(pk__in=RawSQL(_ID_SETS[vendor][0], (marker,)))
            .order_by("-created_at", "-id")
            .values_list("pk", flat=True)[: LIVE_ROWS + 1]
        )
        try:
            sql, params = qs.query.get_compiler(using=qs.db).as_sql()
        except EmptyResultSet:
            self._nothing = True
            return
        at = next(i for i, value in enumerate(params) if value is marker)
        self._compiled = (sql, list(params), at)


def _uuids(ids: list[Any]) -> list[uuid.UUID]:
    """`ids` as UUIDs; anything that is not one left out (it names no audit)."""
    out = []
    for value in ids:
        try:
            out.append(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except ValueError:
            continue
    return out


def news_rows(query: NewsQuery, ids: list[Any]) -> str:
    """The cards of the audits `ids` (news since the last update) for a page with the
    query's filters. More of them than the page shows (a burst): only the newest
    `LIVE_ROWS`, and the page shows just those (`reset`), as it would after a reload.
    They would push every older row off the page anyway, so the work stays bounded by
    what is visible."""
    found = query.cards(ids)
    if len(found) > LIVE_ROWS:
        return feed_rows(found[:LIVE_ROWS], reset=True)
    return feed_rows(found)


def changed_since(filters: cards.ListFilters, after: datetime) -> list[AuditRun]:
    """Cards of the audits created, started or finished after `after` (newest first)."""
    since = after - CURSOR_MARGIN
    qs = queries.filter_audits(filters.to_selector(), cards.card_queryset()).filter(
        Q(created_at__gt=since) | Q(started_at__gt=since) | Q(finished_at__gt=since)
    )
    return cards.prepare_cards(list(qs.order_by("-created_at", "-id")[:LIVE_ROWS]))


def feed_rows(cards: list[AuditRun], reset: bool = False) -> str:
    """New or changed cards (newest first), inserted at the top of the Live list; with
    `reset`, they replace the whole list (static/js/live.js)."""
    if not cards:
        return ""
    # The list page's card markup, built once for all (no CSRF field, no user:
    # the fragment is shared by every viewer; the verdict view checks permissions).
    inner = html.cards(cards, html.Rows.shared())
    marker = RESET_MARKER if reset else ""
    return f'<div hx-swap-oob="afterbegin:#live-rows"{marker}>\n{inner}</div>'


def is_burst(rows: str) -> bool:
    """Whether `rows` (from `news_rows`) are a burst's newest, replacing the list."""
    return rows.startswith('<div hx-swap-oob="afterbegin:#live-rows"' + RESET_MARKER)


def feed_status(now: datetime | None = None) -> str:
    """The counters and the cursor (what the client sends back when it reconnects)."""
    now = now or timezone.now()
    return render_to_string(
        "audits/live.html#live-status", {"counters": counters(), "cursor": now.isoformat()}
    )


# --- one audit ----------------------------------------------------------------------------


def audit_stream(run: AuditRun) -> str:
    return render_to_string("audits/live.html#stream", stream_context(run))


def trace_lines_after(run_id: Any, after: int) -> tuple[str, int]:
    """Trace lines after position `after`, appended in order; and the last position."""
    lines = lines_after(TraceLine.objects.filter(audit_id=run_id), after, TRACE_BATCH)
    if not lines:
        return "", after
    html = render_to_string(
        "audits/live.html#trace-lines", {"audit_id": run_id, "trace_lines": lines}
    )
    return html, lines[-1].position


def analyzer_progress(audit_id: str, event: dict[str, Any]) -> str:
    """One analyzer's progress pill (from the event: results are stored at the end)."""
    return render_to_string(
        "audits/live.html#analyzer-progress", {"audit_id": audit_id, "event": event}
    )


def detail_sections(run_id: Any, *, finished: bool, user: Any = None) -> str:
    """The detail page's sections as they are now (the state a reload shows)."""
    from types import SimpleNamespace

    run = cards.detail_queryset().get(pk=run_id)
    context = detail_context(run, SimpleNamespace(user=user) if user is not None else None)
    names = ["header", "results"]
    if finished:
        names += ["response", "diff", "links", "trace"]
    html = [render_to_string(f"audits/detail.html#{name}", context) for name in names]
    html.append(audit_stream(run))
    if finished:
        # Only to retire it: the connector holds the page's socket and its progress pills,
        # and swapping in a new one would open a new socket (whose catch-up swaps it again).
        html.append(render_to_string("audits/live.html#connector", {"audit": run}))
    # Every top-level element is swapped by its id.
    return "".join(_oob(fragment) for fragment in html)


_FIRST_TAG = re.compile(r"^(\s*<[a-zA-Z][\w-]*)")


def _oob(fragment: str) -> str:
    """Mark the fragment's root element `hx-swap-oob="true"` (replace by id)."""
    if "hx-swap-oob" in fragment.split(">", 1)[0]:
        return fragment
    return _FIRST_TAG.sub(r'\1 hx-swap-oob="true"', fragment.strip(), count=1)
