"""Each guardrail rule on its own: what it removes, what it must leave alone."""

from __future__ import annotations

import pytest

from analyzers.engine.config import KnownCustomer
from analyzers.engine.contract import Source
from analyzers.engine.guardrails.settings import GuardrailSettings
from analyzers.engine.guardrails.stream import audit_text
from analyzers.engine.guardrails.syntax.urls import canonicalize, host_allowed

CASE = "https://www.acme.example/customers/{slug}"


def make_settings(**overrides) -> GuardrailSettings:
    params = dict(
        allowed_hosts=["acme.example", "www.acme.example", "docs.acme.example"],
        brand_name="Acme",
        title_suffix=" | Acme",
        known_customers=[
            KnownCustomer(
                name="Decathlon", slug="decathlon", facts=["Decathlon grew conversion by 50%"]
            ),
            KnownCustomer(
                name="PcComponentes",
                slug="pccomponentes",
                aliases=["PC Componentes"],
                facts=["PcComponentes lifted revenue per search by 12%"],
            ),
        ],
        tech_doc_prefixes=["docs.acme.example/api"],
        case_study_url=CASE,
    )
    params.update(overrides)
    return GuardrailSettings.build(**params)


SETTINGS = make_settings()


def audit(text: str, sources=(), settings: GuardrailSettings = SETTINGS):
    return audit_text(text, settings, [Source(**s) if isinstance(s, dict) else s for s in sources])


def types(result) -> list[str]:
    return [a.type for _, a in result.annotations]


def assert_offsets(result, original: str) -> None:
    for _, a in result.annotations:
        assert a.start is not None and a.end is not None
        assert original[a.start : a.end] == a.evidence


# --- URL canonicalisation -----------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "url"),
    [
        ("HTTPS://WWW.Acme.Example:443/Path", "https://www.acme.example/Path"),
        ("http://acme.example:80", "http://acme.example/"),
        ("https://acme.example:8443/x", "https://acme.example:8443/x"),
        ("https://acme.example./x", "https://acme.example./x"),  # WHATWG keeps the dot
        ("https://bücher.example/", "https://xn--bcher-kva.example/"),
        ("https://acme&#46;example/x", "https://acme.example/x"),
        (" \thttps://acme.example/a\nb", "https://acme.example/ab"),
    ],
)
def test_it_canonicalises_urls(raw, url):
    assert canonicalize(raw).url == url


@pytest.mark.parametrize(
    "raw",
    [
        "javascript:alert(1)",
        "JaVaScRiPt:alert(1)",
        "java\tscript:alert(1)",
        "javascript&colon;alert(1)",
        "&#106;avascript:alert(1)",
        "data:text/html,x",
        "vbscript:x",
        "mailto:a@b.example",
        "ftp://acme.example/",
        "/relative",
        "//evil.test/",
    ],
)
def test_it_flags_non_http_schemes(raw):
    assert canonicalize(raw).unsafe_scheme


@pytest.mark.parametrize(
    "raw", ["https://acme.example\\evil.test/", "https:/\\evil.test/", "https:///evil.test"]
)
def test_it_refuses_backslash_and_slash_tricks(raw):
    assert canonicalize(raw).url is None


def test_an_escaped_at_sign_is_read_as_the_renderer_reads_it():
    canon = canonicalize("https://acme.example\\@evil.test/")
    assert canon.host == "evil.test" and canon.problem == "userinfo in URL"


def test_userinfo_reveals_the_real_host():
    canon = canonicalize("https://acme.example@evil.test/")
    assert canon.host == "evil.test" and canon.problem == "userinfo in URL"


def test_host_rules_distinguish_exact_and_subdomain_entries():
    assert host_allowed("acme.example", ("acme.example",))
    assert host_allowed("acme.example.", ("acme.example",))  # the same DNS name
    assert not host_allowed("blog.acme.example", ("acme.example",))
    assert host_allowed("blog.acme.example", (".acme.example",))
    assert host_allowed("acme.example", (".acme.example",))
    assert not host_allowed("acme.example.evil.test", (".acme.example", "acme.example"))
    assert not host_allowed("evilacme.example", (".acme.example",))


