"""Text being edited by the rules, with a map back to offsets in the original response."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable

Edit = tuple[int, int, str]  # replace text[start:end] with the string


class Doc:
    """A paragraph under edit.

    `pieces` cover the current text contiguously: `(cur_start, cur_end, orig_start,
    orig_end, copied)`. Copied pieces map character by character; inserted text maps
    to the whole span of original text it replaced.
    """

    __slots__ = ("text", "pieces", "_starts")

    def __init__(self, text: str, base: int = 0) -> None:
        self.text = text
        self.pieces: list[tuple[int, int, int, int, bool]] = [
            (0, len(text), base, base + len(text), True)
        ]
        self._starts = [0]

    def orig_start(self, pos: int) -> int:
        i = max(0, bisect_right(self._starts, pos) - 1)
        cs, ce, os_, oe, copied = self.pieces[i]
        if pos >= ce:
            return oe
        return os_ + (pos - cs) if copied else os_

    def orig_end(self, pos: int) -> int:
        i = max(0, bisect_right(self._starts, pos - 1) - 1) if pos > 0 else 0
        cs, ce, os_, oe, copied = self.pieces[i]
        if pos <= cs:
            return os_
        return os_ + (pos - cs) if copied else oe

    def orig_span(self, start: int, end: int) -> tuple[int, int]:
        if len(self.pieces) == 1 and self.pieces[0][4]:  # unedited: a plain shift
            base = self.pieces[0][2]
            return base + start, base + (end if end > start else start)
        s = self.orig_start(start)
        e = self.orig_end(end) if end > start else s
        return s, max(s, e)

    def apply(self, edits: Iterable[Edit]) -> list[int]:
        """Apply sorted, non-overlapping edits; return each edit's start in the new text."""
        edits = list(edits)
        if not edits:
            return []
        pieces = self.pieces
        if len(pieces) == 1 and pieces[0][4]:
            return self._apply_unedited(edits)
        text = self.text
        n = len(text)
        out: list[str] = []
        new_pieces: list[tuple[int, int, int, int, bool]] = []
        positions = []
        cursor = 0
        length = 0
        i, n_pieces = 0, len(pieces)  # the last piece starting at or before `cursor`
        for start, end, replacement in [*edits, (n, n, None)]:
            if start > cursor:  # copy text[cursor:start] and the pieces over it
                out.append(text[cursor:start])
                while i + 1 < n_pieces and pieces[i + 1][0] <= cursor:
                    i += 1
                j = i
                while j < n_pieces:
                    cs, ce, os_, oe, copied = pieces[j]
                    if cs >= start:
                        break  # the pieces are in order: none further overlaps
                    lo = cursor if cursor > cs else cs
                    hi = start if start < ce else ce
                    if hi > lo:
                        if copied:
                            new_pieces.append(
                                (length, length + hi - lo, os_ + lo - cs, os_ + hi - cs, True)
                            )
                        else:
                            new_pieces.append((length, length + hi - lo, os_, oe, False))
                        length += hi - lo
                    j += 1
            if replacement is None:
                break  # the end
            positions.append(length)
            if replacement:
                os_, oe = self.orig_span(start, end)
                out.append(replacement)
                new_pieces.append((length, length + len(replacement), os_, oe, False))
                length += len(replacement)
            if end > cursor:
                cursor = end
        if not new_pieces:
            base = self.orig_start(n) if text else pieces[0][2]
            new_pieces = [(0, 0, base, base, True)]
        self.text = "".join(out)
        self.pieces = new_pieces
        self._starts = [p[0] for p in new_pieces]
        return positions

    def _apply_unedited(self, edits: list[Edit]) -> list[int]:
        """`apply` on text still mapping one to one onto the original: the same pieces,
        computed without searching."""
        text = self.text
        n = len(text)
        o = self.pieces[0][2]
        out: list[str] = []
        pieces: list[tuple[int, int, int, int, bool]] = []
        positions: list[int] = []
        cursor = 0
        length = 0
        out_append, piece_append, position_append = out.append, pieces.append, positions.append
        for start, end, replacement in edits:
            if start > cursor:
                out_append(text[cursor:start])
                new_length = length + start - cursor
                piece_append((length, new_length, o + cursor, o + start, True))
                length = new_length
            position_append(length)
            if replacement:
                out_append(replacement)
                new_length = length + len(replacement)
                piece_append(
                    (length, new_length, o + start, o + (end if end > start else start), False)
                )
                length = new_length
            if end > cursor:
                cursor = end
        if n > cursor:
            out.append(text[cursor:])
            pieces.append((length, length + n - cursor, o + cursor, o + n, True))
        self.text = "".join(out)
        if not pieces:
            pieces = [(0, 0, o + n, o + n, True)]
        self.pieces = pieces
        self._starts = [p[0] for p in pieces]
        return positions


