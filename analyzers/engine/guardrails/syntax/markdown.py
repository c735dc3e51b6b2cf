"""A linear-time scanner for the links a markdown renderer would make.

It follows CommonMark closely enough for a guardrail: inline links and images with
balanced brackets in the label and balanced parentheses in the destination, angle
destinations, titles, autolinks, reference definitions, backslash escapes, and no links
inside code spans or fenced code. Every loop advances, so the scan is linear.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .text import SpanSet

_SPECIAL = re.compile(r"[\\\[\]<`]")
_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.\-]{1,31}:[^\x00-\x20<>]*)>")
_EMAIL_AUTOLINK = re.compile(
    r"<([A-Za-z0-9.!#$%&'*+/=?^_`{|}~\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?)*)>"
)
# (after any CommonMark line ending, a lone CR too; inside block quotes and list items
# too: their markers may come first, and a list
# item's later lines are indented to its content, so any indentation is read as one)
_DEFINITION = re.compile(
    r"(?:\A|(?<=[\n\r]))(?:[ \t]{0,3}(?:>[ \t]?|[*+\-][ \t]+|\d{1,9}[.)][ \t]+))*"
    r"([ \t]*\[((?:[^\[\]\\\n]|\\.){1,999})\]:[ \t]*(?:\r\n?|\n)?[ \t]*(<[^<>\r\n]*>|\S+)"
    r"[^\r\n]*(?:\r\n?|\n|$))",
    re.MULTILINE,
)
_ANCHOR = re.compile(
    r"""<a\s(?:[^<>]*?\s)?href\s*=\s*("[^"<>]*"|'[^'<>]*'|[^\s"'<>]+)[^<>]*>([^<]*)</a\s*>""",
    re.IGNORECASE,
)
MAX_PAREN_DEPTH = 32


def _destination_pattern(depth: int) -> re.Pattern[str]:
    """A bare destination: balanced parentheses nested at most `depth` deep, backslash
    escapes, no whitespace or control characters.

    Possessive repeats and alternatives told apart by their first character make the
    match deterministic: it consumes exactly what a left-to-right scan with a depth
    counter would, in C, with no backtracking.
    """
    atom = r"[^\x00-\x20()\\]|\\[\s\S]|\\\Z"  # a backslash escapes the next character
    content = f"(?:{atom})*+"
    for _ in range(depth):
        content = rf"(?:{atom}|\({content}\))*+"
    return re.compile(content)


_BARE_DESTINATION = _destination_pattern(MAX_PAREN_DEPTH)
_FLAT_DESTINATION = re.compile(r"(?:[^\x00-\x20()\\]|\\[\s\S]|\\\Z)*+")
_ANGLE_DESTINATION = re.compile(r"(?:[^<>\r\n\\]|\\[\s\S])*+")
_CLOSER_OR_STOP = re.compile(r"[\x00-\x20)\\]")


class _NextCloser:
    """Where the next ")", backslash or whitespace is, for positions asked in increasing
    order: one scan of the text in all, however many links are tried."""

    __slots__ = ("text", "asked", "found")

    def __init__(self, text: str) -> None:
        self.text = text
        self.asked = len(text) + 1
        self.found = len(text)

    def __call__(self, pos: int) -> int:
        if not self.asked <= pos <= self.found:
            m = _CLOSER_OR_STOP.search(self.text, pos)
            self.found = m.start() if m else len(self.text)
        self.asked = pos
        return self.found


@dataclass(slots=True)
class MdLink:
    start: int
    end: int
    label: str
    label_start: int
    label_end: int
    dest: str
    kind: str  # "inline", "image", "autolink", "definition"


def _skip_space(text: str, i: int, n: int) -> int:
    """Spaces and tabs with at most one line ending ("\n", "\r\n" or "\r", as CommonMark
    reads them), as between link parts."""
    seen_newline = False
    while i < n:
        c = text[i]
        if c in " \t":
            i += 1
        elif c in "\r\n" and not seen_newline:
            seen_newline = True
            i += 2 if c == "\r" and i + 1 < n and text[i + 1] == "\n" else 1
        else:
            break
    return i


def _parse_title(text: str, i: int, n: int) -> int:
    """Index after a title starting at i, or -1."""
    opener = text[i]
    closer = ")" if opener == "(" else opener
    j = i + 1
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == closer:
            return j + 1
        if opener == "(" and c == "(":
            return -1
        if c == "\n" and j + 1 < n and text[j + 1] == "\n":
            return -1
        j += 1
    return -1


def parse_destination(
    text: str, i: int, next_closer: _NextCloser | None = None
) -> tuple[int, str, int, int] | None:
    """Parse `dest "title")` starting right after `(`; return (end, dest, dest_start, dest_end).

    `next_closer`, shared by the calls of one scan, makes hopeless destinations cheap.
    """
    n = len(text)
    i = _skip_space(text, i, n)
    if i >= n:
        return None
    if text[i] == "<":
        j = _ANGLE_DESTINATION.match(text, i + 1).end()  # type: ignore[union-attr]
        if j >= n or text[j] != ">":
            return None
        dest_start, dest_end = i + 1, j
        j += 1
    else:
        j = _FLAT_DESTINATION.match(text, i).end()  # type: ignore[union-attr]
        if j < n and text[j] == "(":
            # A nested "(" can only close if a ")" (or an escape) comes before the next
            # whitespace; otherwise the destination is unbalanced, whatever its depth.
            stop = (next_closer or _NextCloser(text))(j)
            if stop >= n or text[stop] == " " or text[stop] < " ":
                return None
            # Balanced up to MAX_PAREN_DEPTH; stopping at "(" means unclosed or too deep.
            j = _BARE_DESTINATION.match(text, i).end()  # type: ignore[union-attr]
            if j < n and text[j] == "(":
                return None
        dest_start, dest_end = i, j
    k = _skip_space(text, j, n)
    if k < n and k > j and text[k] in "\"'(":
        after = _parse_title(text, k, n)
        if after < 0:
            return None
        k = _skip_space(text, after, n)
    if k < n and text[k] == ")":
        return k + 1, text[dest_start:dest_end], dest_start, dest_end
    return None


