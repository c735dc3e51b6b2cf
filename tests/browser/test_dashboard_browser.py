"""The dashboard in real headless Chromium against a daphne server."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tests.factories import annotation, fabricated_claim_audit, make_audit, result

pytestmark = pytest.mark.browser

SHOTS = "/tmp/dashboard-{}.png"


@pytest.fixture
def audits(staff_user):
    flagged = fabricated_claim_audit(results=[result("tone", 0.1)])
    mild = make_audit(
        user_input="How do I set up faceting?",
        response="Everyone agrees facets are great.",
        results=[
            result(
                "bias",
                0.45,
                [
                    annotation(
                        "false_consensus", "warning", evidence="Everyone agrees", start=0, end=15
                    )
                ],
            )
        ],
        created_at=timezone.now() - timedelta(hours=2),
    )
    clean = make_audit(
        user_input="Is there a free tier?",
        response="Yes, up to 10,000 searches a month.",
        results=[result("redflag", 0.0), result("tone", 0.05)],
        created_at=timezone.now() - timedelta(days=2),
    )
    return flagged, mild, clean


def test_log_in_filter_open_and_inspect(page, login, staff_user, audits, server_url):
    flagged, mild, clean = audits
    login(page)
    assert page.url.rstrip("/") == server_url
    for run in audits:
        assert page.locator(f"#audit-card-{run.pk}").is_visible()
    page.screenshot(path=SHOTS.format("list"), full_page=True)

    # Filtering goes through htmx: no reload, and the URL becomes bookmarkable.
    page.evaluate("window.__same_page = true")
    page.click("#filters-more > summary")  # the folded filters
    page.select_option("#filter-severity", "critical")
    page.wait_for_url(re.compile(r"severity=critical"))
    page.locator(f"#audit-card-{mild.pk}").wait_for(state="detached")
    assert page.locator(f"#audit-card-{flagged.pk}").is_visible()
    assert page.locator(f"#audit-card-{clean.pk}").count() == 0
    assert page.evaluate("window.__same_page") is True

    # The bookmarked URL renders the same filtered list on its own.
    page.goto(page.url)
    assert page.locator("#filter-severity").input_value() == "critical"
    assert page.locator(".audit-card").count() == 1

    page.click(f"#audit-card-{flagged.pk} .card-link")
    page.wait_for_url(f"**/audits/{flagged.pk}/")
    grounding = flagged.results.get(analyzer_id="grounding")
    card = page.locator(f"#result-{grounding.pk}")
    assert card.is_visible()
    assert "Al-Futtaim is not a known customer." in card.inner_text()
    mark = page.locator("mark.hl-critical[data-ann]")
    assert mark.inner_text() == "Al-Futtaim achieved +206% revenue."
    # Hovering a highlight lights up its annotation.
    mark.hover()
    ann = page.locator(f"#result-{grounding.pk} .annotation")
    assert "is-linked" in ann.get_attribute("class")
    assert page.locator(".diff del").first.inner_text().startswith("Al-Futtaim")
    # The other result is collapsed until opened.
    tone = flagged.results.get(analyzer_id="tone")
    assert not page.locator(f"#result-{tone.pk}").is_visible()
    page.click(f"#other-results-{flagged.pk} summary")
    assert page.locator(f"#result-{tone.pk}").is_visible()
    page.screenshot(path=SHOTS.format("detail"), full_page=True)
    assert page.errors == []


def test_threshold_slider_previews_and_saves(page, login, staff_user, audits):
    from analyzers.config_store import load_config

    login(page, next_url="/tuning/")
    page.wait_for_selector("#surfacing-count")
    count = page.locator("#surfacing-count")
    assert count.inner_text() == "2"  # 0.9 and 0.45 reach the default 0.3

    page.locator("#threshold-slider").fill("0.6")
    expect(count).to_have_text("1")
    assert page.locator("#threshold-value").inner_text() == "0.60"
    assert "-1" in page.locator("#surfacing-delta").inner_text()

    page.locator("#threshold-slider").fill("0.95")
    expect(count).to_have_text("0")
    page.locator("#threshold-slider").fill("0.4")
    expect(count).to_have_text("2")
    page.screenshot(path=SHOTS.format("tuning"), full_page=True)

    page.click("#save-threshold")
    page.wait_for_selector(".message")
    assert "Threshold saved: 0.40" in page.locator(".message").inner_text()
    assert load_config().threshold == pytest.approx(0.4)
    assert page.errors == []


def test_trends_page_draws_its_charts(page, login, staff_user, audits):
    login(page, next_url="/trends/")
    page.wait_for_selector("canvas[data-chart='histogram']")
    # (Polled with evaluate: wait_for_function needs eval, which the CSP forbids.)
    for _ in range(50):
        if page.evaluate("window.Chart ? Object.keys(Chart.instances).length : 0") >= 6:
            break
        page.wait_for_timeout(100)
    assert page.evaluate("Object.keys(Chart.instances).length") == 6
    page.screenshot(path=SHOTS.format("trends"), full_page=True)
    assert page.errors == []


HOSTILE = [
    '<script>window.__xss = "script"</script>',
    '<img src="http://evil.example/x.png" onerror="window.__xss = \'img\'">',
    '<svg onload="window.__xss = \'svg\'"><circle r="5"/></svg>',
    "[x](javascript:window.__xss='md')",
    '<div hx-get="/?xss=htmx" hx-trigger="load">hx</div>',
    '<a href="javascript:window.__xss=\'a\'" hx-post="https://evil.example/p" hx-trigger="load">a</a>',
]


def test_hostile_model_text_is_inert(page, login, staff_user, server_url):
    text = "\n".join(HOSTILE)
    run = make_audit(
        user_input=text,
        response=text,
        cleaned_response="cleaned\n" + text,
        results=[
            result(
                "redflag",
                0.9,
                [
                    annotation(
                        "EXCEPTION",
                        "critical",
                        label=HOSTILE[1],
                        description=HOSTILE[4],
                        evidence=HOSTILE[2],
                        start=text.index(HOSTILE[2]),
                        end=text.index(HOSTILE[2]) + len(HOSTILE[2]),
                    )
                ],
            )
        ],
        sources=[
            {
                "title": HOSTILE[0],
                "url": "javascript:window.__xss='src'",
                "text": HOSTILE[3],
                "company": HOSTILE[5],
            }
        ],
        links=[
            {
                "url": "javascript:window.__xss='link'",
                "label": HOSTILE[1],
                "decision": "strip",
                "reason": HOSTILE[4],
                "http_status": None,
                "healthy": None,
            }
        ],
        trace=HOSTILE,
        metadata={"x": HOSTILE[0]},
    )
    dialogs, foreign, probes = [], [], []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    origin = urlsplit(server_url).netloc

    def on_request(request):
        if urlsplit(request.url).netloc != origin:
            foreign.append(request.url)
        if "xss" in request.url:
            probes.append(request.url)

    page.on("request", on_request)
    login(page)
    for url in ("/", f"/audits/{run.pk}/", "/tuning/"):
        page.goto(url)
        page.wait_for_load_state("networkidle")
        # Click every link in model text areas and hover the highlights: still nothing runs.
        for mark in page.locator("mark[data-ann]").all():
            mark.hover()
        page.wait_for_timeout(300)
        assert page.evaluate("window.__xss") is None, url
        assert page.locator("[hx-disable] script, [hx-disable] img, [hx-disable] svg").count() == 0
        assert "<script>window.__xss" in page.locator("main").inner_text()
    assert dialogs == []
    assert foreign == []
    assert probes == []
    assert page.locator("a[href^='javascript:']").count() == 0
