"""The inline stream auditor: paragraph boundaries, fences, sources mid-stream, chunking."""

from __future__ import annotations

import markdown_it
from hypothesis import example, given, settings
from hypothesis import strategies as st

from analyzers.engine.config import KnownCustomer
from analyzers.engine.contract import Source
from analyzers.engine.guardrails.settings import GuardrailSettings
from analyzers.engine.guardrails.stream import InlineStreamAuditor, audit_text

SETTINGS = GuardrailSettings.build(
    allowed_hosts=["acme.example", "www.acme.example", "docs.acme.example"],
    known_customers=[
        KnownCustomer(
            name="Decathlon", slug="decathlon", facts=["Decathlon grew conversion by 50%"]
        )
    ],
    tech_doc_prefixes=["docs.acme.example/api"],
)

TEXT = (
    "Namedrop:\nAcme powers search.\n\n"
    "Al-Futtaim achieved +206% revenue. Read [here](https://evil.test/x).\n\n\n"
    "```\ncode [x](javascript:a)\n\nstill code\n```\n\n"
    "Decathlon grew conversion by 50% ([case study](https://www.acme.example/customers/decathlon))."
)


def run_stream(text: str, cuts: list[int], sources=()) -> tuple[str, list[str]]:
    auditor = InlineStreamAuditor(SETTINGS, sources)
    pieces, trace = [], []
    prev = 0
    for cut in [*sorted(set(cuts)), len(text)]:
        for piece in auditor.feed(text[prev:cut]):
            pieces.append(piece.text)
            trace.extend(piece.trace)
        prev = cut
    for piece in auditor.finish():
        pieces.append(piece.text)
        trace.extend(piece.trace)
    return "".join(pieces), trace


def test_it_yields_a_paragraph_as_soon_as_its_blank_line_arrives():
    auditor = InlineStreamAuditor(SETTINGS)
    assert auditor.feed("First [x](https://evil.test/) para") == []
    out = auditor.feed("graph.\n\nSecond")
    assert "".join(p.text for p in out) == "First x paragraph.\n\n"
    assert out[0].trace[0] == "[AUDIT] ══ paragraph in ══"
    assert "".join(p.text for p in auditor.finish()) == "Second"


def test_it_never_splits_inside_a_fenced_code_block():
    auditor = InlineStreamAuditor(SETTINGS)
    out = auditor.feed("```\nline\n\nmore\n")
    assert out == []
    out = auditor.feed("```\n\n")
    assert "".join(p.text for p in out) == "```\nline\n\nmore\n```\n\n"


def test_sources_added_mid_stream_apply_to_the_next_paragraphs():
    auditor = InlineStreamAuditor(SETTINGS)
    link = "[this article](https://www.acme.example/blog/x)"
    first = "".join(p.text for p in auditor.feed(f"A {link}.\n\n"))
    auditor.add_source(Source(title="X guide", url="https://www.acme.example/blog/x"))
    auditor.feed(f"B {link}.")
    second = "".join(p.text for p in auditor.finish())
    assert first == f"A {link}.\n\n"
    assert second == "B [X guide | Acme](https://www.acme.example/blog/x)."


def test_offsets_point_into_the_original_across_paragraphs():
    result = audit_text(TEXT, SETTINGS)
    assert result.annotations
    for _, a in result.annotations:
        assert TEXT[a.start : a.end] == a.evidence


def test_stream_output_equals_batch_for_a_known_text():
    batch = audit_text(TEXT, SETTINGS)
    for step in (1, 2, 3, 7, 50):
        out, trace = run_stream(TEXT, list(range(step, len(TEXT), step)))
        assert out == batch.cleaned_response
        assert trace == batch.trace


ALPHABET = st.sampled_from(
    [
        "\n",
        "\n\n",
        " ",
        "```",
        "`",
        "[",
        "]",
        "(",
        ")",
        "<",
        ">",
        "!",
        "\\",
        "&colon;",
        "here",
        "Globex",
        "Decathlon",
        "grew",
        "50%",
        "+206%",
        "3x",
        "$4M",
        ". ",
        "Namedrop:",
        "https://www.acme.example/customers/decathlon",
        "https://evil.test/",
        "javascript:",
        "mailto:a@b.example",
        "according to",
        " — ",
        "[x](",
        "](",
        '<a href="',
        '">',
        "</a>",
        "Source 3",
        "| Acme",
        "~~~",
        "    ",
        "data:",
        "acme.example",
        "[a [b](https://evil.test) c]",
        "(javascript:x)",
        "[this blog](vbscript:x)",
        # bare URLs, e-mails, bare domains and raw HTML, split anywhere by the chunking
        "https://evil.example/x?d=SECRET",
        "www.evil.com/p",
        "x@evil.com",
        "setup.py",
        "//evil.com",
        "https://www.acme.example/a",
        "<script>",
        "</script>",
        "<img src=x onerror=alert(1)>",
        "<b>",
        "</b>",
        "<div>",
        "<!--",
        "-->",
        "\t",
        "\r",
        "\x00",
        '<a href="https://evil.test/\tp">',
    ]
)
texts = st.lists(ALPHABET, max_size=40).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=texts, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_any_chunking_gives_the_batch_cleaned_response(text, cuts):
    batch = audit_text(text, SETTINGS)
    out, trace = run_stream(text, [c for c in cuts if c <= len(text)])
    assert out == batch.cleaned_response
    assert trace == batch.trace


_MD = markdown_it.MarkdownIt("js-default")


def _hrefs(text: str) -> list[str]:
    found = []
    stack = list(_MD.parse(text))
    while stack:
        token = stack.pop()
        if token.children:
            stack.extend(token.children)
        if token.type == "link_open":
            found.append(token.attrs.get("href", ""))
        if token.type == "image":
            found.append(token.attrs.get("src", ""))
    return found


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(texts, st.text(max_size=200)))
# A strip that forms a new link, then dangling-attribution cleanup (an IndexError once).
@example(text="[a [b](https://evil.test) c](javascript:x) [this blog](vbscript:x)")
@example(text="according to [x [y](https://evil.test) z](javascript:1) via [source](data:x)")
# A CR is a line ending between a link's parts, as LF is: `[x](\r)` links to "" (once kept).
@example(text="[x](\r)")
@example(text="[x](\r\n)")
def test_no_rule_raises_and_no_non_http_link_survives(text):
    result = audit_text(text, SETTINGS)
    for href in _hrefs(result.cleaned_response):
        assert href.startswith(("http://", "https://")), (href, result.cleaned_response)
    for _, a in result.annotations:
        assert text[a.start : a.end] == a.evidence
