"""The state of one paragraph while the guardrail rules run, shared by the pipeline and
every rule (they import this module; it imports none of them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..contract import Annotation, LinkRecord
from .caps import RecordCaps
from .records import annotation as make_annotation
from .records import link_record
from .settings import GuardrailSettings, SourceIndex
from .syntax.markdown import MdLink, scan_links
from .syntax.text import (
    UNKNOWN_FENCE,
    Doc,
    SpanSet,
    fenced_spans,
    indented_code_end,
    merge_spans,
    one_line,
    unbroken_code_spans,
)

PARAGRAPH_IN = "[AUDIT] ══ paragraph in ══"
PARAGRAPH_OUT = "[AUDIT] ══ paragraph out ══"

LABELS = {
    "PROMPT_LEAK": "Prompt instructions leaked",
    "HTML_ANCHOR_CONVERTED": "HTML anchor converted to markdown",
    "LINK_UNSAFE_SCHEME": "Unsafe link scheme",
    "LINK_HOST_NOT_ALLOWED": "Link to a host that is not allowed",
    "LINK_TECH_DOC_NOT_ALLOWED": "Technical documentation link not allowed",
    "LINK_LABEL_UPGRADED": "Generic link label replaced by the source title",
    "LINK_LABEL_SUFFIX_NORMALIZED": "Repeated title suffix collapsed",
    "DANGLING_ATTRIBUTION": "Dangling attribution removed",
    "LINK_UNHEALTHY": "Link is not healthy",
    "UNGROUNDED_CUSTOMER_CLAIM": "Ungrounded customer claim removed",
    "HTML_UNSAFE_MARKUP": "Raw HTML removed or sanitised",
}


@dataclass
class PendingClaim:
    """A valid claim whose case-study link still has to pass the health check."""

    start: int  # offsets in the paragraph's cleaned text
    end: int
    url: str
    claim: dict[str, Any]


@dataclass(slots=True)
class ParagraphResult:
    text: str
    annotations: list[tuple[str, Annotation]] = field(default_factory=list)
    links: list[LinkRecord] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    pending: list[PendingClaim] = field(default_factory=list)


def may_hold_link(text: str) -> bool:
    """False when `scan_links` finds nothing in `text`: an inline link or image needs
    "](", a definition "]:", an autolink "<" and then a ":" (scheme) or an "@" (e-mail).
    (Allowed inline tags such as `<b>` alone make no link.)"""
    return "](" in text or "]:" in text or ("<" in text and (":" in text or "@" in text))


class Ctx:
    """The state of one paragraph while the rules run."""

    __slots__ = (
        "original",
        "base",
        "settings",
        "sources",
        "doc",
        "out",
        "_code",
        "_links",
        "closing_memo",
        "bare_memo",
        "settled",
        "bare_edits",
        "caps",
        "trace_room",
        "trace_cut",
        "open_fence",
        "indented_code",
    )

    def __init__(
        self,
        text: str,
        base: int,
        settings: GuardrailSettings,
        sources: SourceIndex,
        caps: RecordCaps | None = None,
        open_fence: str | None = None,
        indented_code: bool = False,
    ) -> None:
        self.original = text
        # what the paragraphs before left open (text.fence_state_after): the text starts
        # inside that fence, or, when UNKNOWN_FENCE, no code in it is trusted as inert
        self.open_fence = open_fence
        # whether an indented code block may open the text (text.INDENT_CLEAR before it)
        self.indented_code = indented_code and open_fence is None
        self.base = base
        self.settings = settings
        self.sources = sources
        # a renderer reads NUL as U+FFFD (CommonMark): one character for one, so the
        # offsets still map onto the original
        self.doc = Doc(text.replace("\x00", "\ufffd") if "\x00" in text else text, base)
        self.out = ParagraphResult(text, [], [], [PARAGRAPH_IN], [], [])  # (no factories)
        self._code: tuple[str, SpanSet, list[tuple[int, int]]] | None = None
        self._links: tuple[str, list[MdLink]] | None = None
        self.closing_memo: dict = {}  # see markup._find_closing
        self.bare_memo: dict = {}  # see autolinks.find_bare_urls
        # rule -> the text it last left unchanged (the same text needs no second look)
        self.settled: dict[str, str] = {}
        # (text, [(start, end)]) where the last bare-URL removals left plain text: see
        # links.audit_bare_urls
        self.bare_edits: tuple[str, list[tuple[int, int]]] | None = None
        # records past the audit's limits are counted, not built (see caps): rules may
        # skip a trace line once `out.trace` holds `trace_room` lines, adding 1 to
        # `trace_cut`; lines appended past the room are trimmed when the paragraph ends
        self.caps = caps
        self.trace_room = caps.trace_room() if caps is not None else _UNBOUNDED
        self.trace_cut = 0

    def code(self) -> tuple[SpanSet, list[tuple[int, int]]]:
        """Code regions (code blocks and code spans) and code blocks (fenced, or the
        indented block the text opens with) of the current text, cached."""
        text = self.doc.text
        if self._code is None or self._code[0] is not text:
            open_fence = self.open_fence
            opens_indented = self.indented_code and text[:1] in (" ", "\t")
            indented = indented_code_end(text) if opens_indented else 0
            if open_fence == UNKNOWN_FENCE or (
                "`" not in text and "~~~" not in text and not open_fence and not indented
            ):  # no code trusted, or no code block and no code span
                self._code = (text, _NO_CODE, [])
            else:
                fences = fenced_spans(text, open_fence)
                if indented:  # no fence starts in it (a fence is indented 3 columns at most)
                    fences = merge_spans([(0, indented)], fences)
                spans = merge_spans(fences, unbroken_code_spans(text, fences))
                self._code = (text, SpanSet(spans), fences)
        return self._code[1], self._code[2]

    def links(self) -> list[MdLink]:
        """The markdown links of the current text, cached: several rules read them.

        Callers must not change the list or its links.
        """
        text = self.doc.text
        if self._links is None or self._links[0] is not text:
            if may_hold_link(text):
                code, _ = self.code()
                self._links = (text, scan_links(text, code))
            else:  # no inline link, autolink or definition can be there
                self._links = (text, [])
        return self._links[1]

    def annotate(
        self,
        analyzer_id: str,
        code: str,
        severity: str,
        description: str,
        start: int,
        end: int,
    ) -> Annotation | None:
        """Record a finding; None when the audit's limits leave it out (counted only)."""
        caps = self.caps
        if caps is not None and not caps.finding(analyzer_id, code, severity):
            return None
        doc = self.doc
        pieces = doc.pieces
        if len(pieces) == 1 and pieces[0][4]:  # unedited: `orig_span` is a plain shift
            s = pieces[0][2] + start
            e = s + (end - start if end > start else 0)
        else:
            s, e = doc.orig_span(start, end)
        base = self.base
        annotation = make_annotation(
            code,
            LABELS.get(code, code),
            severity,
            description,
            self.original[s - base : e - base],
            s,
            e,
        )
        self.out.annotations.append((analyzer_id, annotation))
        return annotation

    def link(self, url: str, label: str, decision: str, reason: str | None = None) -> None:
        """Record a link; past the audit's limits it is counted only."""
        if self.caps is None or self.caps.link(url, decision):
            self.out.links.append(link_record(url, label, decision, reason))

    def has_trace_room(self) -> bool:
        """Whether a trace line added now is kept; if not, the caller counts it in
        `trace_cut` instead of building it."""
        return len(self.out.trace) < self.trace_room

    def trace(self, *parts: str) -> None:
        self.out.trace.append("[AUDIT] " + " | ".join([one_line(p) for p in parts]))


_UNBOUNDED = 1 << 62
_NO_CODE = SpanSet([])  # read only, like every SpanSet
