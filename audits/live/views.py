"""The Live page (staff only): the first render of the feed `audits.live.consumers` updates."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from audits.cards import cards
from audits.live.fragments import LIVE_ROWS, counters
from audits.permissions import staff_required

# --- live feed ----------------------------------------------------------------------------


@require_GET
@staff_required
def live(request: HttpRequest) -> HttpResponse:
    """New audits as they arrive (WebSocket /ws/audits/, audits.live.consumers)."""
    filters = cards.ListFilters.from_query(request.GET)
    cursor = timezone.now()  # before the reads: whatever commits later is caught up
    page = cards.audit_page(filters, None, size=LIVE_ROWS)
    query = urlencode(filters.as_params())
    context = {
        "nav": "live",
        "filters": filters,
        "cards": page.audits,
        "counters": counters(),
        "cursor": cursor.isoformat(),
        "ws_url": "/ws/audits/" + (f"?{query}" if query else ""),
        "cap": LIVE_ROWS,
        "choices": cards.filter_choices(filters),
        "severities": cards.SEVERITIES,
    }
    return render(request, "audits/live.html", context)
