"""Bulk work on long runs of markup: identical tags removed back to back make one edit and
one finding spanning the run; past the last ">" every "<" is made text in one scan. Both
clean exactly as tag-by-tag judging does, and bound the records a response can make."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.engine.config import AuditorConfig
from analyzers.engine.guardrails import links, markup
from analyzers.engine.guardrails.settings import settings_from_config
from analyzers.engine.guardrails.stream import audit_text

SETTINGS = settings_from_config(AuditorConfig.model_validate({"allowed_hosts": ["acme.example"]}))

PIECES = [
    "<script>",
    "</script>",
    "<div>",
    "<img src=x onerror=alert(1)>",
    '<a href="x">',
    '<a href="https://evil.example/">',
    "<b>",
    "</b>",
    "<i x=1>",
    "<!-- c -->",
    "<b ",
    "<",
    "`",
    "`<div>`",
    " ",
    "\n",
    "x",
    "<style>",
    "</style>",
    "https://evil.example/p",
    "<https://evil.example/a>",
    "<https://acme.example/a>",
    "[y](https://evil.example/a)",
    "![i](https://evil.example/i.png)",
    "[y](javascript:alert(1))",
    "\t",
    "according to ",
    "[src](https://evil.example/s)",
    "<mailto:x@evil.example>",
    "(",
    ")",
    "[",
    "]",
]


def spans(result):
    return sorted((a.type, a.severity, a.start, a.end) for _, a in result.annotations)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PIECES), st.integers(1, 4)), max_size=12))
def test_runs_clean_exactly_as_tag_by_tag_judging(parts):
    text = "".join(piece * times for piece, times in parts)
    merged = audit_text(text, SETTINGS)
    markup.MERGE_RUNS = links.MERGE_RUNS = False
    try:
        single = audit_text(text, SETTINGS)
    finally:
        markup.MERGE_RUNS = links.MERGE_RUNS = True
    assert merged.cleaned_response == single.cleaned_response
    # every finding of the run-merged audit covers exactly the findings it stands for
    for _, a in merged.annotations:
        assert text[a.start : a.end] == a.evidence
    covered = {(t, s) for t, s, _, _ in spans(merged)}
    assert covered == {(t, s) for t, s, _, _ in spans(single)}
    for t, sev, start, end in spans(single):
        assert any(
            t == t2 and sev == s2 and s <= start and end <= e for t2, s2, s, e in spans(merged)
        )


def test_a_run_of_identical_tags_is_one_finding_with_its_count():
    text = "<script>" * 1000 + " tail"
    result = audit_text(text, SETTINGS)
    assert result.cleaned_response == " tail"
    [(owner, finding)] = result.annotations
    assert (finding.type, finding.severity) == ("HTML_UNSAFE_MARKUP", "critical")
    assert (finding.start, finding.end) == (0, 8000)
    assert "(1000 in a row)" in finding.description


def test_a_run_of_anchors_to_a_host_not_allowed_is_judged_once_and_recorded_once():
    text = 'See <a href="https://evil.example/">' * 3
    result = audit_text("x " + '<a href="https://evil.example/">' * 500, SETTINGS)
    codes = sorted(a.type for _, a in result.annotations)
    assert codes == ["HTML_UNSAFE_MARKUP", "LINK_HOST_NOT_ALLOWED"]
    assert [r.decision for r in result.links] == ["strip"]
    assert "evil" not in result.cleaned_response
    # not adjacent: one finding per tag, as before
    assert len(audit_text(text, SETTINGS).annotations) == 6


def test_a_run_of_one_stripped_autolink_is_one_finding():
    text = "<https://evil.example/a> " * 400 + "end"
    result = audit_text(text, SETTINGS)
    assert result.cleaned_response.strip() == "end"
    found = [a for _, a in result.annotations if a.type == "LINK_HOST_NOT_ALLOWED"]
    assert len(found) == 1 and "(400 in a row)" in found[0].description
    assert text[found[0].start : found[0].end] == found[0].evidence


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [("a <b c `<b` <i", "a &lt;b c `<b` &lt;i"), ("<b " * 3, "&lt;b &lt;b &lt;b ")],
)
def test_past_the_last_closing_bracket_every_tag_start_outside_code_is_text(text, cleaned):
    assert audit_text(text, SETTINGS).cleaned_response == cleaned