# A link whose label and destination hold none of the scanner's special characters
# ("[", "]", "\\", "<", "`"), nor "(", ")" or whitespace in the destination.
_PLAIN_LINK = re.compile(r"\[([^\[\]\\<`]*)\]\(([^\x00-\x20()\\<\[\]`]+)\)")


def _scan_plain(text: str) -> list[MdLink] | None:
    """The links of code-free text whose special characters all belong to plain links,
    or None when the text has any other.

    Such text is read by `scan_links` one link at a time, each "[" closed by the next
    "]" with an empty bracket stack, so every plain link is a link and nothing else is.
    """
    if "\\" in text or "<" in text or "`" in text:
        return None
    specials = text.count("[")
    if not specials:
        return None if "]" in text else []
    specials += text.count("]")
    links = []
    for m in _PLAIN_LINK.finditer(text):
        start = m.start()
        if start and text[start - 1] == "!":  # no backslash can escape it: there is none
            links.append(
                MdLink(
                    start - 1, m.end(), m.group(1), start + 1, m.start(2) - 2, m.group(2), "image"
                )
            )
        else:
            links.append(
                MdLink(start, m.end(), m.group(1), start + 1, m.start(2) - 2, m.group(2), "inline")
            )
    return links if 2 * len(links) == specials else None


def scan_links(text: str, code: SpanSet) -> list[MdLink]:
    """Inline links, images, autolinks and reference definitions outside code, in order."""
    if not code:
        plain = _scan_plain(text)
        if plain is not None:
            return plain
    links: list[MdLink] = []
    n = len(text)
    # stack entries: [first_pos, count, image_first]
    stack: list[list] = []
    deactivated_below = 0
    next_closer: _NextCloser | None = None
    containing = code.containing if code else None
    last_paren = text.rfind(")")  # a destination ends with ")": none can start past it
    i = 0
    while i < n:
        m = _SPECIAL.search(text, i)
        if m is None:
            break
        i = m.start()
        span = containing(i) if containing is not None else None
        if span is not None:
            i = span[1]
            continue
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "`":
            i += 1
            continue
        if c == "[":
            j = i
            while j < n and text[j] == "[":
                j += 1
            image = i > 0 and text[i - 1] == "!" and not (i > 1 and text[i - 2] == "\\")
            stack.append([i, j - i, image])
            i = j
            continue
        if c == "]":
            if not stack:
                i += 1
                continue
            entry = stack[-1]
            idx = len(stack) - 1
            pos = entry[0] + entry[1] - 1
            image = entry[2] and entry[1] == 1
            entry[1] -= 1
            if entry[1] == 0:
                stack.pop()
                if deactivated_below > len(stack):
                    deactivated_below = len(stack)
            if idx < deactivated_below and not image:
                i += 1
                continue
            if i + 1 < n and text[i + 1] == "(" and i + 2 <= last_paren:
                if next_closer is None:
                    next_closer = _NextCloser(text)
                parsed = parse_destination(text, i + 2, next_closer)
                if parsed is not None:
                    end, dest, _, _ = parsed
                    start = pos - 1 if image else pos
                    links.append(
                        MdLink(
                            start,
                            end,
                            text[pos + 1 : i],
                            pos + 1,
                            i,
                            dest,
                            "image" if image else "inline",
                        )
                    )
                    if not image:
                        deactivated_below = len(stack)
                    i = end
                    continue
            i += 1
            continue
        # c == "<"
        am = _AUTOLINK.match(text, i) or _EMAIL_AUTOLINK.match(text, i)
        if am is not None:
            links.append(
                MdLink(i, am.end(), am.group(1), i + 1, am.end() - 1, am.group(1), "autolink")
            )
            i = am.end()
            continue
        i += 1
    if "]:" in text:
        for dm in _DEFINITION.finditer(text):
            if code and code.containing(dm.start(1)):
                continue
            dest = dm.group(3)
            if dest.startswith("<") and dest.endswith(">"):
                dest = dest[1:-1]
            links.append(
                MdLink(
                    dm.start(1), dm.end(), dm.group(2), dm.start(2), dm.end(2), dest, "definition"
                )
            )
        links.sort(key=lambda link: link.start)
    return links


@dataclass(slots=True)
class Anchor:
    start: int
    end: int
    href: str
    label: str


def scan_anchors(text: str, code: SpanSet) -> list[Anchor]:
    if "<" not in text:
        return []
    anchors = []
    for m in _ANCHOR.finditer(text):
        if code and code.containing(m.start()):
            continue
        href = m.group(1)
        if href[:1] in "\"'":
            href = href[1:-1]
        anchors.append(Anchor(m.start(), m.end(), href, m.group(2)))
    return anchors


def escape_label(text: str) -> str:
    """Label text that cannot open or close a link."""
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def format_destination(url: str) -> str:
    if any(c in url for c in " ()<>") or not url:
        return "<" + url.replace("<", "%3C").replace(">", "%3E") + ">"
    return url
