"""The word diff of original and cleaned text: exact, readable, and bounded work."""

from __future__ import annotations

import difflib

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.engine import textdiff
from analyzers.engine.textdiff import word_diff

PARAGRAPH = (
    "Decathlon grew conversion by 80% with Acme. See [the study](https://evil.example/s).\n"
    "Namedrop: Globex\n\n"
)
CLEANED_PARAGRAPH = "Decathlon grew conversion by 80% with Acme. See the study.\n\n"


def sides(pieces):
    original = "".join(t for k, t in pieces if k != "added")
    cleaned = "".join(t for k, t in pieces if k != "removed")
    return original, cleaned


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["a", "b", " ", "\n", ".", "link", "Namedrop:", "x y. "]), max_size=60
    ),
    st.lists(st.sampled_from(["a", "b", " ", "\n", ".", "z", "x y. "]), max_size=60),
)
def test_the_pieces_join_to_both_texts(left, right):
    original, cleaned = "".join(left), "".join(right)
    assert sides(word_diff(original, cleaned)) == (original, cleaned)


def test_identical_texts_are_one_equal_piece():
    assert word_diff("same\ntext", "same\ntext") == [("equal", "same\ntext")]
    assert word_diff("", "") == []


def test_only_the_edits_of_a_repeated_paragraph_are_marked():
    original, cleaned = PARAGRAPH * 50, CLEANED_PARAGRAPH * 50
    pieces = word_diff(original, cleaned)
    assert sides(pieces) == (original, cleaned)
    removed = "".join(t for k, t in pieces if k == "removed")
    added = "".join(t for k, t in pieces if k == "added")
    assert removed.count("https://evil") == 50
    assert removed.count("Namedrop: Globex") == 50
    assert "Decathlon" not in removed and "Decathlon" not in added


def test_a_long_single_line_is_aligned_by_sentences():
    sentence = "Acme grew by 50% [here](https://evil.example/x). "
    original = sentence * 2000
    cleaned = "Acme grew by 50% here. " * 2000
    pieces = word_diff(original, cleaned)
    assert sides(pieces) == (original, cleaned)
    removed = "".join(t for k, t in pieces if k == "removed")
    assert "Acme" not in removed  # not the whole line removed and added again


class _CountingMatcher(difflib.SequenceMatcher):
    cells: list[int] = []

    def __init__(self, isjunk, a, b, autojunk):
        type(self).cells.append(len(a) * len(b))
        super().__init__(isjunk, a, b, autojunk=autojunk)


def test_the_word_level_work_is_bounded_per_block_and_linear_in_total(monkeypatch):
    monkeypatch.setattr(textdiff.difflib, "SequenceMatcher", _CountingMatcher)
    _CountingMatcher.cells = []
    repeats = 4000  # about 400 KB
    original, cleaned = PARAGRAPH * repeats, CLEANED_PARAGRAPH * repeats
    # One unbroken line too, and a block with no sentence breaks: the fallbacks.
    original += "word " * 20_000 + "\n" + "[a](https://x.example) " * 5000
    cleaned += "mot " * 20_000 + "\n" + "a " * 5000
    pieces = word_diff(original, cleaned)
    assert sides(pieces) == (original, cleaned)
    assert max(_CountingMatcher.cells) <= textdiff.MAX_WORD_CELLS
    # Work proportional to the number of edits (one block per paragraph), not their square.
    assert len(_CountingMatcher.cells) <= repeats + 10
    assert sum(_CountingMatcher.cells) <= repeats * 1000
