"""The Trends activity chart counts hours when the audits span a day or two (one bar per
day would be a single bar), days otherwise; hours are instants, across a DST change too."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audits.dashboard import queries
from tests.factories import make_audit, result

CARD = [result("tone", 0.9)]
CLEAN = [result("tone", 0.0)]


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


def _chart(client: Client, days: int = 60) -> tuple[dict, str]:
    """The activity series the Trends page charts, and the page."""
    html = client.get(reverse("audits:trends"), {"days": days}).content.decode()
    tag = '<script id="trends-data" type="application/json">'
    start = html.index(tag) + len(tag)
    return json.loads(html[start : html.index("</script>", start)])["per_day"], html


def test_audits_of_one_day_are_charted_per_hour(staff_user, client):
    client.force_login(staff_user)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    make_audit(results=CLEAN, created_at=hour - timedelta(hours=4, minutes=-10))
    make_audit(results=CARD, created_at=hour - timedelta(hours=4, minutes=-50))
    make_audit(results=CARD, created_at=hour + timedelta(minutes=1))
    series, html = _chart(client)
    assert series["bucket"] == "hour"
    assert series["total"] == [2, 0, 0, 0, 1]
    assert series["cards"] == [1, 0, 0, 0, 1]
    assert series["labels"][0] == (hour - timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M")
    assert "Audits per hour" in html


def test_audits_over_several_days_are_charted_per_day(staff_user, client):
    client.force_login(staff_user)
    make_audit(results=CLEAN, created_at=timezone.now() - timedelta(days=5))
    make_audit(results=CARD)
    series, html = _chart(client, days=7)
    assert series["bucket"] == "day"
    assert len(series["labels"]) == 8 and sum(series["total"]) == 2
    assert "Audits per day" in html


def test_two_whole_days_are_at_most_48_hours(db):
    now = datetime(2026, 5, 2, 23, 59, tzinfo=UTC)
    make_audit(created_at=datetime(2026, 5, 1, 0, 0, tzinfo=UTC))
    make_audit(created_at=datetime(2026, 5, 2, 23, 58, tzinfo=UTC))
    series = queries.activity_series(queries.trends(7, now=now), now=now)
    assert series["bucket"] == "hour"
    assert len(series["labels"]) == 48 and sum(series["total"]) == 2
    # A day more and it is per day again.
    make_audit(created_at=datetime(2026, 4, 30, 23, 0, tzinfo=UTC))
    series = queries.activity_series(queries.trends(7, now=now), now=now)
    assert series["bucket"] == "day"


def test_hours_across_a_dst_change_are_one_hour_apart(db):
    now = datetime(2026, 3, 29, 12, 0, tzinfo=UTC)
    make_audit(created_at=datetime(2026, 3, 29, 0, 30, tzinfo=UTC))  # 01:30 CET
    make_audit(created_at=datetime(2026, 3, 29, 2, 30, tzinfo=UTC))  # 04:30 CEST
    with timezone.override("Europe/Paris"):
        series = queries.activity_series(queries.trends(7, now=now), now=now)
    # 02:00 to 03:00 local does not exist that night.
    assert series["labels"] == ["2026-03-29T01:00", "2026-03-29T03:00", "2026-03-29T04:00"]
    assert series["total"] == [1, 0, 1]


def test_audits_before_the_window_are_not_counted(db):
    now = datetime(2026, 5, 8, 12, 0, tzinfo=UTC)
    make_audit(created_at=datetime(2026, 5, 1, 11, 0, tzinfo=UTC))  # before the 7-day window
    make_audit(created_at=datetime(2026, 5, 1, 13, 0, tzinfo=UTC))
    series = queries.activity_series(queries.trends(7, now=now), now=now)
    assert series["bucket"] == "hour"
    assert series["total"] == [1]
