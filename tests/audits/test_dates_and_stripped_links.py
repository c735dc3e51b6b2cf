"""Past a day the dashboard shows a date, not "996 hours ago"; a link the rules stripped is
listed on the detail page as text, never as a link to follow."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from audits.cards.html import relative
from tests.factories import make_audit

pytestmark = pytest.mark.django_db


def test_relative_times_turn_into_dates_past_a_day():
    now = timezone.now()
    assert relative(now - timedelta(seconds=20), now) == "just now"
    assert relative(now - timedelta(minutes=5), now) == "5 minutes ago"
    assert relative(now - timedelta(hours=23), now) == "23 hours ago"
    older = now - timedelta(hours=996)
    assert relative(older, now) == older.astimezone(timezone.UTC).strftime("%Y-%m-%d")
    assert relative(now - timedelta(days=2), now).count("-") == 2


def test_a_stripped_link_is_shown_as_text(client, staff_user):
    client.force_login(staff_user)
    hostile = "https://evil.example/phish"
    kept = "https://docs.acme.example/api"
    run = make_audit(
        links=[
            {"url": hostile, "label": "here", "decision": "strip", "reason": "host not allowed"},
            {"url": kept, "label": "docs", "decision": "keep", "reason": ""},
        ]
    )
    html = client.get(reverse("audits:detail", args=[run.pk])).content.decode()
    assert f"<code>{hostile}</code>" in html and f'href="{hostile}"' not in html
    assert f'href="{kept}"' in html
