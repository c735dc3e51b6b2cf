"""A bare URL removed from between two spaces leaves one space, not two; every other
whitespace, code spans and fences included, is left as it was."""

from __future__ import annotations

import pytest

from analyzers.engine.guardrails.settings import GuardrailSettings
from analyzers.engine.guardrails.stream import InlineStreamAuditor, audit_text

SETTINGS = GuardrailSettings.build(allowed_hosts=["acme.example", "docs.acme.example"])
EVIL = "https://evil.example/x"


def cleaned(text: str, settings: GuardrailSettings = SETTINGS) -> str:
    return audit_text(text, settings).cleaned_response


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"Open {EVIL} before you start.", "Open before you start."),
        ("Open www.evil.example before you start.", "Open before you start."),
        ("Mail me@evil.example today.", "Mail today."),
        (f"a {EVIL} {EVIL}/2 b", "a b"),
        # other whitespace, and spaces the removal did not double, stay as they were
        (f"Open  {EVIL}  now.", "Open   now."),
        (f"Open\t{EVIL} now.", "Open\t now."),
        (f"Open {EVIL}\tnow.", "Open \tnow."),
        (f"Open\n{EVIL} now.", "Open\n now."),
        (f"{EVIL} first.", " first."),
        (f"Last {EVIL}", "Last "),
        (f"See {EVIL}.", "See ."),
        (
            "Kept:  two  spaces  and https://docs.acme.example/a  here.",
            "Kept:  two  spaces  and https://docs.acme.example/a  here.",
        ),
    ],
)
def test_a_removed_bare_url_leaves_one_space(text, expected):
    assert cleaned(text) == expected


def test_code_spans_and_fences_keep_their_spaces():
    text = f"x `{EVIL}  y` z {EVIL} w\n\n```\ncode {EVIL}  here\n```\n\nand {EVIL} there"
    assert cleaned(text) == f"x `{EVIL}  y` z w\n\n```\ncode {EVIL}  here\n```\n\nand there"


def test_defanged_urls_keep_their_spaces():
    defang = GuardrailSettings.build(allowed_hosts=["acme.example"], bare_urls="defang")
    out = cleaned(f"Open {EVIL} before.", defang)
    assert out.startswith("Open ") and out.endswith(" before.") and "  " not in out


def test_the_finding_still_points_at_the_url_alone():
    text = f"Open {EVIL} before you start."
    ((_, finding),) = audit_text(text, SETTINGS).annotations
    assert finding.evidence == EVIL and text[finding.start : finding.end] == EVIL


def test_streamed_chunks_join_to_the_same_text():
    text = f"Open {EVIL} before you start. Then {EVIL}/2 again.\n\nNext {EVIL} one."
    for step in (1, 3, 7):
        auditor = InlineStreamAuditor(SETTINGS)
        pieces = [
            piece.text
            for i in range(0, len(text), step)
            for piece in auditor.feed(text[i : i + step])
        ]
        pieces += [piece.text for piece in auditor.finish()]
        assert (
            "".join(pieces) == cleaned(text) == ("Open before you start. Then again.\n\nNext one.")
        )
