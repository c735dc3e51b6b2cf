"""Template filters of the dashboard. None of them returns markup: the templates build
the HTML and autoescape every value, so model text stays text. The tags that do return
markup build it in `audits.cards.html`, which escapes every value (`when`, the audit list's
cards and table rows)."""

from __future__ import annotations

import itertools
import json
from datetime import datetime
from typing import Any

from django import template
from django.utils.safestring import SafeString

from audits.cards import highlight, html

register = template.Library()

SEVERITY_ICONS = html.SEVERITY_ICONS
SEVERITY_LABELS = html.SEVERITY_LABELS
STATUS_ICONS = html.STATUS_ICONS


@register.filter
def severity_icon(severity: str) -> str:
    return SEVERITY_ICONS.get(severity, "•")


@register.filter
def severity_label(severity: str) -> str:
    return SEVERITY_LABELS.get(severity, severity or "Unknown")


@register.filter
def status_icon(status: str) -> str:
    return STATUS_ICONS.get(status, "•")


@register.filter
def score_class(score: float | None, threshold: float | None = 0.3) -> str:
    """score-high at or above the threshold, score-mid above half of it, else score-low."""
    if score is None:
        return "score-none"
    threshold = 0.3 if threshold is None else threshold
    if score >= threshold:
        return "score-high"
    if score >= threshold / 2:
        return "score-mid"
    return "score-low"


@register.filter
def score(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


@register.filter
def oneline(text: str | None, length: int = 160) -> str:
    return highlight.excerpt(text or "", int(length))


@register.filter
def safe_href(url: str | None) -> str:
    return highlight.safe_href(url)


@register.filter
def linkify(text: str | None) -> list[highlight.TextPiece]:
    return highlight.linkify(text or "")


JSON_ITEMS = 100  # items of a list or object pretty_json shows, at every level
JSON_TEXT = 5000  # characters of a string pretty_json shows
JSON_DEPTH = 12


def _bounded(value: Any, depth: int = 0) -> Any:
    """`value` cut to what a page shows: a work proportional to that, not to `value`."""
    if depth >= JSON_DEPTH and isinstance(value, dict | list | tuple):
        return "…"
    if isinstance(value, dict):
        items = list(itertools.islice(value.items(), JSON_ITEMS))
        shown = {str(k): _bounded(v, depth + 1) for k, v in items}
        if len(value) > JSON_ITEMS:
            shown["…"] = f"{len(value) - JSON_ITEMS} more"
        return shown
    if isinstance(value, list | tuple):
        listed = [_bounded(v, depth + 1) for v in value[:JSON_ITEMS]]
        if len(value) > JSON_ITEMS:
            listed.append(f"… {len(value) - JSON_ITEMS} more")
        return listed
    if isinstance(value, str) and len(value) > JSON_TEXT:
        return value[:JSON_TEXT] + f"… ({len(value) - JSON_TEXT} more characters)"
    return value


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON as text (the template escapes it), at most `JSON_ITEMS` items of any
    list or object and `JSON_TEXT` characters of any string."""
    return json.dumps(_bounded(value), indent=2, ensure_ascii=False, sort_keys=True, default=str)


@register.filter
def ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


@register.simple_tag
def when(value: datetime | None, empty: str = "—") -> str:
    """The one date format of the dashboard (`html.when`): a `<time>` with the ISO
    instant, relative text and the absolute UTC time on hover."""
    return SafeString(html.when(value, empty))


# The audit list's rows, built in Python (`audits.cards.html`: the template engine's cost
# per node made them most of the list page's time). The context gives the CSRF field and
# the user's permission, as `{% csrf_token %}` and `perms` did.


@register.simple_tag(takes_context=True)
def audit_cards(context, audits) -> str:
    """The `<li>` cards of prepared audits (`cards.prepare_cards`)."""
    return html.cards(audits, html.Rows.from_context(context))


@register.simple_tag(takes_context=True)
def audit_table_rows(context, audits) -> str:
    """The `<tr>` rows of the table view."""
    return html.table_rows(audits, html.Rows.from_context(context))
