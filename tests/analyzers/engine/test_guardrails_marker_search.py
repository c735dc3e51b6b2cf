"""The pre-scanned marker search finds exactly what the plain `_MARKER` search finds."""

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.engine.guardrails.syntax.autolinks import _MARKER, marker_search, may_hold_url

ALPHABET = st.sampled_from(list("wW./@a1_$~ é\n-:") + ["www.", "//", "x.y", "a@b."])


@settings(max_examples=3000, deadline=None)
@given(st.lists(ALPHABET, max_size=30).map("".join), st.integers(0, 40), st.integers(0, 40))
def test_marker_search_equals_plain_search(text, pos, length):
    pos = min(pos, len(text))
    endpos = min(len(text), pos + length)
    plain = _MARKER.search(text, pos, endpos)
    fast = marker_search(text, pos, endpos)
    assert (plain and (plain.start(), plain.end())) == (fast and (fast.start(), fast.end()))
    assert (plain and plain.group(0)) == (fast and fast.group(0))
    assert (plain is None) == (marker_search(text[pos:endpos]) is None)


@settings(max_examples=3000, deadline=None)
@given(st.lists(ALPHABET, max_size=30).map("".join))
def test_may_hold_url_is_whether_there_is_a_marker(text):
    assert may_hold_url(text) == (_MARKER.search(text) is not None)
