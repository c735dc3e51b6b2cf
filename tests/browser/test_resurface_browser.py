"""Thresholds apply to stored audits, and re-runs never collide with themselves, in
headless Chromium against the shipped server (its thread-pool task backend)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from audits.execution import execute
from audits.intake import submit
from audits.models import AuditRun
from tests.factories import annotation, fabricated_claim_audit, make_audit, result

pytestmark = pytest.mark.browser


def surfaced_cards(page) -> int:
    page.goto("/?surfaced=1")
    return page.locator("#audit-rows > li:not(.load-more)").count()


def test_saving_a_threshold_changes_the_surfaced_count_once_the_task_ends(page, login, staff_user):
    fabricated_claim_audit(results=[result("tone", 0.1)])
    make_audit(
        user_input="How do I set up faceting?",
        response="Everyone agrees facets are great.",
        results=[result("bias", 0.45, [annotation("false_consensus", "warning")])],
        created_at=timezone.now() - timedelta(hours=2),
    )
    make_audit(results=[result("redflag", 0.0)], created_at=timezone.now() - timedelta(days=1))
    login(page, next_url="/")
    assert surfaced_cards(page) == 2

    page.goto("/tuning/")
    expect(page.locator("#resurface-stale")).to_contain_text("3")  # stored before any policy
    page.locator("#threshold-slider").fill("0.6")
    page.click("#save-threshold")
    page.wait_for_selector(".message")
    # The page polls the job's progress until every stored audit follows 0.60.
    expect(page.locator("#resurface-done")).to_be_visible(timeout=20_000)
    expect(page.locator("#resurface-done")).to_contain_text("0.60")
    assert surfaced_cards(page) == 1
    bias_audit = AuditRun.objects.get(user_input="How do I set up faceting?")
    page.goto(f"/audits/{bias_audit.pk}/")
    expect(page.locator("#applied-threshold")).to_contain_text("threshold 0.60")
    assert page.errors == []


def test_re_run_adds_no_collision(page, login, staff_user):
    original = submit.submit_audit(
        user_input="Which retailers use Acme?",
        response="Everyone agrees Acme is the best search engine, obviously.",
        enqueue=False,
    )
    execute.execute_run(original.pk)
    login(page, next_url=f"/audits/{original.pk}/")
    for _ in range(2):
        page.goto(f"/audits/{original.pk}/")
        page.click("text=Re-run with current configuration")
        page.wait_for_url(lambda url: str(original.pk) not in url)
    reruns = AuditRun.objects.filter(rerun_of=original)
    deadline = timezone.now() + timedelta(seconds=20)
    while reruns.exclude(status="complete").exists() or reruns.count() < 2:
        assert timezone.now() < deadline, "the re-runs did not finish"
        page.wait_for_timeout(100)
    for rerun in reruns:
        page.goto(f"/audits/{rerun.pk}/")
        expect(page.locator("body")).not_to_contain_text("COLLISION_DETECTED")
        assert not rerun.annotations.filter(type="COLLISION_DETECTED").exists()
        assert rerun.overall_score == AuditRun.objects.get(pk=original.pk).overall_score
    assert page.errors == []
