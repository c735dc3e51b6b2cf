"""The markup of the audit list's rows: the cards (list page, Live feed) and the table rows.

They are the most repeated markup of the dashboard (25 cards, 50 rows a page, one card per
Live update), and the template engine's cost per card (some 80 nodes: variable lookups,
filters, `{% url %}`, the verdict form) dominated those pages. Built here from
`cards.prepare_cards` rows they cost a small fraction of it (docs/contributing/performance.md). The templates still place
them (`{% audit_cards %}`, `{% audit_table_rows %}` in `audit_ui`; the Live feed calls
`cards` itself), and
the verdict form a card carries is the one `audits/list.html#verdict` renders (a test
renders both and compares them).

Every stored value goes through `text` (Django's `escape`: `html.escape` of `str(value)`,
as `{{ value }}` renders it with autoescape); only what is written here (markup, icons,
scores, times) goes out as it is. Model text is never marked safe.
"""

from __future__ import annotations

import functools
import html
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any
from uuid import UUID

from django.urls import reverse
from django.utils import formats, timezone, translation
from django.utils.dates import MONTHS_3
from django.utils.safestring import SafeString
from django.utils.text import capfirst

from audits.cards.highlight import excerpt

# Shared with the `audit_ui` filters (same icons and labels everywhere).
SEVERITY_ICONS = {"info": "ℹ", "warning": "▲", "critical": "✖"}
SEVERITY_LABELS = {"info": "Info", "warning": "Warning", "critical": "Critical"}
STATUS_ICONS = {
    "complete": "✓",
    "ok": "✓",
    "pending": "…",
    "running": "⟳",
    "failed": "✖",
    "timeout": "◷",
}
CHIPS = 3  # surfaced finding types a table row shows (the most severe first)
_URL_SENTINEL = UUID(int=0)


def text(value: Any) -> str:
    """`value` as `{{ value }}` renders it with autoescape: markup kept, text escaped,
    numbers as the template engine localizes them."""
    if type(value) is str:
        return html.escape(value)
    if hasattr(value, "__html__"):
        return value.__html__()
    if isinstance(value, float | int) and not isinstance(value, bool):
        return html.escape(str(formats.localize(value)))
    return html.escape(str(value))


def score_text(value: float | None) -> str:
    """The `score` filter: two decimals, or a dash."""
    return "—" if value is None else f"{value:.2f}"


def severity_icon(severity: str) -> str:
    return SEVERITY_ICONS.get(severity, "•")


def severity_label(severity: str) -> str:
    return SEVERITY_LABELS.get(severity, severity or "Unknown")


def status_icon(status: str) -> str:
    return STATUS_ICONS.get(status, "•")


@dataclass(frozen=True, slots=True)
class Rows:
    """What every row of one render shares: the request's CSRF field, whether the user may
    record verdicts, and the URL patterns, reversed once."""

    csrf_input: str  # the hidden CSRF field, or "" (no token: a shared Live fragment)
    can_review: bool | None  # None: no user (Live fragments show the buttons; the view checks)
    detail_url: tuple[str, str]  # the detail URL around the audit id, escaped
    review_url: tuple[str, str]
    decimal_separator: str  # of the active language, as `{{ number }}` renders it
    timezone: tzinfo  # the current one, as the `date` filter renders a time
    months: tuple[str, ...]  # the `date` filter's "M" of each month (index 1-12), escaped

    @classmethod
    def from_context(cls, context: Any) -> Rows:
        """From a template context: its `csrf_token` and `perms`, as the templates read them."""
        token = context.get("csrf_token")
        csrf_input = ""
        if token and token != "NOTPROVIDED":
            csrf_input = f'<input type="hidden" name="csrfmiddlewaretoken" value="{text(token)}">'
        perms = context.get("perms")
        can_review = None if not perms else bool(perms["audits"]["add_review"])
        return cls(
            csrf_input,
            can_review,
            _around("audits:detail"),
            _around("audits:review"),
            formats.get_format("DECIMAL_SEPARATOR"),
            timezone.get_current_timezone(),
            _month_names(translation.get_language()),
        )

    @classmethod
    def shared(cls) -> Rows:
        """For fragments every viewer gets (the Live feed): as a template without a request."""
        return cls.from_context({})

    def number(self, value: Any) -> str:
        """`text(value)` without `localize`'s cost for the card's numbers: below 1000 no
        digit grouping applies, and a float is `str()` with the decimal separator."""
        if type(value) is float and math.isfinite(value) and -1000 < value < 1000:
            digits = str(value)
            if "e" not in digits:
                return digits.replace(".", self.decimal_separator)
        elif type(value) is int and -1000 < value < 1000:
            return str(value)
        return text(value)

    def detail(self, pk: str) -> str:
        """The escaped detail URL of the audit `pk` (its id, escaped)."""
        return f"{self.detail_url[0]}{pk}{self.detail_url[1]}"

    def review(self, pk: str) -> str:
        return f"{self.review_url[0]}{pk}{self.review_url[1]}"


