"""The table view of the audit list: sortable column headers that keep the filters (the
rows themselves: `audits.cards.html.table_row`)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.urls import reverse

from audits.cards.cards import ListFilters

# Each sortable column: its descending and ascending sort (the first click: descending).
SORTABLE = {"time": ("-created_at", "created_at"), "score": ("-top_score", "top_score")}


@dataclass(frozen=True, slots=True)
class SortHeader:
    url: str
    aria_sort: str  # "descending", "ascending" or "none"
    arrow: str


def list_url(params: dict[str, str]) -> str:
    query = urlencode(params)
    return reverse("audits:list") + (f"?{query}" if query else "")


def sort_headers(filters: ListFilters) -> dict[str, SortHeader]:
    """A link per sortable column: descending first, then it flips; the filters stay."""
    headers = {}
    current = filters.sort_key
    for column, (desc, asc) in SORTABLE.items():
        if current == desc:
            state, arrow, target = "descending", "▼", asc
        elif current == asc:
            state, arrow, target = "ascending", "▲", desc
        else:
            state, arrow, target = "none", "", desc
        # The default sort is left out of the URL (clean, bookmarkable).
        value = "" if target == "-created_at" else target
        headers[column] = SortHeader(list_url(filters.params_with(sort=value)), state, arrow)
    return headers
