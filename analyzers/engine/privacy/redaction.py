"""Redaction of text that is passed on or stored: each finding becomes its placeholder.

`redact_text` is the one redaction of the configuration's `privacy` section: the guardrails
apply it to each cleaned paragraph (so a streamed chunk is redacted before it leaves and
the stream still joins to the batch's cleaned text), intake to what it stores. A
placeholder followed by `(`, `[` or `:` gets its closing bracket escaped, so that it never
forms a Markdown link, image or definition with the text after it (`[EMAIL](javascript:…)`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .detect import PLACEHOLDERS, Finding, detect

_TYPE_OF = {mark[1:-1]: type_ for type_, mark in PLACEHOLDERS.items()}
_PLACEHOLDER = re.compile(r"\[(" + "|".join(_TYPE_OF) + r")\\?\]")

# What may follow `]` to make a link, a reference or a definition of the brackets before.
_LINK_FOLLOWERS = frozenset("([:")


def redact_findings(
    text: str, types: Iterable[str], region: str = "US"
) -> tuple[str, list[Finding]]:
    """`text` with every finding of `types` replaced by its placeholder, and the findings
    (offsets in `text`)."""
    if not text:
        return text, []
    findings, _ = detect(text, types, region=region)
    if not findings:
        return text, findings
    parts = []
    pos = 0
    for finding in findings:
        parts.append(text[pos : finding.start])
        parts.append(placeholder(finding.type, text[finding.end : finding.end + 1]))
        pos = finding.end
    parts.append(text[pos:])
    return "".join(parts), findings


def redact_text(text: str, types: Iterable[str], region: str = "US") -> str:
    """`text` with every finding of `types` replaced by its placeholder."""
    return redact_findings(text, types, region)[0]


def placeholder(type_: str, following: str) -> str:
    """The placeholder of `type_`, inert before `following` (the next character)."""
    mark = PLACEHOLDERS[type_]
    return mark[:-1] + "\\]" if following in _LINK_FOLLOWERS else mark


def shifted(position: int, text: str, findings: list[Finding]) -> int:
    """Where `position` of `text` is once `findings` are redacted (a position inside a
    finding moves to its placeholder's end)."""
    delta = 0
    for finding in findings:
        if finding.start >= position:
            break
        mark = placeholder(finding.type, text[finding.end : finding.end + 1])
        if position < finding.end:
            return finding.start + delta + len(mark)
        delta += len(mark) - (finding.end - finding.start)
    return position + delta


def placeholder_findings(text: str, types: Iterable[str]) -> list[Finding]:
    """The placeholders of `types` in `text` as findings (kind "redacted"): what was
    found in a text before it was stored redacted."""
    wanted = set(types)
    return [
        Finding(type_, m.start(), m.end(), m.group(), "redacted")
        for m in _PLACEHOLDER.finditer(text)
        if (type_ := _TYPE_OF[m.group(1)]) in wanted
    ]
