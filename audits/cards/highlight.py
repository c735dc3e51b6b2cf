"""Turn untrusted response text into plain segments the templates escape and wrap.

Nothing here produces HTML: every function returns text pieces with a little metadata
(which annotations cover them, whether they were removed or added), and the templates
render each piece with autoescaping on. Model text can therefore never become markup.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from analyzers.engine.contract import SEVERITY_RANK
from analyzers.engine.textdiff import bounded_word_diff


class Span(Protocol):
    """What highlighting needs from an annotation (a model row or an engine Annotation)."""

    evidence: str | None
    start: int | None
    end: int | None
    severity: str


@dataclass(frozen=True, slots=True)
class Segment:
    text: str
    ann_ids: tuple[str, ...] = ()
    severity: str = ""

    @property
    def ann_attr(self) -> str:
        return " ".join(self.ann_ids)


def locate(text: str, span: Span) -> tuple[int, int] | None:
    """Where the span's evidence sits in `text`: its offsets when they agree with the
    evidence (or when there is no evidence), else the first occurrence of the evidence."""
    start, end, evidence = span.start, span.end, span.evidence
    if (
        start is not None
        and end is not None
        and 0 <= start < end <= len(text)
        and (not evidence or text[start:end] == evidence)
    ):
        return start, end
    if evidence:
        found = text.find(evidence)
        if found != -1:
            return found, found + len(evidence)
    return None


def highlight_segments(text: str, spans: Iterable[tuple[str, Span]]) -> list[Segment]:
    """Split `text` at every highlight boundary; each piece lists the ids covering it.

    `spans` are (dom id, annotation) pairs. Overlaps are allowed: a piece covered by
    several annotations carries all their ids and the most severe severity.
    """
    located: list[tuple[int, int, str, str]] = []
    for ann_id, span in spans:
        where = locate(text, span)
        if where is not None:
            located.append((*where, ann_id, span.severity))
    if not located:
        return [Segment(text)] if text else []

    # A sweep over the boundaries: O((n + pieces x overlapping spans)), not n x spans.
    starts: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for index, (s, e, _, _) in enumerate(located):
        starts.setdefault(s, []).append(index)
        ends.setdefault(e, []).append(index)
    bounds = sorted({0, len(text), *starts, *ends})
    active: dict[int, None] = {}  # indexes of the spans covering the current piece, in order
    segments: list[Segment] = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        for index in ends.get(lo, ()):
            active.pop(index, None)
        for index in starts.get(lo, ()):
            active[index] = None
        if active:
            covering = [located[index] for index in sorted(active)]
            severity = max((c[3] for c in covering), key=lambda s: SEVERITY_RANK.get(s, 0))
            segment = Segment(text[lo:hi], tuple(c[2] for c in covering), severity)
        else:
            segment = Segment(text[lo:hi])
        if segments and segments[-1].ann_ids == segment.ann_ids:
            last = segments.pop()
            segment = Segment(last.text + segment.text, last.ann_ids, last.severity)
        segments.append(segment)
    return segments


@dataclass(frozen=True, slots=True)
class DiffPiece:
    text: str
    kind: str  # "equal", "removed" or "added"


@dataclass(slots=True)
class SideBySide:
    original: list[DiffPiece] = field(default_factory=list)
    cleaned: list[DiffPiece] = field(default_factory=list)
    changed: bool = False
    # Changes after the first MAX_DIFF_CHANGES are not marked (the texts are all shown).
    truncated: bool = False


MAX_DIFF_CHANGES = 400


def _append(pieces: list[DiffPiece], text: str, kind: str) -> None:
    if not text:
        return
    if pieces and pieces[-1].kind == kind:
        pieces[-1] = DiffPiece(pieces[-1].text + text, kind)
    else:
        pieces.append(DiffPiece(text, kind))


def side_by_side(original: str, cleaned: str) -> SideBySide:
    """A word-level diff: removed pieces on the original side, added ones on the cleaned.

    Linear in the length of the texts (`analyzers.engine.textdiff`), and only the first
    `MAX_DIFF_CHANGES` changes are marked, so a page of it is bounded too."""
    result = SideBySide()
    if original == cleaned:
        _append(result.original, original, "equal")
        _append(result.cleaned, cleaned, "equal")
        return result
    result.changed = True
    diff = bounded_word_diff(original, cleaned, MAX_DIFF_CHANGES)
    for kind, text in diff.pieces:
        if kind == "equal":
            _append(result.original, text, "equal")
            _append(result.cleaned, text, "equal")
        elif kind == "removed":
            _append(result.original, text, "removed")
        else:
            _append(result.cleaned, text, "added")
    if diff.truncated:
        result.truncated = True
        result.original.append(DiffPiece(diff.original_rest, "equal"))
        result.cleaned.append(DiffPiece(diff.cleaned_rest, "equal"))
    return result


def safe_href(url: str | None) -> str:
    """The URL when it is an absolute http(s) URL with a host, else the empty string."""
    if not url:
        return ""
    url = url.strip()
    if any(ord(ch) < 0x21 for ch in url):
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return ""
    return url


_URL = re.compile(r"https?://[^\s<>\"'`\])]+", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TextPiece:
    text: str
    href: str = ""


def linkify(text: str) -> list[TextPiece]:
    """Plain text split into pieces; bare http(s) URLs become pieces with an href."""
    pieces: list[TextPiece] = []
    pos = 0
    for match in _URL.finditer(text):
        url = match.group(0).rstrip(".,;:!?")
        href = safe_href(url)
        if not href:
            continue
        if match.start() > pos:
            pieces.append(TextPiece(text[pos : match.start()]))
        pieces.append(TextPiece(url, href))
        pos = match.start() + len(url)
    if pos < len(text):
        pieces.append(TextPiece(text[pos:]))
    return pieces


def excerpt(text: str, length: int = 160) -> str:
    """One line: whitespace collapsed, cut at a word boundary."""
    line = " ".join(text.split())
    if len(line) <= length:
        return line
    cut = line[: length - 1].rsplit(" ", 1)[0] or line[: length - 1]
    return cut + "…"


def sorted_by_severity(items: Sequence, key: str = "severity") -> list:
    return sorted(items, key=lambda i: -SEVERITY_RANK.get(getattr(i, key, ""), 0))
