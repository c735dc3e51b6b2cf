"""Rule 1: prompt-template headings echoed by the model are removed as whole lines."""

from __future__ import annotations

from functools import lru_cache

from .context import Ctx

_LEADING_MARKUP = " \t#>*_-"


def heading_match(line: str, patterns: tuple[str, ...]) -> str | None:
    """The pattern the line starts with (ignoring case and emphasis markup), or None."""
    head = line.lstrip(_LEADING_MARKUP)[:200].replace("*", "").replace("_", "").lower()
    for pattern in patterns:
        p = pattern.lower()
        if head.startswith(p):
            nxt = head[len(p) : len(p) + 1]
            if p[-1].isalnum() and nxt.isalnum():
                continue  # "Namedropping" is not the heading "Namedrop"
            return pattern
    return None


@lru_cache(maxsize=64)
def _first_words(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """A line can only start with a heading if the heading's first word is in the text."""
    return tuple(p.lower().rstrip(":").split(" ")[0] for p in patterns)


@lru_cache(maxsize=64)
def _first_chars(patterns: tuple[str, ...]) -> frozenset[str]:
    """What a lower-cased line (markup stripped) starts with when it holds a heading."""
    return frozenset(p.lower()[:1] for p in patterns)


def may_start_heading(text: str, patterns: tuple[str, ...]) -> bool:
    """Whether some line, fenced or not, starts with a heading: `heading_match`, asked
    only of lines whose first character (after markup) can begin a pattern."""
    first = _first_chars(patterns)
    pos = 0
    while True:
        nl = text.find("\n", pos)
        c = text[pos : pos + 1]
        if c and c in _LEADING_MARKUP:
            c = text[pos : nl + 1 if nl >= 0 else len(text)].lstrip(_LEADING_MARKUP)[:1]
        if (
            c
            and (not c.isascii() or c.lower() in first)
            and heading_match(text[pos : nl + 1 if nl >= 0 else len(text)], patterns)
        ):
            return True
        if nl < 0:
            return False
        pos = nl + 1


def strip_prompt_leaks(ctx: Ctx) -> None:
    text = ctx.doc.text
    patterns = ctx.settings.patterns
    if not may_start_heading(text, patterns):
        return
    lowered = text.lower()
    for word in _first_words(patterns):
        if word in lowered:
            break
    else:
        return
    _, fences = ctx.code()
    edits = []
    pos, n, fence_i = 0, len(text), 0
    while pos < n:
        nl = text.find("\n", pos)
        end = n if nl < 0 else nl + 1
        while fence_i < len(fences) and fences[fence_i][1] <= pos:
            fence_i += 1
        in_fence = fence_i < len(fences) and fences[fence_i][0] <= pos
        if not in_fence:
            pattern = heading_match(text[pos:end], patterns)
            if pattern is not None:
                line_end = end - 1 if nl >= 0 else end
                ctx.annotate(
                    "prompt_leak",
                    "PROMPT_LEAK",
                    "warning",
                    f"A prompt-template heading ({pattern}) was echoed; the line was removed.",
                    pos,
                    line_end,
                )
                ctx.trace("STRIP", "PROMPT_LEAK", text[pos:line_end])
                start = pos
                if nl < 0 and pos > 0 and text[pos - 1] == "\n":
                    start = pos - 1  # last line: take the newline before it instead
                edits.append((start, end, ""))
        pos = end
    if edits:
        ctx.doc.apply(edits)
