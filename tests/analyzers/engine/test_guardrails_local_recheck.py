"""The re-check after bare-URL removals looks only at the runs they touched when the text
holds no code, link or markup: it must give what a re-scan of the whole text gives."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.engine.guardrails import links
from analyzers.engine.guardrails.settings import GuardrailSettings
from analyzers.engine.guardrails.stream import audit_text

STRIP = GuardrailSettings.build(allowed_hosts=("acme.example", "www.acme.example"))
DEFANG = GuardrailSettings.build(allowed_hosts=("acme.example",), bare_urls="defang")
PIECES = st.sampled_from(
    [
        "https://evil.example/x",
        "https://acme.example/a",
        "www.evil.com",
        "evil.com",
        "a.b",
        "x@evil.com",
        "//evil.test",
        "http:",
        "//",
        "www.",
        ".com",
        "(",
        ")",
        ",",
        ".",
        " ",
        "\n",
        "acme.example",
        "h",
        "ttps://evil.example",
        "setup.py",
        "http://0x7f.1/",
    ]
)
texts = st.lists(PIECES, min_size=1, max_size=14).map("".join)


def _results(text, settings_):
    r = audit_text(text, settings_)
    return r.cleaned_response, [a for _, a in r.annotations], r.trace, r.links


@settings(max_examples=600, deadline=None, derandomize=True)
@given(text=texts, defang=st.booleans())
def test_local_recheck_equals_a_full_rescan(text, defang, monkeypatch_module):
    settings_ = DEFANG if defang else STRIP
    calls.clear()
    fast = _results(text, settings_)
    monkeypatch_module.setattr(links, "_STRUCTURE", re.compile(""))  # always "structure"
    try:
        full = _results(text, settings_)
    finally:
        monkeypatch_module.undo()
    assert fast == full


calls: list[int] = []


@pytest.mark.python_guardrails
def test_the_local_recheck_runs_in_those_examples(monkeypatch):
    real = links._recheck_near_edits
    monkeypatch.setattr(links, "_recheck_near_edits", lambda *a: calls.append(1) or real(*a))
    audit_text("evil.com, https://evil.example/x and acme.example", STRIP)
    assert calls


def test_a_removal_that_joins_a_new_url_is_judged_again():
    # removing the first URL joins "https:" and "//evil.test/x" around it
    text = "https:https://evil.example///evil.test/x and www.acme.example/ok"
    cleaned = audit_text(text, STRIP).cleaned_response
    assert "evil" not in cleaned
    assert "www.acme.example/ok" in cleaned


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()
