"""Admin pages show scores and durations rounded, not as raw floats."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import make_audit, result

pytestmark = pytest.mark.django_db

RAW = 0.049999999999999996


@pytest.fixture
def audit():
    run = make_audit(results=[result("tone", RAW), result("bias", 0.1 + 0.2)])
    run.overall_score = 0.1 + 0.2  # 0.30000000000000004
    run.save(update_fields=["overall_score"])
    run.results.update(duration_ms=12.345678901)
    return run


def test_the_audit_runs_list_and_page_show_rounded_scores(staff_user, audit):
    client = Client()
    client.force_login(staff_user)
    listing = client.get("/admin/audits/auditrun/").content.decode()
    page = client.get(f"/admin/audits/auditrun/{audit.pk}/change/").content.decode()
    for html in (listing, page):
        assert "0.30000000000000004" not in html
        assert "0.3" in html
    assert str(RAW) not in page and "0.05" in page
    assert "12.345678901" not in page and "12.346" in page
