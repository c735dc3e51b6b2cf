"""Fences across paragraphs: what a cleaned paragraph leaves open for the next one, and
how much code is trusted as inert after it (code is trusted only where every reading
agrees)."""

from __future__ import annotations

import pytest
from rendering import problems

from analyzers.engine.guardrails.settings import GuardrailSettings
from analyzers.engine.guardrails.stream import audit_text
from analyzers.engine.guardrails.syntax.text import UNKNOWN_FENCE, fence_state_after, fenced_spans

ALLOWED = ("acme.example",)
STRIP = GuardrailSettings.build(allowed_hosts=ALLOWED)
LATER_FENCE = "\n\n```html\n<script>alert(1)</script>\n```\n"


@pytest.mark.parametrize(
    ("text", "state_in", "state_out"),
    [
        ("plain text", None, None),
        ("```\ncode\n```", None, None),
        ("```\ncode", None, "```"),  # a top-level fence certainly left open
        ("> ```\n```", None, "```"),  # the quote's fence closes; the line after opens one
        ("~~~~\nx", None, "~~~~"),
        ("more code", "```", "```"),  # still inside
        ("code\n```\nafter", "```", None),  # closed by its marker
        ("code\n~~~\nafter", "```", "```"),  # another marker closes nothing
        ("- ```\n  a", None, UNKNOWN_FENCE),  # a list item may go on past the blank line
        ("- ```\n  a\n  ```", None, None),  # closed in the item
        ("1. ```bash\n   a\nnext", None, None),  # a line left of the fence ends the item
        ("a\n- ```\n  a\n  ```", None, UNKNOWN_FENCE),  # not on a first line: not placed
        ("- a\n\t```\n  x", None, UNKNOWN_FENCE),
        ("<div>\n```\nx\n```", None, UNKNOWN_FENCE),  # in an HTML block, or a fence
        ("```\nx", UNKNOWN_FENCE, UNKNOWN_FENCE),  # unknown stays unknown
        ("~~~\r~~~\rx", None, None),  # a lone CR ends a line
    ],
)
def test_the_state_a_paragraph_leaves(text, state_in, state_out):
    assert fence_state_after(text, state_in) == state_out


def test_a_paragraph_starting_inside_a_fence_is_code_up_to_its_closing_line():
    text = "<b onclick=x>\n```\n<i onclick=y>"
    assert fenced_spans(text, "```") == [(0, 18)]
    assert audit_text("```\na\n\n" + text, STRIP).cleaned_response.endswith("```\n<i>")


def test_a_list_item_fence_closed_in_its_paragraph_leaves_later_fences_trusted():
    text = "1. ```bash\n   pip install x\n   ```" + LATER_FENCE
    cleaned = audit_text(text, STRIP).cleaned_response
    assert "<script>alert(1)</script>" in cleaned  # inert: in a fence every reading forms
    assert problems(cleaned, ALLOWED) == []


def test_after_a_fence_some_reading_leaves_open_no_later_code_is_trusted():
    text = "- ```\n  a" + LATER_FENCE + "\n`<img src=x onerror=alert(1)>`\n"
    result = audit_text(text, STRIP)
    assert "<script>" not in result.cleaned_response
    assert "onerror" not in result.cleaned_response
    assert problems(result.cleaned_response, ALLOWED) == []
    assert any(a.type == "HTML_UNSAFE_MARKUP" for _, a in result.annotations)
