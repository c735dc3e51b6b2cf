"""Issue 13's rough edges in real Chromium, at a phone (390×844) and a laptop (1366×900):
nothing scrolls sideways, the filters fold, chips and URLs wrap, tables fit, one date
format, the Export menu downloads the filter, the admin form has one field per setting."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from audits.models import AuditRun
from audits.store.verdicts import record_review
from tests.factories import annotation, make_audit, result

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 900}
LONG_URL = "https://random-blog.example.org/" + "a-very-long-path-segment/" * 6 + "?q=1"

# Elements that overflow their box horizontally (cut or scrolling), but not the ones that
# cut one line on purpose with an ellipsis (titles, excerpts) or hide for screen readers.
OVERFLOWING = """() => Array.from(document.querySelectorAll('main *'))
  .filter(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
  .filter(e => !e.closest('.visually-hidden, .excerpt, .card-title, thead'))
  .filter(e => !e.closest('details:not([open]) > :not(summary)'))  // folded: not shown
  .map(e => e.tagName + '.' + e.className + ' ' + e.scrollWidth + '>' + e.clientWidth + ': '
       + (e.textContent || '').trim().slice(0, 40))"""


@pytest.fixture
def audits(staff_user):
    now = timezone.now()
    claim = annotation(
        "UNGROUNDED_CUSTOMER_CLAIM", "critical", evidence="Al-Futtaim", start=0, end=10
    )
    flagged = make_audit(
        user_input="Which retailers use Acme?",
        response="Al-Futtaim achieved +206% revenue. See the guide.",
        results=[
            result("grounding", 1.0, [claim, dict(claim)]),
            result(
                "links",
                0.6,
                [
                    annotation("LINK_TECH_DOC_NOT_ALLOWED"),
                    annotation("LINK_UNSAFE_SCHEME", "critical"),
                ],
            ),
        ],
        links=[
            {
                "url": "javascript:alert(document.cookie)",
                "label": "here",
                "decision": "strip",
                "reason": "LINK_UNSAFE_SCHEME",
                "http_status": None,
                "healthy": None,
            },
            {
                "url": LONG_URL,
                "label": "this guide",
                "decision": "strip",
                "reason": "LINK_HOST_NOT_ALLOWED",
                "http_status": None,
                "healthy": None,
            },
        ],
        created_at=now - timedelta(minutes=5),
    )
    quiet = make_audit(
        user_input="Is there a free tier?",
        response="Yes.",
        results=[result("tone", 0.0)],
        created_at=now - timedelta(days=3),
    )
    streaming = AuditRun.objects.create(
        user_input="Still streaming?", response="", status=AuditRun.Status.RUNNING
    )
    return flagged, quiet, streaming


def _new_page(browser, server_url, viewport):
    context = browser.new_context(base_url=server_url, viewport=viewport, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    return page


def _sideways(page) -> tuple[int, int]:
    return page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")


def test_the_list_at_390_folds_the_filters_and_nothing_scrolls_sideways(
    browser, server_url, login, audits
):
    flagged, quiet, streaming = audits
    page = _new_page(browser, server_url, PHONE)
    login(page)
    scroll_width, inner_width = _sideways(page)
    assert scroll_width <= inner_width
    # The filters are folded to one line: the first audit is on the first screen.
    assert not page.locator("#filters-panel").is_visible()
    first_card = page.locator(".audit-card").first.bounding_box()
    assert first_card["y"] < PHONE["height"] / 2
    toggle = page.locator("#filters-more > summary")
    toggle.click()
    expect(page.locator("#filters-panel")).to_be_visible()
    toggle.click()
    expect(page.locator("#filters-panel")).to_be_hidden()
    # Chips wrap instead of being cut; nothing overflows its box.
    assert page.evaluate(OVERFLOWING) == []
    expect(page.locator(f"#audit-card-{streaming.pk} .excerpt")).to_have_text("streaming…")
    assert "(empty response)" not in page.content()
    assert page.errors == []


def test_the_detail_page_at_390_wraps_urls_and_never_scrolls_sideways(
    browser, server_url, login, audits
):
    flagged, quiet, streaming = audits
    page = _new_page(browser, server_url, PHONE)
    login(page, next_url=f"/audits/{flagged.pk}/")
    scroll_width, inner_width = _sideways(page)
    assert scroll_width <= inner_width
    overflowing = page.evaluate(OVERFLOWING)
    assert overflowing == [], "\n".join(overflowing)
    url_cell = page.locator("td.url").first.bounding_box()
    assert url_cell["width"] > 150  # not one letter per line
    assert url_cell["height"] < 100
    assert page.errors == []


def test_trends_tables_fit_at_1366(browser, server_url, login, staff_user):
    now = timezone.now()
    for i, kind in enumerate(
        [
            "UNGROUNDED_CUSTOMER_CLAIM",
            "LINK_TECH_DOC_NOT_ALLOWED",
            "HTML_ANCHOR_CONVERTED",
            "LINK_LABEL_SUFFIX_NORMALIZED",
        ]
    ):
        run = make_audit(
            results=[result("links", 0.9, [annotation(kind)])],
            created_at=now - timedelta(days=i + 1),
        )
        record_review(audit_id=run.pk, verdict="confirmed", user=staff_user)
    for viewport in (LAPTOP, PHONE):
        page = _new_page(browser, server_url, viewport)
        login(page, next_url="/trends/")
        expect(page.locator("#precision-by-type")).to_be_visible()
        scroll_width, inner_width = _sideways(page)
        assert scroll_width <= inner_width, viewport
        assert page.evaluate(OVERFLOWING) == [], viewport
        page.context.close()


def test_one_date_format_relative_with_the_absolute_time_on_hover(
    browser, server_url, login, audits
):
    flagged, quiet, streaming = audits
    page = _new_page(browser, server_url, LAPTOP)
    login(page, next_url=f"/audits/{flagged.pk}/")
    stamp = page.locator("time").first
    assert re.fullmatch(r"\d+ minutes? ago", stamp.inner_text())
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", stamp.get_attribute("title"))
    assert stamp.get_attribute("datetime").startswith(str(flagged.created_at.year))
    page.goto("/")
    texts = page.locator("main time").all_inner_texts()
    # past a day, the date (script and server alike)
    assert texts and all(
        re.fullmatch(r"just now|\d+ (minute|hour)s? ago|\d{4}-\d\d-\d\d", t) for t in texts
    )
    assert quiet.created_at.astimezone(UTC).strftime("%Y-%m-%d") in texts


def test_the_export_menu_downloads_the_filtered_audits(browser, server_url, login, audits):
    flagged, quiet, streaming = audits
    page = _new_page(browser, server_url, LAPTOP)
    login(page, next_url="/?surfaced=1")
    page.locator("#export-menu summary").click()
    with page.expect_download() as info:
        page.locator("#export-csv").click()
    download = info.value
    assert download.suggested_filename == "audits.csv"
    rows = list(csv.DictReader(io.StringIO(Path(download.path()).read_text(encoding="utf-8"))))
    assert [r["id"] for r in rows] == [str(flagged.pk)]
    expect(page.locator("nav a[href='/api/docs']")).to_be_visible()


def test_the_admin_analyzer_form_shows_its_settings_and_threshold(
    browser, server_url, login, staff_user
):
    from analyzers.models import AnalyzerConfig

    config = AnalyzerConfig.objects.create(analyzer_id="redflag", settings={"max_chars": 100})
    page = _new_page(browser, server_url, LAPTOP)
    login(page, next_url=f"/admin/analyzers/analyzerconfig/{config.pk}/change/")
    expect(page.locator("input[name=threshold]")).to_be_visible()
    expect(page.locator("input[name=setting__max_chars]")).to_have_value("100")
    expect(page.locator("input[name=setting__max_tokens]")).to_have_value("750")
    page.locator("input[name=threshold]").fill("0.6")
    page.locator("input[name=setting__max_chars]").fill("0")  # ge=1
    page.locator("input[name=_continue]").click()
    expect(page.locator(".errorlist").first).to_be_visible()
    page.locator("input[name=setting__max_chars]").fill("250")
    page.locator("input[name=_continue]").click()
    expect(page.locator(".messagelist .success")).to_be_visible()
    config.refresh_from_db()
    assert config.settings == {"max_chars": 250, "threshold": 0.6}
