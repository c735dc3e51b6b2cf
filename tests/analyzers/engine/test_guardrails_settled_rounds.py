"""Shortcuts of the guardrail rules give what the full work gives, record by record:
the markup round skipped after one that left nothing it could change, the link scan
skipped when no link can be there, and link rows copied instead of serialised."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import LinkRecord
from analyzers.engine.guardrails import markup
from analyzers.engine.guardrails.analyzers import _dump_link, _serialize_link
from analyzers.engine.guardrails.context import may_hold_link
from analyzers.engine.guardrails.settings import settings_from_config
from analyzers.engine.guardrails.stream import audit_text
from analyzers.engine.guardrails.syntax.markdown import scan_links
from analyzers.engine.guardrails.syntax.text import SpanSet

SETTINGS = settings_from_config(AuditorConfig.model_validate({"allowed_hosts": ["acme.example"]}))

PIECES = [
    "<b>",
    "</b>",
    "<B>",
    "<i x=1>",
    "<abbr title='t'>",
    '<abbr title="<b>">',
    "<q cite=x>",
    "<script>",
    "</script>",
    "<span>",
    "<img src=x onerror=alert(1)>",
    "<!-- c -->",
    "<",
    ">",
    "<<",
    "b>",
    "i>",
    "<x>",
    "</",
    "`",
    "``",
    "~~~",
    "\n",
    " ",
    "x",
    "<style>",
    "</style>",
    "<https://evil.example/a>",
    "<a@evil.example>",
    "https://evil.example/p",
    "[y](https://evil.example/a)",
    "&lt;",
    "<br/>",
    "<wbr>",
    ":",
    "@",
]


def records(result):
    return (
        result.cleaned_response,
        [(owner, a.model_dump()) for owner, a in result.annotations],
        [link.model_dump() for link in result.links],
        result.trace,
    )


@settings(max_examples=800, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PIECES), st.integers(1, 3)), max_size=14))
def test_a_skipped_markup_round_changes_nothing(parts):
    text = "".join(piece * times for piece, times in parts)
    skipped = audit_text(text, SETTINGS)
    markup.SKIP_SETTLED_ROUND = False
    try:
        full = audit_text(text, SETTINGS)
    finally:
        markup.SKIP_SETTLED_ROUND = True
    assert records(skipped) == records(full)


@pytest.mark.python_guardrails
def test_the_round_is_skipped_only_when_nothing_can_form():
    calls = []
    real = markup._one_round

    def counting(ctx, final):
        calls.append(ctx.doc.text)
        return real(ctx, final)

    markup._one_round = counting
    try:
        audit_text("<b>Bold</b> <script>x</script> <span>s</span>", SETTINGS)
        assert len(calls) == 1  # the text left holds only `<b>`, `</b>`: nothing to do
        calls.clear()
        audit_text("<<x>b>bold", SETTINGS)  # removing `<x>` forms `<b>`: judged again
        assert len(calls) >= 2
    finally:
        markup._one_round = real


LINK_PIECES = [
    "[",
    "]",
    "(",
    ")",
    "<",
    ">",
    ":",
    "@",
    "x",
    " ",
    "\n",
    "https://a.example/",
    "]:",
    "](",
    "!",
    "\\",
    "`",
    "mailto:",
    "a@b.example",
]


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(LINK_PIECES), max_size=16))
def test_no_link_is_missed_by_the_link_gate(parts):
    text = "".join(parts)
    if not may_hold_link(text):
        assert scan_links(text, SpanSet([])) == []


@given(
    reason=st.one_of(st.none(), st.text(max_size=5)),
    status=st.one_of(st.none(), st.integers(100, 599)),
    healthy=st.one_of(st.none(), st.booleans()),
    decision=st.sampled_from(["keep", "replace", "strip"]),
)
def test_a_link_row_is_its_serialised_form(reason, status, healthy, decision):
    record = LinkRecord(
        url="https://a.example/x",
        label="l",
        decision=decision,
        reason=reason,
        http_status=status,
        healthy=healthy,
    )
    dumped = _dump_link(record)
    assert dumped == _serialize_link(record)
    assert list(dumped) == list(_serialize_link(record))