class BlankRuns:
    """Where the run of spaces and tabs around a position starts or ends.

    Remembers its last answer, so positions asked in increasing order cost linear time
    in all, even when many of them sit in one long run of spaces.
    """

    __slots__ = ("text", "_start", "_end")

    def __init__(self, text: str) -> None:
        self.text = text
        self._start = (-1, -1)  # (pos, run start) of the last question
        self._end = (-1, -1)  # (pos, run end) of the last question

    def start(self, pos: int) -> int:
        """The smallest i <= pos such that text[i:pos] is only spaces and tabs."""
        text = self.text
        asked, answer = self._start
        if 0 <= asked <= pos and not text[asked:pos].strip(" \t"):
            i = answer
        else:
            i = pos
            while i > 0 and text[i - 1] in " \t":
                i -= 1
        self._start = (pos, i)
        return i

    def end(self, pos: int) -> int:
        """The largest j >= pos such that text[pos:j] is only spaces and tabs."""
        text = self.text
        asked, answer = self._end
        if 0 <= asked <= pos <= answer:
            j = answer
        else:
            j, n = pos, len(text)
            while j < n and text[j] in " \t":
                j += 1
        self._end = (pos, j)
        return j


# a line that may start a list item (an item's content is indented to its content column)
_LIST_ITEM = re.compile(r"[ ]{0,3}(?:[-+*]|\d{1,9}[.)])(?=[ \t\r\n]|\Z)")
# a fence the scan below cannot place: after a list marker on its own line ("- ```"), or
# indented by a tab or 4+ columns after a line that may start a list item (then it may be
# in the item). (A fence after ">" closes with its quote, at the latest at the blank line
# that ends the paragraph, and a fence line without ">" ends the quote: those are placed.)
_MARKER_FENCE = re.compile(r"[ ]{0,3}(?:(?:[-+*]|\d{1,9}[.)])[ \t]+)+(?:`{3,}(?![^`\r\n]*`)|~{3,})")
_INDENTED_FENCE = re.compile(r"[ \t]*(?:`{3,}(?![^`\r\n]*`)|~{3,})")
# a line that may start an HTML block (in a quote or list item too)
_HTML_LINE = re.compile(r"(?:[ \t]*(?:>|(?:[-+*]|\d{1,9}[.)])(?=[ \t])))*[ \t]*<")
# a line that may be a fence, in any container
_FENCE_LINE = re.compile(r"(?:[ \t]*(?:>|(?:[-+*]|\d{1,9}[.)])(?=[ \t])))*[ \t]*(?:```|~~~)")
_LINE_END = re.compile(r"\r\n?|\n")  # CommonMark line endings: LF, CR LF and a lone CR
# the first line of a paragraph that starts outside fences: a list item opening a fence
# ("1. ```bash"), its content column that of the fence (1-4 spaces after each marker)
_ITEM_FENCE = re.compile(r"[ ]{0,3}(?:(?:[-+*]|\d{1,9}[.)])[ ]{1,4})+(`{3,}(?![^`\r\n]*`)|~{3,})")

# What a paragraph leaves open for the next one (the renderer does not stop at blank lines
# inside a fence or a list item): nothing, the marker of a top-level fence certainly open,
# or UNKNOWN_FENCE when some reading leaves a fence open (in a list item that may go on
# past the blank line, or placed differently by different readings). After UNKNOWN_FENCE
# no code is trusted as inert for the rest of the response.
UNKNOWN_FENCE = "?"


