"""Highlight segments, side-by-side diff and link helpers (pure functions, no HTML)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from audits.cards.highlight import highlight_segments, linkify, safe_href, side_by_side


def ann(start=None, end=None, evidence=None, severity="warning"):
    return SimpleNamespace(start=start, end=end, evidence=evidence, severity=severity)


def test_segments_split_at_offsets_and_keep_every_character():
    text = "Al-Futtaim grew. Acme is easy."
    segs = highlight_segments(text, [("a1", ann(0, 10, "Al-Futtaim", "critical"))])
    assert [(s.text, s.ann_ids, s.severity) for s in segs] == [
        ("Al-Futtaim", ("a1",), "critical"),
        (" grew. Acme is easy.", (), ""),
    ]


def test_overlaps_carry_both_ids_and_the_worst_severity():
    text = "abcdefghij"
    segs = highlight_segments(
        text, [("a", ann(0, 6, severity="info")), ("b", ann(3, 9, severity="critical"))]
    )
    assert [(s.text, s.ann_ids, s.severity) for s in segs] == [
        ("abc", ("a",), "info"),
        ("def", ("a", "b"), "critical"),
        ("ghi", ("b",), "critical"),
        ("j", (), ""),
    ]


def test_wrong_offsets_fall_back_to_the_evidence_and_unknown_evidence_is_skipped():
    text = "one two three"
    segs = highlight_segments(
        text, [("a", ann(0, 3, "two")), ("b", ann(50, 60, None)), ("c", ann(None, None, "zzz"))]
    )
    assert [(s.text, s.ann_ids) for s in segs] == [("one ", ()), ("two", ("a",)), (" three", ())]


@settings(max_examples=200)
@given(
    st.text(max_size=60), st.lists(st.tuples(st.integers(-5, 70), st.integers(-5, 70)), max_size=5)
)
def test_segments_always_reassemble_the_text(text, spans):
    anns = [(f"a{i}", ann(s, e)) for i, (s, e) in enumerate(spans)]
    assert "".join(s.text for s in highlight_segments(text, anns)) == text


@settings(max_examples=200)
@given(st.text(max_size=80), st.text(max_size=80))
def test_side_by_side_reassembles_both_sides(original, cleaned):
    diff = side_by_side(original, cleaned)
    assert "".join(p.text for p in diff.original) == original
    assert "".join(p.text for p in diff.cleaned) == cleaned
    assert diff.changed is (original != cleaned)
    assert all(p.kind in ("equal", "removed") for p in diff.original)
    assert all(p.kind in ("equal", "added") for p in diff.cleaned)


def test_side_by_side_marks_removed_and_replaced_words():
    diff = side_by_side("Read [this](https://evil.example) now.", "Read this now.")
    assert any(p.kind == "removed" and "evil.example" in p.text for p in diff.original)
    assert "".join(p.text for p in diff.cleaned if p.kind == "equal").startswith("Read ")


def test_safe_href_allows_only_http_and_https():
    assert safe_href("https://acme.example/x") == "https://acme.example/x"
    assert safe_href("HTTP://acme.example") == "HTTP://acme.example"
    for bad in (
        "javascript:alert(1)",
        "data:text/html,x",
        "//evil.example",
        "http://",
        "java\tscript:alert(1)",
        " javascript:alert(1)",
        "",
        None,
        "https://a b\x00",
    ):
        assert safe_href(bad) == ""


def test_linkify_links_only_http_urls():
    pieces = linkify("See https://acme.example/a, not javascript:alert(1).")
    assert [(p.text, p.href) for p in pieces] == [
        ("See ", ""),
        ("https://acme.example/a", "https://acme.example/a"),
        (", not javascript:alert(1).", ""),
    ]
