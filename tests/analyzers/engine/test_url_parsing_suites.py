"""The host the link rules judge is the host a browser would contact.

Cases ported as facts from public suites:
- WHATWG URL Standard, web-platform-tests `url/resources/urltestdata.json` (BSD-3-Clause;
  vendored as tests/data/urltestdata.json with its licence);
- CPython `Lib/test/test_urlparse.py` (PSF License): the cases with http(s) hosts, written
  out below with the host a browser reads (which is where urllib and the WHATWG differ).
"""

from __future__ import annotations

import json
from pathlib import Path

import ada_url
import pytest

from analyzers.engine.guardrails.syntax.urls import host_allowed, parse_http_url

DATA = Path(__file__).resolve().parents[2] / "data" / "urltestdata.json"


def _whatwg_cases() -> list[dict]:
    # read at collection: a missing file fails the run loudly (no skip)
    return [c for c in json.loads(DATA.read_text(encoding="utf-8")) if isinstance(c, dict)]


WHATWG = _whatwg_cases()


def _absolute(case: dict) -> bool:
    """The input means the same with or without its base (so a link to it does too)."""
    try:
        alone = ada_url.parse_url(case["input"], attributes=("href",))["href"]
    except ValueError:
        return False
    return "href" in case and alone == case["href"]


HTTP_CASES = [
    c
    for c in WHATWG
    if c.get("protocol") in ("http:", "https:") and c.get("hostname") and _absolute(c)
]


def test_the_suite_is_there_and_large():
    assert len(WHATWG) > 800
    assert len(HTTP_CASES) > 150


@pytest.mark.parametrize("case", HTTP_CASES, ids=lambda c: repr(c["input"])[:60])
def test_the_judged_host_is_the_whatwg_host(case):
    canon = parse_http_url(case["input"])
    assert canon.host == case["hostname"]
    if canon.url is not None:
        assert canon.url == case["href"]
        assert canon.port == (int(case["port"]) if case["port"] else None)


@pytest.mark.parametrize(
    "case",
    [c for c in WHATWG if c.get("failure") and c.get("base") in (None, "about:blank")],
    ids=lambda c: repr(c["input"])[:60],
)
def test_a_url_the_whatwg_parser_refuses_is_never_usable(case):
    assert parse_http_url(case["input"]).url is None


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in WHATWG
        if "protocol" in c and c["protocol"] not in ("http:", "https:") and _absolute(c)
    ],
    ids=lambda c: repr(c["input"])[:60],
)
def test_every_other_scheme_is_unsafe(case):
    canon = parse_http_url(case["input"])
    assert canon.url is None and canon.problem is not None


@pytest.mark.parametrize("case", HTTP_CASES, ids=lambda c: repr(c["input"])[:60])
def test_a_link_to_a_whatwg_host_that_is_not_allowed_is_refused(case):
    canon = parse_http_url(case["input"])
    allowed = ("acme.example",)
    assert not (
        canon.url is not None
        and not canon.problem
        and host_allowed(canon.host, allowed)
        and case["hostname"] != "acme.example"
    )


# CPython Lib/test/test_urlparse.py (PSF License): http(s) URLs of its cases, with the host a
# browser contacts. urllib keeps what the WHATWG parser normalises (case, IDNA, numbers).
CPYTHON = [
    ("http://www.python.org", "www.python.org"),
    ("http://www.python.org#abc", "www.python.org"),
    ("http://www.python.org?q=abc", "www.python.org"),
    ("http://www.python.org/#abc", "www.python.org"),
    ("http://a/b/c/d;p?q#f", "a"),
    ("https://www.python.org", "www.python.org"),
    ("http://www.python.org:80/", "www.python.org"),
    ("http://User:Pass@www.python.org:080/doc/?query=yes#frag", "www.python.org"),
    ("http://User@example.com:Pass@www.python.org:080/doc/?query=yes#frag", "www.python.org"),
    ("http://[::1]:5432/foo/", "[::1]"),
    ("http://[dead:beef::1]:5432/foo/", "[dead:beef::1]"),
    ("http://[dead:beef::]:5432/foo/", "[dead:beef::]"),
    (
        "http://[dead:beef:cafe:5417:affe:8FA3:deaf:feed]:5432/foo/",
        "[dead:beef:cafe:5417:affe:8fa3:deaf:feed]",
    ),
    ("http://[::12.34.56.78]:5432/foo/", "[::c22:384e]"),
    ("http://[::ffff:12.34.56.78]:5432/foo/", "[::ffff:c22:384e]"),
    ("http://Test.python.org:5432/foo/", "test.python.org"),
    ("http://12.34.56.78:5432/foo/", "12.34.56.78"),
    ("http://[::1]/foo/", "[::1]"),
    ("http://[::12.34.56.78]/foo/", "[::c22:384e]"),
    ("http://Test.python.org/foo/", "test.python.org"),
    ("http://12.34.56.78/foo/", "12.34.56.78"),
    ("http://www.python.org:65535/", "www.python.org"),
    ("http://www.python.org:0/", "www.python.org"),
    ("http://a:b@www.python.org/", "www.python.org"),
    ("http://a.b.c.d@www.python.org/", "www.python.org"),
    ("http://\u2100.com", None),  # IDNA maps it to "a/c": a forbidden host, refused
    ("https://www.python.org/\u2100", "www.python.org"),
    ("http://www.python.org\u3002com/", "www.python.org.com"),  # ideographic full stop
    ("https://xn--pythn-mua.org/", "xn--pythn-mua.org"),
    ("https://pyth\u00f6n.org/", "xn--pythn-mua.org"),
    ("http://www.python.org\\@evil.test/", "www.python.org"),
]


@pytest.mark.parametrize(("url", "host"), CPYTHON)
def test_cpython_urlparse_cases_judge_the_browser_host(url, host):
    canon = parse_http_url(url)  # the URL itself, not a markdown destination
    if host is None:
        assert canon.url is None
        return
    assert canon.host == host