def fenced_spans(text: str, open_fence: str | None = None) -> list[tuple[int, int]]:
    """Spans of fenced code blocks (``` or ~~~), an unclosed fence running to the end.

    `open_fence`: the marker of a top-level fence the text starts inside (left open by
    the paragraphs before it); the text is then code up to the line that closes it.

    An indented fence after a line that may start a list item may be inside that item,
    and then ends where the item ends: at the first later line indented less than the
    fence. It is trusted as code only up to there, and no fence after it at all (whether
    that line closes it or opens another depends on a reading the text alone does not
    settle). The same after a fence that may be in a list item but that this scan does
    not place (`- ````, a tab-indented fence in an item): no later fence is trusted."""
    return _scan_fences(text, open_fence)[0]


def fence_state_after(text: str, open_fence: str | None) -> str | None:
    """What `text` (a cleaned paragraph, starting in `open_fence`) leaves open for the
    next paragraph: None, a top-level fence's marker, or UNKNOWN_FENCE (see above)."""
    if open_fence == UNKNOWN_FENCE:
        return UNKNOWN_FENCE
    if "```" not in text and "~~~" not in text:
        return open_fence  # an open fence stays open; nothing opens one
    return _scan_fences(text, open_fence)[1]


# What the paragraphs before leave open around an indented code block. A paragraph that
# opens with a line indented 4 columns (after a blank line, outside a fence) is code only
# at the top level: inside a list item, quote or plugin block (footnote, admonition,
# definition) it is that block's content, and inside a raw HTML block that blank lines do
# not end (`<pre>`, `<!--`, ...) it is raw HTML. A line of the text that may open one of
# those (its first character neither a letter nor `#`, backtick or tilde) leaves
# INDENT_CONTAINER, which a paragraph opening with a letter at column 0 ends (it closes
# every such block), or INDENT_HTML (a line opening with `<`), kept for the whole response.
INDENT_CLEAR = 0
INDENT_CONTAINER = 1
INDENT_HTML = 2
_MAY_OPEN_BLOCK = re.compile(r"^ {0,3}(?=[^ \t\n])(?![^\W\d_]|[#`~])(.)", re.MULTILINE)


def indent_state_after(text: str, state: int, open_fence: str | None) -> int:
    """What `text` (a cleaned paragraph, after `state`, starting in `open_fence`) leaves
    for the next paragraph. Lines in the fences it trusts as code open nothing."""
    if state == INDENT_HTML or not text:
        return state
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text[0].isalpha() and open_fence is None:
        state = INDENT_CLEAR  # at column 0 after a blank line: every open block ended
        if "\n" not in text:
            return state  # no other line
    elif state == INDENT_CONTAINER and "<" not in text:
        return state  # nothing can change it
    fences: list[tuple[int, int]] = []
    if open_fence != UNKNOWN_FENCE and (open_fence or "```" in text or "~~~" in text):
        fences = fenced_spans(text, open_fence)
    for m in _MAY_OPEN_BLOCK.finditer(text):
        at = m.start()
        if any(s <= at < e for s, e in fences):
            continue
        if m.group(1) == "<":
            return INDENT_HTML
        state = INDENT_CONTAINER
    return state


def indented_code_end(text: str) -> int:
    """Where the indented code block that `text` opens with ends (0: it opens with none);
    only a paragraph after INDENT_CLEAR and outside a fence opens one."""
    n = len(text)
    pos = end = 0
    while pos < n:
        line_end = _LINE_END.search(text, pos)
        stop = line_end.start() if line_end else n
        col, first = _columns(text, pos, stop)
        if first < stop:  # not blank
            if col < 4:
                break
            end = stop
        pos = line_end.end() if line_end else n
    return end


def _columns(text: str, pos: int, end: int) -> tuple[int, int]:
    """(indentation in columns, tabs to the next multiple of 4; where it ends)."""
    col = 0
    while pos < end:
        c = text[pos]
        if c == " ":
            col += 1
        elif c == "\t":
            col += 4 - col % 4
        else:
            break
        pos += 1
    return col, pos


