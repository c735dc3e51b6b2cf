"""Measured quality in real headless Chromium: the precision chart and the threshold
evidence are drawn, and drawn again after htmx swaps the section they live in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from audits.store.verdicts import record_review
from tests.factories import annotation, make_audit, result

pytestmark = pytest.mark.browser


@pytest.fixture
def reviewed(staff_user):
    now = timezone.now()
    for i, (score, verdict) in enumerate(
        [(0.9, "confirmed"), (0.8, "confirmed"), (0.4, "false_positive"), (0.35, "confirmed")]
    ):
        run = make_audit(
            results=[result("bias", score, [annotation("sycophancy")])],
            created_at=now - timedelta(days=3 * i + 1),
        )
        record_review(audit_id=run.pk, verdict=verdict, user=staff_user)


def _charts(page) -> list[str]:
    """The data-chart names of the live Chart.js instances whose canvas is on the page."""
    return page.evaluate(
        "window.Chart ? Object.values(Chart.instances).filter(c => c.canvas.isConnected)"
        ".map(c => c.canvas.getAttribute('data-chart')).sort() : []"
    )


def _wait_for_charts(page, expected: list[str]) -> list[str]:
    # Polled with evaluate: wait_for_function needs eval, which the CSP forbids.
    for _ in range(50):
        if _charts(page) == expected:
            break
        page.wait_for_timeout(100)
    return _charts(page)


def test_tuning_evidence_is_drawn_and_redrawn_when_the_slider_moves(page, login, reviewed):
    login(page, next_url="/tuning/?threshold=0.45")
    sentence = page.locator("#evidence-sentence")
    expect(sentence).to_have_text(
        "At 0.45: hides 1 of 1 reviewed false positives, loses 1 of 3 confirmed findings."
    )
    assert _wait_for_charts(page, ["evidence", "tuning"]) == ["evidence", "tuning"]

    page.locator("#threshold-slider").fill("0.85")
    expect(sentence).to_contain_text("At 0.85: hides 1 of 1")
    expect(page.locator("#evidence-table tr.selected")).to_contain_text("0.85")
    assert _wait_for_charts(page, ["evidence", "tuning"]) == ["evidence", "tuning"]
    assert page.errors == []


def test_trends_precision_chart_survives_a_window_change(page, login, reviewed):
    login(page, next_url="/trends/?days=60")
    expect(page.locator("#precision-overall")).to_have_text("75.0%")
    expected = sorted(
        ["per-day", "histogram", "types", "surfaced", "failures", "latency", "precision"]
    )
    assert _wait_for_charts(page, expected) == expected

    page.select_option("#trend-days", "7")
    expect(page.locator("#precision-overall")).to_have_text(
        "100.0%"
    )  # the two newest, both confirmed
    assert _wait_for_charts(page, expected) == expected
    assert page.errors == []
