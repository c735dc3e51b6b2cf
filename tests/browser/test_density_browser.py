"""The list in Chromium: the headline is always a number, the table's chips stay whole at
1440x900, a phone's table row shows the score and the input, and a desktop screen holds at
least five cards with the filters folded to one line."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from audits.models import AuditRun
from tests.factories import annotation, make_audit, result

pytestmark = pytest.mark.browser

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
NUMBER = re.compile(r"^\d\.\d\d$")
LONG_TYPES = ("UNGROUNDED_CUSTOMER_CLAIM", "LINK_HOST_NOT_ALLOWED", "unprofessional", "PROMPT_LEAK")

# Chips cut (content wider than the chip), broken over lines, or past their cell.
BROKEN_CHIPS = """() => Array.from(document.querySelectorAll('#audit-table .badge')).filter(b => {
  const r = b.getBoundingClientRect(), cell = b.closest('td').getBoundingClientRect();
  const line = parseFloat(getComputedStyle(b).lineHeight) || 16;
  return b.scrollWidth > b.clientWidth + 1 || r.height > 2 * line
      || r.right > cell.right + 1 || r.left < cell.left - 1;
}).map(b => b.textContent)"""

CARDS_ON_SCREEN = """() => Array.from(document.querySelectorAll('.audit-card'))
  .filter(c => c.getBoundingClientRect().bottom <= window.innerHeight).length"""

# For each table row: the score's text if it shows whole, and how many characters of the
# input fit in the space the input's cell shows.
PHONE_ROWS = """() => Array.from(document.querySelectorAll('#audit-table-rows tr.audit-row')).slice(0, 5)
  .map(row => {
    const score = row.querySelector('.col-score .score-value');
    const link = row.querySelector('.col-input .row-link');
    const cell = link.closest('td').getBoundingClientRect();
    const shown = score.getBoundingClientRect().width > 0 && score.scrollWidth <= score.clientWidth + 1
                  && score.getBoundingClientRect().right <= window.innerWidth;
    const ctx = document.createElement('canvas').getContext('2d');
    ctx.font = getComputedStyle(link).font;
    let fit = 0;
    while (fit < link.textContent.length
           && ctx.measureText(link.textContent.slice(0, fit + 1) + '…').width <= cell.width - 8) fit++;
    return {score: shown ? score.textContent : null, chars: fit};
  })"""


@pytest.fixture
def audits(staff_user) -> list[AuditRun]:
    """Twelve surfaced audits with long chips (one forced by links under its threshold),
    each with a verdict form: the densest cards."""
    now = timezone.now()
    runs = []
    for i in range(12):
        findings = [
            annotation(t, "critical" if t.isupper() else "warning")
            for t in LONG_TYPES[: 1 + i % len(LONG_TYPES)]
        ]
        results = [result("grounding", 0.2 + i / 20, findings), result("bias", 0.1)]
        if i == 0:
            results = [
                result("links", 0.05, [annotation("LINK_HOST_NOT_ALLOWED")], should_surface=True)
            ]
        runs.append(
            make_audit(
                user_input=f"Which retailers use Acme and how much did they gain, case {i}?",
                response="Al-Futtaim achieved +206% revenue after adopting Acme. " * 3,
                results=results,
                created_at=now - timedelta(minutes=i),
            )
        )
    return runs


def _page(browser, server_url, viewport):
    context = browser.new_context(base_url=server_url, viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(10_000)
    return page


def test_the_headline_is_a_number_on_every_card_and_detail_page(browser, server_url, login, audits):
    page = _page(browser, server_url, DESKTOP)
    login(page)
    scores = page.locator(".audit-card .score-value").all_text_contents()
    assert len(scores) == len(audits) and all(NUMBER.match(s) for s in scores), scores
    forced = page.locator(f"#audit-card-{audits[0].pk}")
    expect(forced.locator(".score-value")).to_have_text("0.05")
    expect(forced.locator(".forced-label")).to_have_text("forced by links")
    for run in (audits[0], audits[5]):
        page.goto(f"/audits/{run.pk}/")
        assert NUMBER.match(page.locator(".score-vs-threshold .score-value").inner_text())
    page.context.close()


def test_five_cards_fit_at_1440x900_with_the_filters_on_one_line(
    browser, server_url, login, audits
):
    page = _page(browser, server_url, DESKTOP)
    login(page)
    expect(page.locator("#filters-panel")).to_be_hidden()
    line = page.locator(".filters-line").bounding_box()
    assert line["height"] < 60, line
    assert page.evaluate(CARDS_ON_SCREEN) >= 5
    # The folded filters open on click and say how many are set.
    page.click("#filters-more > summary")
    expect(page.locator("#filters-panel")).to_be_visible()
    page.goto("/?severity=critical&surfaced=1")
    expect(page.locator("#filters-more .filter-count")).to_have_text(re.compile(r"^2"))
    page.context.close()


def test_table_chips_stay_whole_at_1440x900(browser, server_url, login, audits):
    page = _page(browser, server_url, DESKTOP)
    login(page)
    page.click("#view-switch button[value=table]")
    page.wait_for_selector("#audit-table")
    assert page.locator("#audit-table .badge").count() >= 12
    assert page.evaluate(BROKEN_CHIPS) == []
    page.context.close()


def test_a_phone_table_row_shows_the_score_and_the_input(browser, server_url, login, audits):
    page = _page(browser, server_url, PHONE)
    login(page)
    page.click("#view-switch button[value=table]")
    page.wait_for_selector("#audit-table")
    rows = page.evaluate(PHONE_ROWS)
    assert rows and all(r["score"] and NUMBER.match(r["score"]) for r in rows), rows
    assert all(r["chars"] >= 20 for r in rows), rows
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.context.close()
