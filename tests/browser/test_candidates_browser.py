"""The Candidates page in headless Chromium: from a finding marked false positive, draft a
candidate that would not flag it, replay, and open an audit that flips side by side."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from analyzers.config_store import save_config
from analyzers.models import CandidateConfig
from audits.store.verdicts import record_review
from tests.factories import annotation, make_audit, result

pytestmark = pytest.mark.browser

SAMPLE = json.loads((Path(__file__).parents[1] / "samples" / "config.json").read_text())
LINK = "[the offer](https://offers.evil.example/deal)"


@pytest.fixture
def false_positive(staff_user):
    save_config(copy.deepcopy(SAMPLE), actor="test")
    audit = make_audit(
        user_input="Where is the offer?",
        response=f"See {LINK} for details.",
        results=[
            result(
                "links",
                0.3,
                [
                    annotation(
                        "LINK_HOST_NOT_ALLOWED",
                        "warning",
                        label="Link to a host that is not allowed",
                        evidence=LINK,
                        start=4,
                        end=4 + len(LINK),
                    )
                ],
            )
        ],
    )
    finding = audit.annotations.get()
    record_review(audit_id=audit.pk, annotation_id=finding.pk, verdict="false_positive")
    return audit, finding


def test_draft_a_candidate_from_a_false_positive_and_compare_it(page, login, false_positive):
    audit, finding = false_positive
    login(page, next_url=f"/audits/{audit.pk}/")
    page.locator(f"#ann-{finding.pk} a.draft-candidate").click()

    expect(page.locator("h1")).to_have_text("Draft a candidate that would not flag this")
    host = page.locator("input[name=kind][value='host:offers.evil.example']")
    expect(host).to_be_checked()  # pre-filled from the finding
    expect(page.locator("input[name=threshold]")).to_have_value("0.31")
    page.click("#draft-submit")

    expect(page.locator("#candidate-status")).to_have_text("shadow")
    expect(page.locator("h1")).to_contain_text("Allow offers.evil.example")
    candidate = CandidateConfig.objects.get()
    assert "offers.evil.example" in candidate.config["allowed_hosts"]

    page.fill("#replay-limit", "5")
    page.click("#replay")
    for _ in range(50):  # the replay runs in the server's background tasks
        if page.locator("#count-no-longer-surfaced").inner_text() == "1":
            break
        page.wait_for_timeout(200)
        page.reload()
    expect(page.locator("#count-no-longer-surfaced")).to_have_text("1")
    expect(page.locator("#count-newly-surfaced")).to_have_text("0")
    expect(page.locator("#count-fp-removed")).to_have_text("1")
    expect(page.locator("#fp-removed")).to_contain_text("LINK_HOST_NOT_ALLOWED")

    page.locator("#candidate-flips a.flip").click()
    expect(page.locator("#side-active h2")).to_have_text("Active: surfaced")
    expect(page.locator("#side-candidate h2")).to_have_text("Candidate: not surfaced")
    expect(page.locator("#side-active")).to_contain_text("offers.evil.example")

    page.get_by_role("link", name="Candidates", exact=True).click()
    row = page.locator(f"#candidate-{candidate.pk}")
    expect(row).to_contain_text("Allow offers.evil.example")
    expect(row).to_contain_text("shadow")
    assert not page.errors, page.errors
