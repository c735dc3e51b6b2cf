"""Recording verdicts in headless Chromium: one click, no reload, on the detail and Live pages."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from audits.models import Review
from tests.factories import annotation, make_audit, result

pytestmark = pytest.mark.browser


class LateAnswers:
    """Requests whose URL matches `pattern`: answered by the server at once, the answers
    handed to the page only on `deliver()`; from then on requests go through."""

    def __init__(self, page, pattern: str):
        self.page, self.held, self.holding = page, [], True
        page.route(re.compile(pattern), self._route)

    def _route(self, route):
        if self.holding:
            self.held.append((route, route.fetch()))
        else:
            route.continue_()

    def wait_for_one(self):
        for _ in range(100):  # until the server has answered one
            if self.held:
                return
            self.page.wait_for_timeout(50)

    def deliver(self):
        self.holding = False
        for route, response in self.held:
            route.fulfill(response=response)


@pytest.fixture
def flagged(staff_user):
    return make_audit(
        user_input="Which retailers use Acme?",
        response="Obviously you should just read the docs.",
        results=[
            result("tone", 0.7, [annotation("dismissive", "warning", evidence="Obviously")]),
            result("grounding", 0.8, [annotation("UNGROUNDED_CUSTOMER_CLAIM", "critical")]),
        ],
    )


def test_verdicts_on_the_detail_page_update_in_place(page, login, staff_user, flagged):
    login(page, next_url=f"/audits/{flagged.pk}/")
    page.evaluate("window.__same_page = true")
    tone = flagged.annotations.get(type="dismissive")
    form = page.locator(f"#verdict-{flagged.pk}-{tone.pk}")
    form.locator("summary").click()
    form.locator("textarea").fill("tone is fine <b>here</b>")
    form.locator("button[value=false_positive]").click()
    expect(form.locator("button[value=false_positive]")).to_have_attribute("aria-pressed", "true")
    expect(form.locator(".verdict-state")).to_contain_text("False positive")
    # The history refreshes itself, with the comment as text.
    history = page.locator(f"#reviews-{flagged.pk}")
    expect(history.locator("li")).to_have_count(1)
    expect(history).to_contain_text("tone is fine <b>here</b>")

    # Two verdicts in a row while the history the first one asked for is still on its way (the
    # server answered before the second verdict, the browser hears it after): the stale answer
    # must not be the last word.
    late = LateAnswers(page, r"section=review")
    whole = page.locator(f"#verdict-{flagged.pk}")
    whole.locator("button[value=confirmed]").click()
    expect(whole.locator("button[value=confirmed]")).to_have_attribute("aria-pressed", "true")
    late.wait_for_one()
    whole.locator("button[value=unsure]").click()
    expect(whole.locator("button[value=unsure]")).to_have_attribute("aria-pressed", "true")
    late.deliver()
    expect(history.locator("li")).to_have_count(3)
    expect(history.locator("li.superseded")).to_have_count(1)

    assert page.evaluate("window.__same_page") is True
    page.screenshot(path="/tmp/verdicts-detail.png", full_page=True)
    current = {r.annotation_id: r.verdict for r in Review.objects.filter(is_current=True)}
    assert current == {tone.pk: "false_positive", None: "unsure"}
    assert Review.objects.get(annotation=tone).comment == "tone is fine <b>here</b>"
    assert page.errors == []


def test_the_buttons_wait_while_a_verdict_is_on_its_way(page, login, staff_user, flagged):
    """A second click while the first verdict's answer is on its way would be queued by htmx
    and dropped when that answer replaces the form: the buttons are disabled until it is in."""
    login(page, next_url=f"/audits/{flagged.pk}/")
    late = LateAnswers(page, r"/reviews/$")
    whole = page.locator(f"#verdict-{flagged.pk}")
    whole.locator("button[value=confirmed]").click()
    late.wait_for_one()  # the server has recorded it, its answer held
    for value in ("confirmed", "false_positive", "unsure"):
        expect(whole.locator(f"button[value={value}]")).to_be_disabled()
    late.deliver()
    expect(whole.locator("button[value=confirmed]")).to_have_attribute("aria-pressed", "true")
    whole.locator("button[value=unsure]").click()  # enabled again: the next one goes through
    expect(whole.locator("button[value=unsure]")).to_have_attribute("aria-pressed", "true")
    assert Review.objects.get(is_current=True).verdict == "unsure"
    assert page.errors == []


def test_a_verdict_from_a_live_card_stays_on_the_page(page, login, staff_user, flagged):
    login(page, next_url="/live/")
    page.wait_for_selector("[data-live-indicator][data-state=connected]")
    page.evaluate("window.__same_page = true")
    card = page.locator(f"#audit-card-{flagged.pk}")
    # The button sits above the card's stretched link: clicking it does not open the audit.
    card.locator("button[value=confirmed]").click()
    expect(card.locator("button[value=confirmed]")).to_have_attribute("aria-pressed", "true")
    expect(card.locator(".verdict-state")).to_contain_text("Confirmed")
    assert page.url.endswith("/live/")
    page.screenshot(path="/tmp/verdicts-live.png")
    assert page.evaluate("window.__same_page") is True
    review = Review.objects.get()
    assert (review.verdict, review.annotation_id, review.reviewer_name) == (
        "confirmed",
        None,
        "staffer",
    )
    assert page.errors == []
