"""What the cleaning changed: a word diff of the original and the cleaned response, in
time linear in their length.

`difflib.SequenceMatcher` (and Myers' O(ND) algorithm, as in diff-match-patch) take
quadratic time when the edits are spread over the whole text, which is exactly what the
guardrails produce on a long response (one stripped link per paragraph). So the texts are
aligned in layers, each bounded:

1. lines: equal lines pass at once; after a mismatch the two sides resynchronise on the
   nearest pair of equal lines within `WINDOW` lines (a dict lookup per line, so O(WINDOW)
   per mismatch); the lines in between form a changed block;
2. a changed block too large to word-diff is split into sentences and aligned the same way;
3. a block's common head and tail tokens are matched directly; a middle of at most
   `MAX_WORD_CELLS` token pairs is word-diffed with `SequenceMatcher` (quadratic, but on a
   bounded block); a larger one is shown as removed and added whole. The same changed
   block repeated (a long response is often a paragraph again and again) is diffed once.

The result is always exact (the equal and removed pieces join to the original, the equal
and added pieces to the cleaned text); only the choice of alignment is heuristic.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

EQUAL, REMOVED, ADDED = "equal", "removed", "added"
WINDOW = 16  # lines (or sentences) looked ahead to resynchronise after a change
MAX_WORD_CELLS = 40_000  # token pairs one SequenceMatcher call may compare (200 x 200)

_TOKEN = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)
# A sentence ends at [.!?] followed by a space (not the dot of "acme.example"), or a newline.
_SENTENCE = re.compile(r"(?:[^.!?\n]|[.!?]+(?![\s.!?]))*(?:[.!?]+[^\S\n]*\n?|\n|$)")

Piece = tuple[str, str]  # (kind, text)
_Splitter = Callable[[str], list[str]]  # text into finer units
_Memo = dict[tuple[str, str], list[Piece]]  # a changed block's diff, by its two sides


def word_diff(original: str, cleaned: str) -> list[Piece]:
    """(kind, text) pieces in reading order: "equal", "removed" (only in the original) and
    "added" (only in the cleaned text); a replacement is its removed piece, then its added.
    Neighbouring pieces of one kind are merged."""
    return bounded_word_diff(original, cleaned, None).pieces


@dataclass(frozen=True, slots=True)
class BoundedDiff:
    """The first `max_changes` changes as pieces; what follows them, unmarked, in
    `original_rest` and `cleaned_rest` (empty when the whole texts were compared)."""

    pieces: list[Piece]
    original_rest: str = ""
    cleaned_rest: str = ""

    @property
    def truncated(self) -> bool:
        return bool(self.original_rest or self.cleaned_rest)


def bounded_word_diff(original: str, cleaned: str, max_changes: int | None) -> BoundedDiff:
    """`word_diff`, stopped after `max_changes` removed or added pieces: the work (and
    what a page shows marked) is then bounded whatever the length of the texts."""
    pieces: list[Piece] = []
    if original == cleaned:
        if original:
            pieces.append((EQUAL, original))
        return BoundedDiff(pieces)
    memo: _Memo = {}
    lines_a, lines_b = original.splitlines(keepends=True), cleaned.splitlines(keepends=True)
    changes = pos_a = pos_b = 0
    for kind, text in _diff_units(lines_a, lines_b, _split_sentences, memo):
        if not text:
            continue
        if kind != EQUAL:
            if max_changes is not None and changes >= max_changes:
                return BoundedDiff(pieces, original[pos_a:], cleaned[pos_b:])
            changes += 1
        if kind != ADDED:
            pos_a += len(text)
        if kind != REMOVED:
            pos_b += len(text)
        if pieces and pieces[-1][0] == kind:
            pieces[-1] = (kind, pieces[-1][1] + text)
        else:
            pieces.append((kind, text))
    return BoundedDiff(pieces)


def _split_sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE.findall(text) if s]


def _diff_units(
    a: Sequence[str], b: Sequence[str], finer: _Splitter | None, memo: _Memo
) -> Iterator[Piece]:
    """Align two sequences of text units (lines or sentences); diff changed blocks finer."""
    for tag, i1, i2, j1, j2 in _align(a, b):
        if tag == EQUAL:
            yield EQUAL, "".join(a[i1:i2])
            continue
        left, right = "".join(a[i1:i2]), "".join(b[j1:j2])
        key = (left, right)
        block = memo.get(key)
        if block is None:  # a repeated edit (the same block again) is diffed once
            block = memo[key] = list(_diff_block(left, right, finer, memo))
        yield from block


def _diff_block(left: str, right: str, finer: _Splitter | None, memo: _Memo) -> Iterator[Piece]:
    if not left or not right:
        yield REMOVED, left
        yield ADDED, right
        return
    ta, tb = _TOKEN.findall(left), _TOKEN.findall(right)
    # The common head and tail cost nothing to match: only the middle is compared.
    head = 0
    while head < len(ta) and head < len(tb) and ta[head] == tb[head]:
        head += 1
    tail = 0
    while tail < len(ta) - head and tail < len(tb) - head and ta[-1 - tail] == tb[-1 - tail]:
        tail += 1
    yield EQUAL, "".join(ta[:head])
    mid_a, mid_b = ta[head : len(ta) - tail], tb[head : len(tb) - tail]
    if len(mid_a) * len(mid_b) <= MAX_WORD_CELLS:
        yield from _word_opcodes(mid_a, mid_b)
    else:
        left, right = "".join(mid_a), "".join(mid_b)
        sa, sb = (finer(left), finer(right)) if finer is not None else ([], [])
        if len(sa) > 1 or len(sb) > 1:
            yield from _diff_units(sa, sb, None, memo)
        else:
            yield REMOVED, left
            yield ADDED, right
    yield EQUAL, "".join(ta[len(ta) - tail :])


def _word_opcodes(ta: list[str], tb: list[str]) -> Iterator[Piece]:
    if not ta or not tb:
        yield REMOVED, "".join(ta)
        yield ADDED, "".join(tb)
        return
    matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            yield EQUAL, "".join(ta[i1:i2])
        else:
            yield REMOVED, "".join(ta[i1:i2])
            yield ADDED, "".join(tb[j1:j2])


def _align(a: Sequence[str], b: Sequence[str]) -> Iterator[tuple[str, int, int, int, int]]:
    """Opcodes ("equal" or "replace" blocks) of a greedy, windowed alignment: O(len * WINDOW)."""
    n, m = len(a), len(b)
    i = j = 0
    while i < n and j < m:
        start_i, start_j = i, j
        while i < n and j < m and a[i] == b[j]:
            i += 1
            j += 1
        if i > start_i:
            yield EQUAL, start_i, i, start_j, j
            continue
        di, dj = _resync(a, b, i, j)
        yield "replace", i, i + di, j, j + dj
        i += di
        j += dj
    if i < n or j < m:
        yield "replace", i, n, j, m


def _resync(a: Sequence[str], b: Sequence[str], i: int, j: int) -> tuple[int, int]:
    """The smallest (di, dj), di + dj > 0, with a[i+di] == b[j+dj] within the window; when
    there is none, (1, 1): the two units are a changed pair."""
    ahead: dict[str, int] = {}
    for dj in range(min(WINDOW, len(b) - j)):
        ahead.setdefault(b[j + dj], dj)
    best: tuple[int, int] | None = None
    for di in range(min(WINDOW, len(a) - i)):
        if best is not None and di >= sum(best):
            break
        at = ahead.get(a[i + di])
        if at is not None and di + at > 0 and (best is None or di + at < sum(best)):
            best = (di, at)
    return best or (1, 1)
