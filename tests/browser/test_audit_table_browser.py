"""The audit table in headless Chromium at 1366x900: rows visible, toggle remembered,
sorting by the highest score, and the keyboard (j/k, Enter, verdict keys)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from audits.models import AuditRun, Review
from tests.factories import annotation, make_audit, result

pytestmark = pytest.mark.browser

VISIBLE_ROWS = """() => Array.from(document.querySelectorAll('#audit-table-rows tr.audit-row'))
  .filter(r => { const b = r.getBoundingClientRect();
                 return b.height > 0 && b.top >= 0 && b.bottom <= window.innerHeight; }).length"""


@pytest.fixture
def audits(staff_user) -> list[AuditRun]:
    """55 audits (more than a page of 50), newest first, with scores in no time order; long inputs, several chips."""
    now = timezone.now()
    runs = []
    for i in range(55):
        score = round(((i * 37) % 100) / 100, 2)
        findings = [
            annotation(t, s)
            for t, s in (
                ("PROMPT_LEAK", "critical"),
                ("LINK_UNHEALTHY", "warning"),
                ("sycophancy", "info"),
                ("dismissive", "info"),
            )[: i % 5]
        ]
        runs.append(
            make_audit(
                user_input=f"Question {i}: which retailers use Acme, and what did they gain? " * 3,
                results=[result("grounding", score, findings), result("bias", score / 2)],
                created_at=now - timedelta(minutes=i),
            )
        )
    return runs


def _switch_to_table(page) -> None:
    page.click("#view-switch button[value=table]")
    page.wait_for_selector("#audit-table")


def test_fifteen_rows_fit_at_1366x900_and_the_choice_is_remembered(
    browser, server_url, login, audits
):
    context = browser.new_context(base_url=server_url, viewport={"width": 1366, "height": 900})
    page = context.new_page()
    login(page)
    _switch_to_table(page)
    visible = page.evaluate(VISIBLE_ROWS)
    page.screenshot(path="/tmp/audit-table-1366.png")
    assert visible >= 15, visible
    page.reload()
    expect(page.locator("#audit-table")).to_be_visible()
    context.close()
    # Another browser (a fresh context, a new session) of the same user: still the table.
    other = browser.new_context(base_url=server_url, viewport={"width": 1366, "height": 900})
    page = other.new_page()
    login(page)
    expect(page.locator("#audit-table")).to_be_visible()
    page.click("#view-switch button[value=cards]")
    expect(page.locator(".audit-card").first).to_be_visible()
    other.close()


def test_sorting_by_the_highest_score_keeps_keyset_pages(page, login, audits):
    login(page)
    _switch_to_table(page)
    page.click("th a:has-text('Highest score')")
    page.wait_for_url(re.compile(r"sort=-top_score"))
    scores = [
        float(t)
        for t in page.locator("#audit-table-rows .col-score .score-value").all_inner_texts()
    ]
    assert scores == sorted(scores, reverse=True)
    page.click("#load-more button")
    expect(page.locator("#audit-table-rows tr.audit-row")).to_have_count(55)
    scores = [
        float(t)
        for t in page.locator("#audit-table-rows .col-score .score-value").all_inner_texts()
    ]
    assert scores == sorted(scores, reverse=True)
    ids = page.locator("#audit-table-rows tr.audit-row").evaluate_all("rs => rs.map(r => r.id)")
    assert len(set(ids)) == 55
    # The filter form keeps the sort: a filter change re-sorts nothing away.
    page.click("#filters-more > summary")  # the folded filters
    page.fill("#filter-top", "0.5")
    page.locator("#filter-top").dispatch_event("change")
    page.wait_for_url(re.compile(r"top_score_min=0.5"))
    assert "sort=-top_score" in page.url
    scores = [
        float(t)
        for t in page.locator("#audit-table-rows .col-score .score-value").all_inner_texts()
    ]
    assert scores and min(scores) >= 0.5 and scores == sorted(scores, reverse=True)
    assert page.errors == []


def test_keyboard_moves_opens_and_records_verdicts(page, login, audits):
    login(page)
    _switch_to_table(page)
    rows = page.locator("#audit-table-rows tr.audit-row")
    page.keyboard.press("j")
    expect(rows.nth(0)).to_have_class(re.compile("is-selected"))
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    expect(rows.nth(1)).to_have_class(re.compile("is-selected"))
    expect(page.locator("tr.is-selected")).to_have_count(1)
    # Verdict keys of the review queue, on the selected row, through the verdict endpoint.
    second = audits[1]
    page.keyboard.press("f")
    expect(rows.nth(1).locator(".row-verdict-now")).to_contain_text("False positive")
    assert Review.objects.get(audit=second, is_current=True).verdict == "false_positive"
    page.keyboard.press("c")
    expect(rows.nth(1).locator(".row-verdict-now")).to_contain_text("Confirmed")
    expect(rows.nth(1)).to_have_class(re.compile("is-selected"))
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/audits/{second.pk}/")
    assert page.errors == []


def test_switching_views_keeps_filters_changed_in_place(page, login, audits):
    login(page)
    page.click("#filters-more > summary")  # the folded filters
    page.check("#filter-surfaced")
    page.wait_for_url(re.compile(r"surfaced=1"))
    _switch_to_table(page)
    assert "surfaced=1" in page.url
    expect(page.locator("#filter-surfaced")).to_be_checked()
    surfaced = sum(1 for run in audits if run.has_card)
    expect(page.locator("#audit-table-rows tr.audit-row")).to_have_count(min(50, surfaced))
    assert page.errors == []