@functools.lru_cache(maxsize=32)
def _month_names(language: str | None) -> tuple[str, ...]:
    """The `date` filter's "M" of each month (index 1-12) in `language`, escaped."""
    return ("",) + tuple(text(str(MONTHS_3[month]).title()) for month in range(1, 13))


def _around(name: str) -> tuple[str, str]:
    """The reversed URL of `name` split around its audit id (`str(uuid)` is what the
    `uuid` path converter puts there)."""
    url = reverse(name, args=[_URL_SENTINEL])
    before, sentinel, after = url.partition(str(_URL_SENTINEL))
    if not sentinel:
        raise ValueError(f"{name} does not take the audit id in its path")
    return text(before), text(after)


def when(value: datetime | None, empty: str = "—") -> str:
    """The one date format of the dashboard (the `when` tag): a `<time>` with the ISO
    instant, relative text ("3 minutes ago", kept fresh by static/js/app.js) and the
    absolute UTC time on hover."""
    if value is None:
        return text(empty)
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    absolute = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    # Digits, dashes, colons and words of our own: nothing to escape.
    return (
        f'<time datetime="{value.isoformat()}" title="{absolute}" data-relative>'
        f"{relative(value)}</time>"
    )


def relative(value: datetime, now: datetime | None = None) -> str:
    """ "just now", "5 minutes ago", "3 hours ago", and past a day the date (the same rule
    as `relativeTime` in static/js/app.js, which refreshes the text)."""
    seconds = ((now or timezone.now()) - value).total_seconds()
    if seconds < 60:
        return "just now"
    for size, unit in ((3600, "hour"), (60, "minute")):
        if seconds >= size and seconds < 86400:
            n = int(seconds // size)
            return f"{n} {unit}{'' if n == 1 else 's'} ago"
    return value.astimezone(UTC).strftime("%Y-%m-%d")


# --- cards --------------------------------------------------------------------------------


def _badge(badge: Any, tag: str) -> str:
    count = f" ×{text(badge.count)}" if badge.count > 1 else ""
    severity = text(badge.severity)
    label = SEVERITY_LABELS.get(badge.severity) or text(severity_label(badge.severity))
    return (
        f'<{tag} class="badge sev-{severity}" title="{text(badge.label)}">'
        f'<i class="sev-icon" aria-hidden="true">{severity_icon(badge.severity)}</i>'
        f'<span class="visually-hidden">{label}:</span>'
        f"{text(badge.type)}{count}</{tag}>"
    )


def _status(escaped: str, status: str) -> str:
    return (
        f'<span class="status status-{escaped}"><span aria-hidden="true">'
        f"{status_icon(status)}</span> {escaped}</span>"
    )


def card(run: Any, rows: Rows) -> str:
    """The `<li>` card of a prepared audit (`cards.prepare_cards`)."""
    h = run.headline
    pk = text(run.pk)
    status = text(run.status)
    mean = score_text(run.overall_score)
    analyzer = f" ({text(h.analyzer)})" if h.analyzer else ""
    forced = (
        f'    <span class="small forced-label">forced by {text(h.forced_by)}</span>\n'
        if h.forced_by
        else ""
    )
    meter = ""
    if h.score is not None:
        threshold = rows.number(run.threshold)
        meter = (
            f'    <meter min="0" max="1" low="{threshold}" high="{threshold}"'
            f' optimum="0" value="{rows.number(h.score)}" aria-label="Highest score">'
            f"{score_text(h.score)}</meter>\n"
        )
    if run.response:
        response = text(excerpt(run.response, 220))
    elif run.status in ("pending", "running"):
        response = '<span class="muted">streaming…</span>'
    else:
        response = "(empty response)"
    badges = "".join(f"      {_badge(b, 'li')}\n" for b in run.badges)
    if run.more_badges:
        badges += f'      <li class="badge">+{text(run.more_badges)} more</li>\n'
    if not run.badges and run.status == "complete":
        badges += '      <li class="muted small">No surfaced findings</li>\n'
    surfaced = ""
    if run.has_card:
        names = ", ".join(text(r.analyzer_id) for r in run.surfaced_list)
        surfaced = (
            '    <div class="surfaced-flag"><span aria-hidden="true">●</span> surfaced'
            f"{': ' + names if run.surfaced_list else ''}</div>\n"
        )
    verdict = ""
    if run.has_card and run.status == "complete":
        verdict = verdict_form(run.pk, run.current_verdict, rows) + "\n"
    return (
        f'<li id="audit-card-{pk}" class="card audit-card" data-status="{status}">\n'
        f'  <div class="score {text(h.tone)}" title="Highest analyzer score{analyzer};'
        f' mean of all analyzers {mean}">\n'
        f'    <span class="score-value">{score_text(h.score)}</span>\n'
        f"{meter}"
        f'    <span class="small muted score-analyzer">{text(h.analyzer or "highest")}</span>\n'
        f'    <span class="small muted score-mean">mean {mean}</span>\n'
        f"{forced}"
        "  </div>\n"
        '  <div class="card-body" hx-disable>\n'
        f'    <a class="card-link card-title" href="{rows.detail(pk)}">'
        f"{text(excerpt(run.user_input or '', 140) or '(no user input)')}</a>\n"
        f'    <p class="excerpt">{response}</p>\n'
        '    <ul class="badges" aria-label="Surfaced findings">\n'
        f"{badges}"
        "    </ul>\n"
        "  </div>\n"
        '  <div class="card-meta">\n'
        f"    {_status(status, run.status)}\n"
        f"{surfaced}"
        f"    <div>{when(run.created_at)}</div>\n"
        f"{verdict}"
        "  </div>\n"
        "</li>\n"
    )


def cards(runs: Iterable[Any], rows: Rows) -> SafeString:
    return SafeString("".join(card(run, rows) for run in runs))


_BUTTONS = (
    ("confirmed", "verdict-confirm", "Confirmed: a real problem", "✓", "Confirm"),
    ("false_positive", "verdict-fp", "False positive: not a problem", "✗", "False positive"),
    ("unsure", "verdict-unsure", "Unsure", "?", "Unsure"),
)


def verdict_form(audit_id: Any, current: Any, rows: Rows) -> str:
    """A card's verdict form on the whole audit: `audits/list.html#verdict` with target
    None (which the detail page and the verdict view render)."""
    pk = text(audit_id)
    url = rows.review(pk)
    has = f" has-verdict verdict-{text(current.verdict)}" if current else ""
    if current:
        state = (
            f"<strong>{text(capfirst(current.get_verdict_display()))}</strong>\n"
            f'      <span class="muted">by {text(current.reviewer_name or "unknown")},'
            f" {when(current.created_at)}</span>"
        )
    else:
        state = '<span class="muted">Not reviewed</span>'
    comment = current.comment if current else ""
    if rows.can_review is False:
        actions = (
            f'    <p class="verdict-comment-text small" hx-disable>{text(comment)}</p>\n'
            if comment
            else ""
        )
    else:
        chosen = current.verdict if current else None
        buttons = "".join(
            f'      <button type="submit" name="verdict" value="{value}" class="verdict-button'
            f' {css}" aria-pressed="{"true" if chosen == value else "false"}" title="{title}">'
            f'<span aria-hidden="true">{icon}</span> {label}</button>\n'
            for value, css, title, icon, label in _BUTTONS
        )
        shown = (
            f'      <p class="verdict-comment-text" hx-disable>{text(comment)}</p>\n'
            if comment
            else ""
        )
        actions = (
            '    <span class="verdict-buttons">\n'
            f"{buttons}"
            "    </span>\n"
            '    <details class="verdict-comment small">\n'
            f"      <summary>{'Comment' if comment else 'Add a comment'}</summary>\n"
            f"{shown}"
            f'      <label class="visually-hidden" for="verdict-comment-{pk}">'
            "Comment (sent with the next verdict)</label>\n"
            f'      <textarea id="verdict-comment-{pk}" name="comment" rows="2" maxlength="5000"'
            ' placeholder="Optional, sent with the verdict you click"></textarea>\n'
            "    </details>\n"
        )
    return (
        f'<form id="verdict-{pk}"\n'
        f'      class="verdict{has}"\n'
        f'      method="post" action="{url}"\n'
        f'      hx-post="{url}" hx-target="this" hx-swap="outerHTML"\n'
        '      hx-disabled-elt="find .verdict-confirm, find .verdict-fp, find .verdict-unsure"\n'
        '      aria-label="Verdict on this audit">\n'
        f"  {rows.csrf_input}\n"
        '  <span class="verdict-state small" role="status">\n'
        f"    {state}\n"
        "  </span>\n"
        f"{actions}"
        "</form>"
    )


# --- table rows ---------------------------------------------------------------------------


def _row_dates(value: datetime, rows: Rows) -> tuple[str, str, str]:
    """The table's three renderings of a time, escaped, as the `date` filter gives them
    ('c', 'Y-m-d H:i:s e', 'M j, H:i'; `dateformat` costs a tenth of a millisecond)."""
    local = value.astimezone(rows.timezone) if value.utcoffset() is not None else value
    return (
        local.isoformat(),
        text(f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or ''}"),
        f"{rows.months[local.month]} {local.day}, {local:%H:%M}",
    )


def table_row(run: Any, rows: Rows) -> str:
    """One `<tr>` of the table view (a prepared audit, as for its card)."""
    h = run.headline
    pk = text(run.pk)
    url = rows.detail(pk)
    iso, absolute, short = _row_dates(run.created_at, rows)
    forced = (
        f' <span class="small forced-label" title="forced by {text(h.forced_by)}">forced</span>'
        if h.forced_by
        else ""
    )
    user_input = run.user_input or ""
    chips = "".join(_badge(b, "span") for b in run.badges[:CHIPS])
    more = max(0, len(run.badges) - CHIPS) + run.more_badges
    if more:
        chips += (
            f'\n      <span class="badge" title="more kinds of surfaced findings">+{text(more)}'
            "</span>"
        )
    verdict = ""
    if run.has_card and run.status == "complete":
        current = run.current_verdict
        review = rows.review(pk)
        now = (
            f"<strong>{text(capfirst(current.get_verdict_display()))}</strong>"
            if current
            else '<span class="muted">—</span>'
        )
        buttons = _ROW_BUTTONS if rows.can_review else ""
        verdict = (
            f'        <form class="row-verdict" method="post" action="{review}"\n'
            f'              hx-post="{review}" hx-target="find .row-verdict-now"'
            ' hx-select=".verdict-state" hx-swap="innerHTML">\n'
            f"          {rows.csrf_input}\n"
            f'          <span class="row-verdict-now small">{now}</span>\n'
            f"{buttons}"
            "        </form>\n"
        )
    return (
        f'  <tr id="audit-row-{pk}" class="audit-row" tabindex="-1" data-href="{url}">\n'
        f'    <td class="col-time"><time datetime="{iso}" title="{absolute}">{short}</time></td>\n'
        f'    <td class="col-input"><a class="row-link" href="{url}"'
        f' title="{text(excerpt(user_input, 300))}">'
        f"{text(excerpt(user_input, 90) or '(no user input)')}</a></td>\n"
        f'    <td class="col-score {text(h.tone)}" title="mean of all analyzers'
        f' {score_text(run.overall_score)}"><span class="score-value">{score_text(h.score)}</span>'
        f' <span class="muted small">{text(h.analyzer)}</span>{forced}</td>\n'
        '    <td class="col-types">\n'
        f"      {chips}\n"
        "    </td>\n"
        f'    <td class="col-status">{_status(text(run.status), run.status)}</td>\n'
        '    <td class="col-verdict">\n'
        f"{verdict}"
        "    </td>\n"
        "  </tr>\n"
    )


_ROW_BUTTONS = "".join(
    f'          <button type="submit" name="verdict" value="{value}" data-verdict-key="{key}"'
    f' title="{title} ({key})" aria-label="{label}"><span aria-hidden="true">{icon}</span>'
    "</button>\n"
    for value, key, title, label, icon in (
        ("confirmed", "c", "Confirmed", "Confirm", "✓"),
        ("false_positive", "f", "False positive", "False positive", "✗"),
        ("unsure", "u", "Unsure", "Unsure", "?"),
    )
)


def table_rows(runs: Iterable[Any], rows: Rows) -> SafeString:
    return SafeString("".join(table_row(run, rows) for run in runs))