# --- prompt leak --------------------------------------------------------------------


def test_it_removes_a_heading_line_and_keeps_the_paragraphs_around_it():
    text = "Intro line.\n\nVALUE SELL: we are great\nAcme is fast.\n\nShall I send details?"
    result = audit(text)
    assert result.cleaned_response == "Intro line.\n\nAcme is fast.\n\nShall I send details?"
    assert types(result) == ["PROMPT_LEAK"]
    assert_offsets(result, text)


@pytest.mark.parametrize(
    "line", ["namedrop:", "**Namedrop:**", "## Customer Example: x", "  signal extraction: a"]
)
def test_headings_match_in_any_case_and_markup(line):
    result = audit(f"{line}\nKept.")
    assert result.cleaned_response == "Kept."
    assert types(result) == ["PROMPT_LEAK"]


def test_a_heading_word_inside_a_sentence_is_not_a_leak():
    text = "We use a namedrop: strategy and a VALUE SELL: approach sometimes."
    assert audit(text).cleaned_response == text
    assert "PROMPT_LEAK" not in types(audit(text))


def test_a_heading_inside_fenced_code_is_kept():
    text = "```\nNamedrop:\n```"
    assert audit(text).cleaned_response == text


# --- anchors and links --------------------------------------------------------------


def test_html_anchors_become_markdown():
    text = 'Read <a href="https://acme.example/x">the guide</a> now.'
    result = audit(text)
    assert result.cleaned_response == "Read [the guide](https://acme.example/x) now."
    assert types(result) == ["HTML_ANCHOR_CONVERTED"]
    assert_offsets(result, text)


def test_an_anchor_to_a_foreign_host_is_converted_then_stripped():
    result = audit("<a href='https://evil.test/'>Home</a> page")
    assert result.cleaned_response == "Home page"
    assert types(result) == ["HTML_ANCHOR_CONVERTED", "LINK_HOST_NOT_ALLOWED"]


@pytest.mark.parametrize(
    "url",
    [
        "https://acme.example.evil.test/",
        "https://acme.example@evil.test/",
        "https://evil.test/acme.example",
        "http://127.0.0.1/",
        "https://evil.test:443@acme.example/",
    ],
)
def test_foreign_hosts_are_stripped_and_the_label_kept(url):
    text = f"See [the pricing]({url}) today."
    result = audit(text)
    assert result.cleaned_response == "See the pricing today."
    assert types(result) == ["LINK_HOST_NOT_ALLOWED"]
    assert result.links[0].decision == "strip"
    assert result.links[0].reason == "LINK_HOST_NOT_ALLOWED"
    assert_offsets(result, text)


@pytest.mark.parametrize(
    "link",
    [
        "[x](javascript:alert(1))",
        "[x](JAVASCRIPT:alert(1))",
        "[x](javascript&colon;alert(1))",
        "[x](<javascript:alert(1)>)",
        "![x](data:image/png;base64,AAA)",
        "<mailto:a@b.example>",
        '[x](vbscript:msgbox "t")',
        "[x](/relative/path)",
    ],
)
def test_unsafe_schemes_are_stripped(link):
    result = audit(f"Try {link} now.")
    assert "LINK_UNSAFE_SCHEME" in types(result)
    assert "](" not in result.cleaned_response and "<mailto" not in result.cleaned_response


def test_allowed_links_are_kept_with_a_keep_trace():
    text = "See [Pricing](https://WWW.acme.example/pricing)."
    result = audit(text)
    assert result.cleaned_response == text
    assert "[AUDIT] KEEP | https://www.acme.example/pricing" in result.trace
    assert result.links[0].decision == "keep"


def test_links_inside_code_are_left_alone():
    text = "Use `[x](javascript:alert(1))` or\n```\n[y](https://evil.test)\n```"
    result = audit(text)
    assert result.cleaned_response == text
    assert result.annotations == []


