"""The inline stream auditor, and the batch audit built on it.

Text is cut into paragraphs at blank lines (never inside a fenced code block). The
segmentation works line by line, so however the text is chunked the same paragraphs are
audited: the concatenated stream output equals the batch `cleaned_response`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..config import AuditorConfig
from ..contract import Annotation, LinkRecord, Source
from ..limits import Limits
from ..privacy.redaction import redact_findings, shifted
from .caps import RecordCaps
from .context import PendingClaim
from .pipeline import audit_paragraph
from .settings import GuardrailSettings, SourceIndex, settings_from_config
from .syntax.text import INDENT_CLEAR, fence_state_after, indent_state_after


@dataclass(slots=True)
class AuditedParagraph:
    """A piece of audited output: a paragraph (with its trace lines) or blank lines."""

    text: str
    trace: list[str] = field(default_factory=list)


@dataclass
class GuardrailResult:
    cleaned_response: str
    annotations: list[tuple[str, Annotation]]
    links: list[LinkRecord]
    trace: list[str]
    claims: list[dict[str, Any]]
    pending: list[PendingClaim]  # offsets into cleaned_response
    # with limits: the records past them, counted not built (annotations, links and
    # trace hold only the first ones)
    caps: RecordCaps | None = None

    def for_analyzer(self, analyzer_id: str) -> list[Annotation]:
        return [a for owner, a in self.annotations if owner == analyzer_id]


def _is_blank(line: str) -> bool:
    """Only spaces and tabs (CommonMark's blank line; a form feed or NBSP line is not)."""
    return not line.strip(" \t\r\n")


def _fence_marker(line: str) -> str | None:
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3 or stripped[:3] not in ("```", "~~~"):
        return None
    ch = stripped[0]
    run = len(stripped) - len(stripped.lstrip(ch))
    if ch == "`" and "`" in stripped[run:]:
        return None
    return ch * run


def _closes(line: str, marker: str) -> bool:
    stripped = line.lstrip(" ")
    body = stripped.rstrip()
    return len(line) - len(stripped) <= 3 and body.startswith(marker) and not body.strip(marker[0])


class InlineStreamAuditor:
    """Feed chunks, get audited paragraphs as soon as each one is complete.

    ::

        auditor = InlineStreamAuditor.from_config(config, sources)
        for chunk in model_stream:
            for piece in auditor.feed(chunk):
                send(piece.text, piece.trace)
        for piece in auditor.finish():
            send(piece.text, piece.trace)
        result = auditor.result()
    """

    def __init__(
        self,
        settings: GuardrailSettings,
        sources: Iterable[Source] = (),
        limits: Limits | None = None,
    ) -> None:
        """`limits`: the audit's (see caps.RecordCaps); the trace lines, findings and
        links past them are counted, not built, and leave the pieces and `result()`."""
        self.settings = settings
        self._caps = RecordCaps(limits) if limits is not None else None
        self.sources = SourceIndex(settings, sources)
        self._partial: list[str] = []
        self._para: list[str] = []
        self._para_start = 0
        self._consumed = 0
        self._fence: str | None = None
        # what the cleaned paragraphs so far leave open (text.fence_state_after)
        self._open_fence: str | None = None
        self._indent_state = INDENT_CLEAR  # and around an indented code block (text.py)
        self._suppress_blank = False
        self._out: list[str] = []
        self._out_len = 0
        self._annotations: list[tuple[str, Annotation]] = []
        self._links: list[LinkRecord] = []
        self._trace: list[str] = []
        self._claims: list[dict[str, Any]] = []
        self._pending: list[PendingClaim] = []
        self._finished = False
        self._collect = True  # build the pieces `feed` and `finish` return

    @classmethod
    def from_config(
        cls, config: AuditorConfig, sources: Iterable[Source] = ()
    ) -> InlineStreamAuditor:
        """Bounded by the configuration's limits."""
        return cls(settings_from_config(config), sources, config.limits)

    @property
    def open_fence(self) -> str | None:
        """The marker of the fenced code block the text fed so far leaves open, if any."""
        return self._fence

    def add_source(self, source: Source | dict[str, Any]) -> None:
        """A tool result arrived: it grounds the paragraphs that follow."""
        self.sources.add(source if isinstance(source, Source) else Source.model_validate(source))

    def feed(self, chunk: str) -> list[AuditedParagraph]:
        if self._finished:
            raise RuntimeError("feed() after finish()")
        out: list[AuditedParagraph] = []
        start = 0
        find = chunk.find
        line = self._line
        while True:
            nl = find("\n", start)
            if nl < 0:
                if start < len(chunk):
                    self._partial.append(chunk[start:])
                break
            piece = chunk[start : nl + 1]
            if self._partial:
                self._partial.append(piece)
                piece = "".join(self._partial)
                self._partial = []
            line(piece, out)
            start = nl + 1
        return out

    def finish(self) -> list[AuditedParagraph]:
        if self._finished:
            return []
        self._finished = True
        out: list[AuditedParagraph] = []
        if self._partial:
            line = "".join(self._partial)
            self._partial = []
            if self._fence is None and _is_blank(line) and not self._para:
                self._emit_blank(line, out)
            elif self._fence is None and _is_blank(line):
                self._flush(out)
                self._emit_blank(line, out)
            else:
                self._add_to_para(line)
        self._flush(out)
        return out

    def result(self) -> GuardrailResult:
        return GuardrailResult(
            cleaned_response="".join(self._out),
            annotations=list(self._annotations),
            links=list(self._links),
            trace=list(self._trace),
            claims=list(self._claims),
            pending=list(self._pending),
            caps=self._caps,
        )

    # line-level state machine

    def _add_to_para(self, line: str) -> None:
        if not self._para:
            self._para_start = self._consumed
            self._suppress_blank = False
        self._para.append(line)
        self._consumed += len(line)

    def _line(self, line: str, out: list[AuditedParagraph]) -> None:
        """One whole line, "\n" included."""
        if self._fence is not None:
            self._add_to_para(line)
            if _closes(line, self._fence):
                self._fence = None
            return
        if not line.strip(" \t\r\n"):  # blank, as `_is_blank` (the line is never empty)
            self._flush(out)
            self._emit_blank(line, out)
            return
        if line[0] in " `~":  # where a fence can start
            self._fence = _fence_marker(line)
        if not self._para:
            self._para_start = self._consumed
            self._suppress_blank = False
        self._para.append(line)
        self._consumed += len(line)

    def _emit_blank(self, line: str, out: list[AuditedParagraph]) -> None:
        self._consumed += len(line)
        if self._suppress_blank:
            return
        self._write(line)
        if self._collect:
            out.append(AuditedParagraph(line))

    def _write(self, text: str) -> None:
        self._out.append(text)
        self._out_len += len(text)

    def _flush(self, out: list[AuditedParagraph]) -> None:
        if not self._para:
            return
        text = "".join(self._para)
        self._para = []
        newline = text.endswith("\n")
        body = text[:-1] if newline else text
        result = audit_paragraph(
            body,
            self._para_start,
            self.settings,
            self.sources,
            self._caps,
            self._open_fence,
            self._indent_state == INDENT_CLEAR,
        )
        cleaned = result.text
        if self.settings.redact and cleaned:
            cleaned = self._redact(cleaned, result.pending)
        self._indent_state = indent_state_after(cleaned, self._indent_state, self._open_fence)
        if self._open_fence is not None or "```" in cleaned or "~~~" in cleaned:
            self._open_fence = fence_state_after(cleaned, self._open_fence)
        if cleaned and not cleaned.isspace():
            emitted = cleaned + "\n" if newline else cleaned
        else:
            emitted = ""
            self._suppress_blank = True
        if result.pending:
            offset = self._out_len
            for pending in result.pending:
                pending.start += offset
                pending.end += offset
                self._pending.append(pending)
        self._out.append(emitted)
        self._out_len += len(emitted)
        self._annotations.extend(result.annotations)
        self._links.extend(result.links)
        self._trace.extend(result.trace)
        self._claims.extend(result.claims)
        if self._collect:
            out.append(AuditedParagraph(emitted, result.trace))

    def _redact(self, cleaned: str, pending: list[PendingClaim]) -> str:
        """The cleaned paragraph with its personal data and secrets replaced (the
        configuration's `privacy`), its pending claims' offsets moved to match."""
        redacted, findings = redact_findings(
            cleaned, self.settings.redact, self.settings.redact_region
        )
        for claim in pending if findings else ():
            claim.start = shifted(claim.start, cleaned, findings)
            claim.end = shifted(claim.end, cleaned, findings)
        return redacted


class BoundedStream:
    """Text in as it arrives, audited paragraphs out, holding at most one paragraph plus
    `max_chars` unaudited when `max_chars` is set: an over-long paragraph is ended with a
    blank line of its own (`cut`), which is then part of the text received, so the pieces
    a client joins are exactly the audited text and no link, image or tag spans a cut.

    `received` is the text as audited (what arrived, with the cuts); `text()` joins it.
    """

    def __init__(self, auditor: InlineStreamAuditor, max_chars: int | None = None) -> None:
        self.auditor = auditor
        self.max_chars = max_chars
        self.received: list[str] = []  # complete lines (and cuts) fed to the auditor
        self.fed_chars = 0
        self.audited_chars = 0  # of `received`, in paragraphs already audited
        self.cuts = 0
        self._partial: list[str] = []  # the unfinished last line, in pieces
        self._partial_len = 0

    @property
    def partial(self) -> str:
        return "".join(self._partial)

    @property
    def pending(self) -> bool:
        """True while text has arrived whose paragraph is not audited yet."""
        return self._partial_len > 0 or self.fed_chars > self.audited_chars

    def text(self) -> str:
        return "".join(self.received)

    def feed(self, text: str) -> list[AuditedParagraph]:
        out: list[AuditedParagraph] = []
        if "\n" in text:
            self._partial.append(text)
            lines = "".join(self._partial).split("\n")
            last = lines.pop()
            self._partial, self._partial_len = ([last], len(last)) if last else ([], 0)
            for line in lines:
                self._line(line + "\n", out)
        elif text:
            self._partial.append(text)
            self._partial_len += len(text)
        limit = self.max_chars
        while limit and self.fed_chars - self.audited_chars + self._partial_len > limit:
            out += self._cut(last_line_done=False)  # each cut takes text from the partial
            self.audited_chars = self.fed_chars
        return out

    def finish(self) -> list[AuditedParagraph]:
        """The text is over: the last paragraph audited."""
        out: list[AuditedParagraph] = []
        if self._partial_len:
            last = self.partial
            self._partial, self._partial_len = [], 0
            self.received.append(last)
            self.fed_chars += len(last)
            out += self.auditor.feed(last)
        out += self.auditor.finish()
        self.audited_chars = self.fed_chars
        return out

    def _line(self, line: str, out: list[AuditedParagraph]) -> None:
        self.received.append(line)
        self.fed_chars += len(line)
        got = self.auditor.feed(line)
        limit = self.max_chars
        if not got and limit and self.fed_chars - self.audited_chars > limit:
            got = self._cut(last_line_done=True)
        if got:
            # the auditor returns output only at a paragraph's end: all fed is audited
            self.audited_chars = self.fed_chars
            out += got

    def _cut(self, *, last_line_done: bool) -> list[AuditedParagraph]:
        """End the held paragraph with a blank line. An unfinished line is cut at its last
        blank (words and URLs stay whole) or, without one, at `max_chars`; an open fenced
        code block is closed before the blank line and opened again after it."""
        text = ""
        if not last_line_done and self._partial_len:
            partial = self.partial
            blank = max(partial.rfind(" "), partial.rfind("\t"))
            cut = blank + 1 if blank > 0 else min(len(partial), self.max_chars or len(partial))
            text, rest = partial[:cut] + "\n", partial[cut:]
            self._partial, self._partial_len = ([rest], len(rest)) if rest else ([], 0)
        fence = self.auditor.open_fence
        text += f"{fence}\n\n{fence}\n" if fence else "\n"
        self.received.append(text)
        self.fed_chars += len(text)
        self.cuts += 1
        return self.auditor.feed(text)


def audit_text(
    response: str,
    settings: GuardrailSettings,
    sources: Iterable[Source] = (),
    limits: Limits | None = None,
) -> GuardrailResult:
    """The batch audit: the stream auditor fed the whole response at once. `limits`: the
    records past them are counted, not built (`result.caps`)."""
    auditor = InlineStreamAuditor(settings, sources, limits)
    auditor._collect = False  # only the result is wanted
    auditor.feed(response)
    auditor.finish()
    return auditor.result()