def _item_fence_end(text: str, fence_at: int, marker: str) -> int:
    """Where scanning resumes after the fence a list item opens on its first line (its
    content column is the fence's): the line after its closing line, or the first line
    indented less than the fence (the item, and the fence, end there); -1 when the text
    ends first."""
    n = len(text)
    column = fence_at  # the first line has no tab before the fence (spaces only)
    m = _LINE_END.search(text, fence_at)
    pos = n if m is None else m.end()
    while pos < n:
        m = _LINE_END.search(text, pos)
        line_end = n if m is None else m.end()
        col, first = _columns(text, pos, line_end)
        body = text[first:line_end].rstrip()
        if body:
            if col < column:
                return pos
            if col <= column + 3 and body.startswith(marker) and not body.strip(marker[0]):
                return line_end
        pos = line_end
    return -1


def _scan_fences(text: str, open_fence: str | None) -> tuple[list[tuple[int, int]], str | None]:
    """The trusted fences and the state left at the end (see `fence_state_after`)."""
    spans: list[tuple[int, int]] = []
    n = len(text)
    if "```" not in text and "~~~" not in text:
        if open_fence:
            spans.append((0, n))
        return spans, open_fence
    pos = 0
    open_at = 0 if open_fence else -1
    marker = open_fence or ""
    in_item = False  # a line that may start a list item came before, outside fences
    item_indent = 0  # the indent of the open fence when it may be inside a list item
    if not open_fence:
        item = _ITEM_FENCE.match(text)
        if item is not None:  # a list item's fence (not trusted), ending where it surely ends
            pos = _item_fence_end(text, item.start(1), item.group(1))
            if pos < 0:
                return spans, UNKNOWN_FENCE  # it may go on past the blank line, or may not
            in_item = True
    html = False  # a line that may start an HTML block came, and no blank line since
    while pos < n:
        nl = _LINE_END.search(text, pos)
        line_end = n if nl is None else nl.end()
        stripped = text[pos:line_end].lstrip(" ")
        indent = line_end - pos - len(stripped)
        if open_at < 0:
            if html or _HTML_LINE.match(text, pos) is not None:
                # an HTML block (kinds 6 and 7) runs to a blank line: a fence line in it
                # is no fence, or is one (not an HTML block): trust no fence from there
                if not stripped.strip(" \t\r\n"):
                    html = False
                elif _FENCE_LINE.match(text, pos) is not None:
                    return spans, UNKNOWN_FENCE
                else:
                    html = True
            if indent <= 3 and stripped[:3] in ("```", "~~~"):
                ch = stripped[0]
                run = len(stripped) - len(stripped.lstrip(ch))
                if ch == "~" or "`" not in stripped[run:]:
                    open_at, marker = pos, ch * run
                    item_indent = indent if in_item else 0
            elif _MARKER_FENCE.match(text, pos) is not None or (
                in_item
                and (indent > 3 or stripped[:1] == "\t")
                and _INDENTED_FENCE.match(text, pos) is not None
            ):
                return spans, UNKNOWN_FENCE  # a fence this scan cannot place
            elif not in_item and _LIST_ITEM.match(text, pos) is not None:
                in_item = True
        else:
            body = stripped.rstrip()
            if item_indent and body and indent < item_indent:
                spans.append((open_at, pos))  # the list item may end here, and the fence
                return spans, UNKNOWN_FENCE
            if indent <= 3 and body.startswith(marker) and not body.strip(marker[0]):
                spans.append((open_at, line_end))
                open_at = -1
        pos = line_end
    if open_at >= 0:
        spans.append((open_at, n))
        return spans, UNKNOWN_FENCE if item_indent else marker
    return spans, None


