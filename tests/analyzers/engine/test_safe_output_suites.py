"""Other projects' public URL-filter suites, ported as facts and run against the cleaned text.

For every case: whatever markdown-it-py (commonmark + linkify + html) would render from the
cleaned text as a link or image goes to an allowed http(s) host (or mails an allowed
domain), and every such URL of the original that does not is annotated.

Sources (each case names its own):
- openai/openai-guardrails-python `tests/unit/checks/test_urls.py` (MIT), every input of
  its tests with that test's allow-list: tests/data/openai_guardrails_url_cases.json;
- WHATWG `urltestdata.json` (web-platform-tests, BSD-3-Clause): tests/data/urltestdata.json;
- CPython `Lib/test/test_urlparse.py` (PSF License): its http(s) cases, listed below.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rendering import problems, rendered_destinations, url_verdict

from analyzers.engine.guardrails.settings import GuardrailSettings
from analyzers.engine.guardrails.stream import audit_text

DATA = Path(__file__).resolve().parents[2] / "data"
OPENAI = json.loads((DATA / "openai_guardrails_url_cases.json").read_text(encoding="utf-8"))
WHATWG = [
    c
    for c in json.loads((DATA / "urltestdata.json").read_text(encoding="utf-8"))
    if isinstance(c, dict) and isinstance(c.get("input"), str)
]
LINK_CODES = {"LINK_HOST_NOT_ALLOWED", "LINK_UNSAFE_SCHEME", "HTML_UNSAFE_MARKUP"}
ALLOWED = ("acme.example", "www.acme.example", "docs.acme.example")

_settings: dict[tuple[str, ...], GuardrailSettings] = {}


def settings_for(hosts, bare_urls="strip") -> GuardrailSettings:
    key = (*hosts, bare_urls)
    if key not in _settings:
        _settings[key] = GuardrailSettings.build(
            allowed_hosts=hosts, bare_urls=bare_urls, grounding=False, prompt_leak=False
        )
    return _settings[key]


def check(text: str, hosts: tuple[str, ...], bare_urls: str = "strip") -> None:
    result = audit_text(text, settings_for(hosts, bare_urls))
    assert problems(result.cleaned_response, hosts) == [], result.cleaned_response
    bad_before = [u for u in rendered_destinations(text) if url_verdict(u, hosts)]
    codes = {a.type for _, a in result.annotations}
    if bad_before:
        assert codes & LINK_CODES, f"{bad_before} not annotated"
    for _, a in result.annotations:
        assert text[a.start : a.end] == a.evidence


def test_the_ported_suites_are_all_there():
    assert len(OPENAI["cases"]) > 600
    assert len(WHATWG) > 800


@pytest.mark.parametrize("bare_urls", ["strip", "defang"])
@pytest.mark.parametrize(
    ("text", "hosts", "test"), OPENAI["cases"], ids=[c[2][:50] for c in OPENAI["cases"]]
)
def test_openai_guardrails_url_cases(text, hosts, test, bare_urls):
    check(text, tuple(hosts), bare_urls)
    check(f"See {text} for details.", tuple(hosts), bare_urls)


@pytest.mark.parametrize("case", WHATWG, ids=lambda c: repr(c["input"])[:50])
def test_whatwg_inputs_as_links_bare_urls_and_anchors(case):
    url = case["input"]
    for text in (
        url,
        f"See {url} now.",
        f"[docs]({url})",
        f"![img]({url})",
        f"<{url}>",
        f'<a href="{url}">docs</a>',
        f"<img src='{url}'>",
    ):
        check(text, ALLOWED)


CPYTHON = [  # CPython Lib/test/test_urlparse.py (PSF License), http(s) cases
    "http://www.python.org",
    "http://www.python.org#abc",
    "http://www.python.org?q=abc",
    "http://a/b/c/d;p?q#f",
    "https://www.python.org",
    "http://www.python.org:80/",
    "http://User:Pass@www.python.org:080/doc/?query=yes#frag",
    "http://User@example.com:Pass@www.python.org:080/doc/?query=yes#frag",
    "http://[::1]:5432/foo/",
    "http://[dead:beef::1]:5432/foo/",
    "http://[::12.34.56.78]:5432/foo/",
    "http://[::ffff:12.34.56.78]:5432/foo/",
    "http://Test.python.org:5432/foo/",
    "http://12.34.56.78:5432/foo/",
    "http://www.python.org:65535/",
    "http://a:b@www.python.org/",
    "http://\u2100.com",
    "https://www.python.org/\u2100",
    "http://www.python.org\u3002com/",
    "https://pyth\u00f6n.org/",
    "http://www.python.org\\@evil.test/",
    "http://acme.example@evil.test/",
    "http://0x7f.1/",
    "http://2130706433/",
    "http://[::1]",
    "HTTP://WWW.PYTHON.ORG/doc/#frag",
    "//www.python.org/path",
]


@pytest.mark.parametrize("url", CPYTHON)
def test_cpython_urlparse_cases(url):
    for text in (url, f"Read {url}.", f"[x]({url})", f'<a href="{url}">x</a>'):
        check(text, ALLOWED)


# The href markdown-it writes (its `normalizeLink`: percent-encoding, punycode) read as a
# browser reads it: the verdict is the rendering's (see `check`), whatever the text shows.
RENDERER_READINGS = [
    "https://acme.example\\@evil.example/x",
    "https://acme.example\\\\@evil.example/x",
    "https://acme.example%5C@evil.example/x",
    "https://acme.example\\%40evil.example/x",
    "https://acme.example\t@evil.example/x",
    "https://acme.example\n@evil.example/x",
    "https://acme.example|@evil.example/x",
    "https://acme.example^@evil.example/x",
    "https://acme.example`@evil.example/x",
    "https://acme.example{@evil.example/x",
    "https://acme.example}@evil.example/x",
    "https://acme.example @evil.example/x",
    "https://\uff41\uff43\uff4d\uff45.example\\@evil.example/x",
    "https://acme.example\u3002evil.example/",
    "https://\u00e9vil.example\\@acme.example/",
    "https://acme.example&#92;@evil.example/x",
    "//acme.example\\@evil.example/x",
    "www.acme.example\\@evil.example/x",
    "acme.example\\@evil.example/x",
    "https://docs.acme.example/?labels=alpha,evil.example",
    "https://acme.example,evil.example/x",
    "path.https://evil.example/x",
]


@pytest.mark.parametrize("bare_urls", ["strip", "defang"])
@pytest.mark.parametrize("url", RENDERER_READINGS)
def test_urls_are_judged_as_the_renderer_writes_their_href(url, bare_urls):
    for text in (
        url,
        f"See {url} now.",
        f"<{url}>",
        f"[docs]({url})",
        f"[docs](<{url}>)",
        f"![img]({url})",
        f"[ref]: {url}\n\n[docs][ref]",
    ):
        check(text, ALLOWED, bare_urls)


def _allowed_bare_links_lost() -> tuple[int, int]:
    """(allowed links, of those lost) over the suites' bare forms whose every rendered link
    goes to an allowed host."""
    forms = [(t, tuple(h)) for t, h, _ in OPENAI["cases"]]
    forms += [(f"See {t} for details.", tuple(h)) for t, h, _ in OPENAI["cases"]]
    forms += [(c["input"], ALLOWED) for c in WHATWG] + [(u, ALLOWED) for u in CPYTHON]
    total = lost = 0
    for text, hosts in forms:
        before = rendered_destinations(text)
        if not before or any(url_verdict(u, hosts) for u in before):
            continue
        after = rendered_destinations(audit_text(text, settings_for(hosts)).cleaned_response)
        for url in before:
            total += 1
            if url in after:
                after.remove(url)
            else:
                lost += 1
    return total, lost


def test_allowed_bare_links_of_the_suites_are_kept_as_linkify_reads_them():
    total, lost = _allowed_bare_links_lost()
    assert total > 600
    # the rest: runs with a scheme and no host (`https://,`), which the renderer does not
    # link but the scan refuses
    assert lost <= 30, (total, lost)