def test_technical_doc_links_are_stripped_unless_their_path_is_allowed():
    text = "See [the API](https://docs.acme.example/api/search) and [guides](https://docs.acme.example/guides)."
    result = audit(text)
    assert result.cleaned_response == "See the API and [guides](https://docs.acme.example/guides)."
    assert types(result) == ["LINK_TECH_DOC_NOT_ALLOWED"]
    allowed = make_settings(tech_doc_allowed_paths=["/api/search"])
    assert audit(text, settings=allowed).cleaned_response == text


def test_a_similar_prefix_is_not_technical_doc():
    text = "See [x](https://docs.acme.example/apis-overview)."
    assert audit(text).cleaned_response == text


SOURCE = {
    "title": "Faceting 101",
    "url": "https://www.acme.example/blog/faceting#top",
    "text": "Facets narrow results.",
}


@pytest.mark.parametrize(
    "label", ["this article", "here", "Click here", "source", "link", "Acme blog", "this page"]
)
def test_generic_labels_take_the_source_title_with_the_suffix_once(label):
    text = f"Read [{label}](https://www.acme.example/blog/faceting) first."
    result = audit(text, [SOURCE])
    assert result.cleaned_response == (
        "Read [Faceting 101 | Acme](https://www.acme.example/blog/faceting) first."
    )
    assert types(result) == ["LINK_LABEL_UPGRADED"]
    assert f"[AUDIT] REPLACE | {label} -> Faceting 101 | Acme" in result.trace


def test_a_title_that_already_has_the_suffix_does_not_get_it_twice():
    source = {**SOURCE, "title": "Faceting 101 | ACME | Acme"}
    result = audit("Read [here](https://www.acme.example/blog/faceting).", [source])
    assert "[Faceting 101 | Acme]" in result.cleaned_response


def test_generic_label_without_a_matching_source_is_kept():
    text = "Read [this article](https://www.acme.example/blog/other) first."
    assert audit(text, [SOURCE]).cleaned_response == text


def test_a_specific_label_is_not_upgraded():
    text = "Read [Faceting guide](https://www.acme.example/blog/faceting) first."
    assert audit(text, [SOURCE]).cleaned_response == text


@pytest.mark.parametrize(
    "label", ["X | Acme | Acme", "X | acme | ACME", "X|Acme|Acme|Acme", "X | Acme  |  Acme | Acme"]
)
def test_repeated_suffixes_collapse(label):
    result = audit(f"See [{label}](https://acme.example/x).")
    assert result.cleaned_response == "See [X | Acme](https://acme.example/x)."
    assert types(result) == ["LINK_LABEL_SUFFIX_NORMALIZED"]


def test_a_single_suffix_is_left_alone():
    text = "See [X | Acme](https://acme.example/x)."
    assert audit(text).cleaned_response == text


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("Search is fast ([source](https://evil.test/x)).", "Search is fast."),
        ("Search is fast — [Source 3](https://evil.test/x).", "Search is fast."),
        ("Search is fast, according to [this blog](https://evil.test/x).", "Search is fast."),
        ("Search is fast via <https://evil.test/x> today.", "Search is fast today."),
        ("Search is fast ([](https://evil.test/x)).", "Search is fast."),
        ("Search is fast [1](https://evil.test/x).", "Search is fast."),
    ],
)
def test_dangling_attributions_go_with_their_link(text, cleaned):
    result = audit(text)
    assert result.cleaned_response == cleaned
    assert "DANGLING_ATTRIBUTION" in types(result)
    assert_offsets(result, text)


def test_attribution_words_without_a_stripped_link_stay():
    text = "According to our survey (source: Acme), search is fast via caching."
    assert audit(text).cleaned_response == text


def test_a_specific_label_after_according_to_stays():
    result = audit("Fast, according to [Gartner research](https://evil.test/x).")
    assert result.cleaned_response == "Fast, according to Gartner research."


# --- grounding ----------------------------------------------------------------------


def test_gate_fabricated_customer_claim_is_stripped():
    text = "Al-Futtaim achieved +206% revenue after adopting Acme. Acme is easy to set up."
    result = audit(text)
    assert result.cleaned_response == "Acme is easy to set up."
    assert types(result) == ["UNGROUNDED_CUSTOMER_CLAIM"]
    assert "UNKNOWN_COMPANY" in result.claims[0]["reasons"]
    assert_offsets(result, text)