def code_span_spans(text: str, fences: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inline code spans (backtick runs closed by a run of the same length), outside fences."""
    if "`" not in text:
        return []
    runs: list[tuple[int, int]] = []
    i = text.find("`")
    n = len(text)
    fence_i = 0
    while 0 <= i < n:
        while fence_i < len(fences) and fences[fence_i][1] <= i:
            fence_i += 1
        if fence_i < len(fences) and fences[fence_i][0] <= i:
            i = text.find("`", fences[fence_i][1])
            continue
        j = i
        while j < n and text[j] == "`":
            j += 1
        runs.append((i, j - i))
        i = text.find("`", j)
    by_len: dict[int, list[int]] = {}
    for idx, (_, length) in enumerate(runs):
        by_len.setdefault(length, []).append(idx)
    pointers: dict[int, int] = {}
    spans: list[tuple[int, int]] = []
    k = 0
    while k < len(runs):
        start, length = runs[k]
        backslashes = 0
        b = start - 1
        while b >= 0 and text[b] == "\\":
            backslashes += 1
            b -= 1
        open_start, open_len = start, length
        if backslashes % 2:  # an escaped backtick is literal; the rest of the run may open
            open_start, open_len = start + 1, length - 1
        if open_len == 0:
            k += 1
            continue
        candidates = by_len.get(open_len, [])
        p = pointers.get(open_len, 0)
        while p < len(candidates) and candidates[p] <= k:
            p += 1
        pointers[open_len] = p
        if p >= len(candidates):
            k += 1
            continue
        close = candidates[p]
        close_start, close_len = runs[close]
        spans.append((open_start, close_start + close_len))
        k = close + 1
    return spans


# a line start where a renderer may begin a new block, ending the paragraph (and any code
# span still open): list items, headings, quotes, fences, HTML, thematic breaks, setext
# underlines, blank lines. (CommonMark line endings: LF, CR LF and a lone CR.)
_END = r"(?=[\r\n]|\Z)"
_BLOCK_START = re.compile(
    r"(?:\r\n|\r(?!\n)|\n)[ ]{0,3}(?:[-+*](?=[ \t\r\n]|\Z)|\d{1,9}[.)](?=[ \t\r\n]|\Z)"
    rf"|#{{1,6}}(?=[ \t\r\n]|\Z)|>|```|~~~|<|(?:[-*_][ \t]*){{3,}}{_END}|=+[ \t]*{_END}"
    rf"|[ \t]*{_END})"
)


_NOT_INDENTED = re.compile(r"(?<=\n)[ ]{0,3}[^ \t\r\n]")
_LINE_BREAK = re.compile(r"\r\n|\r(?!\n)|\n")
_BLANK_LINES = re.compile(r"(?:[ \t]*(?:\r\n|\r|\n))*")


def _match_end(pattern: re.Pattern[str], text: str) -> int:
    """Where `pattern`, which may match nothing, stops matching at the start of `text`."""
    m = pattern.match(text)
    return m.end() if m is not None else 0


# a backtick right after a run of text holding a scheme's ":" (`https://x.example/p.png``)
# (from the run's last ":", possessive: linear however many colons a run holds)
_LINKIFIED_BACKTICK = re.compile(r":[^\s`:]*+`")


def _before_linkified_backtick(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans before the first whose opening backticks a renderer's linkify may
    swallow: markdown-it links `https://x.example/p.png`` through the backtick, which then
    opens no code span, and every later backtick pairs differently. (Only scheme URLs:
    its linkify rule starts at the ":"; `www.` and e-mail links come after code spans are
    formed. Inside a code span nothing is linkified: closing backticks are safe.)"""
    if ":" not in text:
        return spans
    swallowed = {m.end() - 1 for m in _LINKIFIED_BACKTICK.finditer(text)}
    if not swallowed:
        return spans
    for i, (start, _) in enumerate(spans):
        if start in swallowed:
            return spans[:i]
    return spans


_PREFIX_CHARS = frozenset(" \t>-+*.)0123456789")


def _before_opener_starting_a_block(
    text: str, spans: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The spans before the first whose opening backticks start a line (after only
    indentation, ">" and list markers) where a renderer may read them as a fence (3 or
    more, no backtick after them on the line) or as indented code (a tab or 4 spaces
    before them): then they open no code span, and every later backtick pairs differently.
    (A fence at the start of a top-level line is a fence already, never in a span.)"""
    for k, (start, _) in enumerate(spans):
        i = start
        while i > 0 and text[i - 1] in _PREFIX_CHARS:
            i -= 1
        if i > 0 and text[i - 1] not in "\r\n":
            continue  # text before it on its line
        prefix = text[i:start]
        if "\t" in prefix or "    " in prefix:
            return spans[:k]
        run = start
        while run < len(text) and text[run] == "`":
            run += 1
        if run - start >= 3:
            m = _LINE_END.search(text, run)
            if "`" not in text[run : m.start() if m else len(text)]:
                return spans[:k]
    return spans


def unbroken_code_spans(text: str, fences: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The code spans a renderer forms however it reads the lines that may start a block.

    A line that may start a list item, heading, quote, HTML block, ... may end the
    paragraph (then no code span crosses it and the backticks after it pair afresh) or
    not (`<b>x</b>` does not start an HTML block). Only a span found both ways, pairing
    across every such line and pairing within the pieces between them, is trusted as code.
    """
    whole = code_span_spans(text, fences)
    if whole:
        whole = _before_linkified_backtick(text, whole)
        whole = _before_opener_starting_a_block(text, whole)
    if not whole or ("\n" not in text and "\r" not in text):
        return whole
    cuts = [m.start() + 1 for m in _BLOCK_START.finditer(text)]
    # After a line that may start a list item, any later line may end the item (a line
    # indented less than its content ends it, unless the item's last block is a paragraph
    # the line continues): no code span is trusted across one.
    item = next((c for c in (0, *cuts) if _LIST_ITEM.match(text, c) is not None), None)
    if item is not None:
        cuts.extend(m.start() + 1 for m in _LINE_BREAK.finditer(text, item))
        cuts = sorted(set(cuts))
    # an indented code block, after any blank lines a removal left at the start
    lead = _match_end(_BLANK_LINES, text)
    if text.startswith(("    ", "\t", " \t", "  \t", "   \t"), lead):
        first = _NOT_INDENTED.search(text, lead)
        if first is not None:
            cuts = sorted({*cuts, first.start()})
    if not cuts:
        return whole
    pieces: list[tuple[int, int]] = []
    bounds = [0, *cuts, len(text)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b <= a or "`" not in text[a:b]:
            continue
        local = [(max(fs, a) - a, min(fe, b) - a) for fs, fe in fences if fs < b and fe > a]
        pieces.extend((s + a, e + a) for s, e in code_span_spans(text[a:b], local))
    return sorted(set(whole) & set(pieces))


def merge_spans(*groups: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans = sorted(s for g in groups for s in g)
    merged: list[tuple[int, int]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


class SpanSet:
    """Sorted, disjoint spans with O(log n) membership."""

    __slots__ = ("spans", "_starts")

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.spans = spans
        self._starts = [s for s, _ in spans]

    def containing(self, pos: int) -> tuple[int, int] | None:
        i = bisect_right(self._starts, pos) - 1
        if i >= 0 and self.spans[i][0] <= pos < self.spans[i][1]:
            return self.spans[i]
        return None

    def next_start(self, pos: int) -> int | None:
        """Where the first span starting after `pos` starts, or None."""
        i = bisect_right(self._starts, pos)
        return self.spans[i][0] if i < len(self.spans) else None

    def covers(self, start: int, end: int) -> bool:
        span = self.containing(start)
        return span is not None and end <= span[1]

    def __bool__(self) -> bool:
        return bool(self.spans)


_DIGIT = re.compile(r"\d")
_ASCII_DIGITS = b"0123456789"


def has_digit(text: str) -> bool:
    """Whether `text` holds a digit (`\\d`), several times faster on ASCII text."""
    if text.isascii():
        return len(text.encode("ascii").translate(None, _ASCII_DIGITS)) != len(text)
    return _DIGIT.search(text) is not None


def one_line(text: str, limit: int = 300) -> str:
    """Evidence squeezed onto one trace line."""
    if (
        len(text) <= limit
        and text.isprintable()  # the only printable whitespace is the space
        and "  " not in text
        and text[:1] != " "
        and text[-1:] != " "
    ):
        return text  # already one line of single spaces
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
