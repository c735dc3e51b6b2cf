"""The detail page of a huge audit shows a bounded page: counts per type, one page of
findings at a time, the first trace lines and links, the first changes of the diff."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st

from audits.cards import cards, highlight
from audits.templatetags.audit_ui import pretty_json
from tests.factories import annotation, make_audit, result


@pytest.fixture
def staff_client(staff_user) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


@pytest.fixture
def huge(db):
    text = "Namedrop: Globex. " * 400
    leaks = [
        annotation(
            "PROMPT_LEAK", label=f"leak {i}", evidence="Namedrop:", start=18 * i, end=18 * i + 9
        )
        for i in range(300)
    ]
    claims = [annotation("UNGROUNDED_CUSTOMER_CLAIM", label=f"claim {i}") for i in range(20)]
    return make_audit(
        response=text,
        cleaned_response="",
        results=[
            result("prompt_leak", 0.9, leaks + claims, supplementary={"items": list(range(1000))}),
            result("tone", 0.0),
        ],
        trace=[f"[AUDIT] line {i}" for i in range(600)],
        links=[
            {
                "url": f"https://acme.example/{i}",
                "label": "x",
                "decision": "keep",
                "reason": None,
                "http_status": 200,
                "healthy": True,
            }
            for i in range(600)
        ],
    )


def findings_on(html: str) -> list[str]:
    return re.findall(r"<strong>((?:leak|claim) \d+)</strong>", html)


def test_a_huge_audit_shows_counts_per_type_and_the_first_page_of_findings(staff_client, huge):
    html = staff_client.get(reverse("audits:detail", args=[huge.pk])).content.decode()
    per_page = cards.FINDINGS_PER_PAGE
    assert findings_on(html) == [f"leak {i}" for i in range(per_page)]
    assert f"Findings 1–{per_page} of 320" in html
    assert (
        "<code>PROMPT_LEAK</code> 300" in html
        and "<code>UNGROUNDED_CUSTOMER_CLAIM</code> 20" in html
    )
    assert 'href="?page=2"' in html and "?page=0" not in html
    # Only the findings shown are highlighted in the response.
    assert html.count('<mark class="hl hl-warning" data-ann=') == per_page


def test_the_next_pages_show_the_next_findings_and_the_last_has_no_next(staff_client, huge):
    url = reverse("audits:detail", args=[huge.pk])
    per_page = cards.FINDINGS_PER_PAGE
    second = staff_client.get(url, {"page": 2}).content.decode()
    assert findings_on(second) == [f"leak {i}" for i in range(per_page, 2 * per_page)]
    assert 'href="?page=1"' in second and 'href="?page=3"' in second
    last_page = -(-320 // per_page)
    last = staff_client.get(url, {"page": last_page}).content.decode()
    assert findings_on(last)[-1] == "claim 19"
    assert f'href="?page={last_page + 1}"' not in last
    for bad in ("0", "-1", "x", "99999999999"):
        assert staff_client.get(url, {"page": bad}).status_code == 200


def test_trace_lines_links_and_details_json_are_cut_with_their_totals(staff_client, huge):
    html = staff_client.get(reverse("audits:detail", args=[huge.pk])).content.decode()
    rows = cards.DETAIL_ROWS
    assert f"The first {rows} of 600 trace lines" in html
    assert f"[AUDIT] line {rows - 1}<" in html and f"[AUDIT] line {rows}<" not in html
    assert f"The first {rows} of 600 links" in html
    assert html.count('href="https://acme.example/') == rows
    assert "… 900 more" in html


def test_pretty_json_bounds_lists_objects_strings_and_depth():
    deep: dict = {}
    node = deep
    for _ in range(50):
        node["x"] = {}
        node = node["x"]
    text = pretty_json(
        {
            "list": list(range(500)),
            "obj": {str(i): i for i in range(300)},
            "s": "a" * 20_000,
            "deep": deep,
        }
    )
    assert "… 400 more" in text and '"200 more"' in text
    assert "(15000 more characters)" in text
    assert len(text) < 20_000


def test_the_diff_marks_the_first_changes_and_shows_the_rest_as_is():
    changes = highlight.MAX_DIFF_CHANGES + 500
    original = "".join(f"keep {i} drop{i}\n" for i in range(changes))
    cleaned = "".join(f"keep {i}\n" for i in range(changes))
    diff = highlight.side_by_side(original, cleaned)
    assert diff.changed and diff.truncated
    assert "".join(p.text for p in diff.original) == original
    assert "".join(p.text for p in diff.cleaned) == cleaned
    removed = [p.text for p in diff.original if p.kind == "removed"]
    assert len(removed) == highlight.MAX_DIFF_CHANGES
    assert diff.original[-1].kind == "equal" and f"drop{changes - 1}" in diff.original[-1].text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 30), st.integers(1, 10), st.sampled_from(["info", "warning", "critical"])
        ),
        max_size=12,
    )
)
def test_highlight_segments_by_sweep_match_the_definition(spans):
    text = "abcdefghijklmnopqrstuvwxyz0123456789"
    pairs = [
        (f"a{i}", SimpleNamespace(start=s, end=min(s + n, len(text)), evidence=None, severity=sev))
        for i, (s, n, sev) in enumerate(spans)
    ]
    segments = highlight.highlight_segments(text, pairs)
    assert "".join(seg.text for seg in segments) == text
    pos = 0
    for seg in segments:
        for offset in range(pos, pos + len(seg.text)):
            covering = tuple(i for i, a in pairs if a.start <= offset < a.end)
            assert seg.ann_ids == covering
        pos += len(seg.text)