def test_gate_real_customer_without_case_study_link_is_stripped():
    result = audit("Intro. PcComponentes lifted revenue per search by 12%. Outro.")
    assert result.cleaned_response == "Intro. Outro."
    assert result.claims[0]["reasons"] == ["MISSING_CASE_STUDY_LINK"]


def test_gate_real_customer_with_case_study_link_passes():
    text = "Decathlon grew conversion by 50% ([case study](https://www.acme.example/customers/decathlon))."
    result = audit(text)
    assert result.cleaned_response == text
    assert result.annotations == []
    assert result.pending and result.pending[0].url.endswith("/customers/decathlon")


def test_an_alias_counts_as_the_customer():
    text = "PC Componentes lifted revenue by 12% ([story](https://www.acme.example/customers/pccomponentes))."
    assert audit(text).cleaned_response == text


def test_a_metric_not_in_the_facts_is_stripped():
    text = "Decathlon grew conversion by 80% ([case study](https://www.acme.example/customers/decathlon))."
    result = audit(text)
    assert result.cleaned_response == ""
    assert result.claims[0]["reasons"] == ["METRIC_NOT_IN_SOURCES"]


def test_the_case_study_of_another_customer_does_not_ground_a_claim():
    text = (
        "Decathlon grew conversion by 50% ([x](https://www.acme.example/customers/pccomponentes))."
    )
    assert audit(text).claims[0]["reasons"] == ["MISSING_CASE_STUDY_LINK"]


def test_a_request_source_company_grounds_its_own_metrics():
    source = {
        "title": "Zalando story",
        "url": None,
        "text": "Zalando cut latency 3x.",
        "company": "Zalando",
    }
    text = "Zalando cut latency 3x ([story](https://www.acme.example/customers/zalando))."
    assert audit(text, [source]).cleaned_response == text
    assert audit(text).cleaned_response == ""


def test_a_case_study_link_for_an_unknown_slug_removes_the_sentence():
    text = "Read about it [here](https://www.acme.example/customers/globex). Next."
    result = audit(text)
    assert result.cleaned_response == "Next."
    assert result.claims[0]["reasons"] == ["UNKNOWN_COMPANY"]


@pytest.mark.parametrize(
    "text",
    [
        "Revenue grew 37% last year across the industry.",
        "In 2023, search usage grew 40%.",
        "Acme customers typically see 30% more conversions.",
        "Prices start at $49 per month on the Pro plan.",
        "Acme was founded in 2012 and has 300 employees.",
        "Our API answers in 20 ms for 99% of queries.",
        "The Pro plan costs $99/month.",
        "Most retailers see a 3x lift in Q4.",
        "Use `Globex grew 300%` as a test string.",
    ],
)
def test_false_positive_traps_are_not_claims(text):
    result = audit(text)
    assert result.cleaned_response == text, result.claims
    assert result.annotations == []


@pytest.mark.parametrize(
    "text",
    [
        "Zalando doubled revenue, up $4M after launch.",
        "Shoppers at Globex converted 10x more.",
        "With Acme, Initech saw a $1.2B pipeline.",
    ],
)
def test_unknown_companies_with_metrics_are_claims(text):
    assert audit(text).cleaned_response == ""


def test_claims_inside_fenced_code_are_ignored():
    text = "```\nGlobex grew 300%.\n```"
    assert audit(text).cleaned_response == text


def test_grounding_off_keeps_claims():
    settings = make_settings(grounding=False)
    text = "Globex grew 300%."
    assert audit(text, settings=settings).cleaned_response == text


def test_trace_lines_wrap_each_paragraph():
    result = audit("One.\n\nTwo [x](https://evil.test/).")
    assert result.trace == [
        "[AUDIT] ══ paragraph in ══",
        "[AUDIT] ══ paragraph out ══",
        "[AUDIT] ══ paragraph in ══",
        "[AUDIT] STRIP | LINK_HOST_NOT_ALLOWED | https://evil.test/",
        "[AUDIT] ══ paragraph out ══",
    ]
