"""Live pages in headless Chromium against a daphne server (run with `-m browser`)."""

from __future__ import annotations

import httpx
import pytest

from analyzers.models import ApiKey

pytestmark = pytest.mark.browser


@pytest.fixture
def staff_page(page, staff_user, login):
    login(page)
    return page


@pytest.fixture
def ingest_key(staff_user) -> str:
    _, raw = ApiKey.create_key("browser", scope="ingest")
    return raw


def test_a_submitted_audit_appears_on_live_without_reload(staff_page, server_url, ingest_key):
    page = staff_page
    page.goto("/live/")
    page.wait_for_selector("[data-live-indicator][data-state=connected]")
    r = httpx.post(f"{server_url}/api/audits",
                   json={"user_input": "browser live check", "response": "Acme is easy."},
                   headers={"Authorization": f"Bearer {ingest_key}"})
    assert r.status_code == 202, r.text
    card = page.locator(f"#audit-card-{r.json()['id']}")
    card.wait_for()
    page.wait_for_selector(f"#audit-card-{r.json()['id']}[data-status=complete]")
    assert "browser live check" in card.inner_text()
    assert page.locator(f"#audit-card-{r.json()['id']}").count() == 1
    assert not [e for e in page.errors if "WebSocket" not in e]
