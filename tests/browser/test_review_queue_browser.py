"""The review queue in real headless Chromium: judging audits with the keyboard alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from audits.models import AuditRun, Review
from tests.factories import annotation, make_audit, result

pytestmark = pytest.mark.browser


def surfaced(question: str, hours_ago: float) -> AuditRun:
    return make_audit(
        user_input=question,
        response=f"Acme answers: {question} <img src=x onerror=alert(1)>",
        results=[result("tone", 0.7, [annotation("condescending", "warning", evidence="Acme")])],
        created_at=timezone.now() - timedelta(hours=hours_ago),
    )


def current(page, run: AuditRun):
    return page.locator(f"#queue-audit-{run.pk}")


def test_reviewing_audits_with_the_keyboard(page, login, staff_user):
    runs = [surfaced(f"Question {i}?", hours_ago=10 - i) for i in range(4)]
    first, second, third, fourth = runs
    login(page, next_url="/review/")
    expect(current(page, first)).to_be_visible()
    expect(page.locator("#progress-remaining")).to_have_text("4")
    # Untrusted text stays text.
    assert "<img src=x onerror=alert(1)>" in page.locator(".response-text").inner_text()
    page.evaluate("window.__same_page = true")

    # c confirms the oldest; the next one replaces it without a page load.
    page.keyboard.press("c")
    expect(current(page, second)).to_be_visible()
    expect(page.locator("#progress-mine")).to_have_text("1")
    assert Review.objects.get(audit=first).verdict == "confirmed"

    # Typing in the comment box types (no shortcut fires); Esc leaves it, f judges.
    page.click("#review-comment")
    page.keyboard.type("fuss about nothing")
    expect(current(page, second)).to_be_visible()
    assert not Review.objects.filter(audit=second).exists()
    page.keyboard.press("Escape")
    page.keyboard.press("f")
    expect(current(page, third)).to_be_visible()
    review = Review.objects.get(audit=second)
    assert (review.verdict, review.comment) == ("false_positive", "fuss about nothing")

    # j skips the third (no verdict, claim released); u marks the fourth unsure.
    page.keyboard.press("j")
    expect(current(page, fourth)).to_be_visible()
    third.refresh_from_db()
    assert third.claimed_by is None and third.reviewed_at is None
    page.keyboard.press("u")
    expect(page.locator(".queue-empty")).to_contain_text("All caught up")
    expect(page.locator(".queue-empty")).to_contain_text("1 audit you skipped")
    assert Review.objects.get(audit=fourth).verdict == "unsure"
    expect(page.locator("#progress-mine")).to_have_text("3")
    expect(page.locator("#progress-remaining")).to_have_text("1")

    assert page.evaluate("window.__same_page") is True
    assert Review.objects.count() == 3
    assert all(r.reviewer_id == staff_user.pk for r in Review.objects.all())
    assert page.errors == []


def test_the_queue_works_without_javascript(browser, server_url, staff_user, login):
    context = browser.new_context(base_url=server_url, java_script_enabled=False)
    page = context.new_page()
    try:
        first, second = surfaced("Old?", 5), surfaced("New?", 1)
        login(page, next_url="/review/")
        page.goto("/review/")
        expect(current(page, first)).to_be_visible()
        page.click("button[value=confirmed]")
        expect(current(page, second)).to_be_visible()
        assert Review.objects.get(audit=first).verdict == "confirmed"
        page.click("button[data-review-key=s]")
        expect(page.locator(".queue-empty")).to_be_visible()
        second.refresh_from_db()
        assert second.reviewed_at is None
    finally:
        context.close()
