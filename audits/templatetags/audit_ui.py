"""Template filters of the dashboard. None of them returns markup: the templates build
the HTML and autoescape every value, so model text stays text (the `when` tag builds its
`<time>` with `format_html`, which escapes)."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html

from audits import highlight

register = template.Library()

SEVERITY_ICONS = {"info": "ℹ", "warning": "▲", "critical": "✖"}
SEVERITY_LABELS = {"info": "Info", "warning": "Warning", "critical": "Critical"}
STATUS_ICONS = {
    "complete": "✓", "ok": "✓", "pending": "…", "running": "⟳", "failed": "✖", "timeout": "◷",
}


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
        shown = [_bounded(v, depth + 1) for v in value[:JSON_ITEMS]]
        if len(value) > JSON_ITEMS:
            shown.append(f"… {len(value) - JSON_ITEMS} more")
        return shown
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
    """The one date format of the dashboard: a `<time>` with the ISO instant, relative text
    ("3 minutes ago", kept fresh by static/js/app.js) and the absolute UTC time on hover."""
    if value is None:
        return empty
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    absolute = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return format_html(
        '<time datetime="{}" title="{}" data-relative>{}</time>',
        value.isoformat(),
        absolute,
        relative(value),
    )


def relative(value: datetime, now: datetime | None = None) -> str:
    """"just now", "5 minutes ago", "3 hours ago", "12 days ago", else the date (the same
    rule as `relativeTime` in static/js/app.js, which refreshes the text)."""
    seconds = ((now or timezone.now()) - value).total_seconds()
    if seconds < 60:
        return "just now"
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= size and (unit != "day" or seconds < 30 * 86400):
            n = int(seconds // size)
            return f"{n} {unit}{'' if n == 1 else 's'} ago"
    return value.astimezone(UTC).strftime("%Y-%m-%d")
