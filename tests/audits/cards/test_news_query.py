"""The Live page's compiled news query (`fragments.NewsQuery`): the same cards as the ORM's
way for any filters, and the live feed's threads keep their database connection."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audits.cards import cards
from audits.live import fragments
from audits.store import db_threads
from tests.factories import annotation, make_audit, make_audits, result

pytestmark = pytest.mark.django_db

FILTERS = [
    "",
    "q=retailers",
    "q=nothing-like-this",
    "q=50%25_off",  # LIKE's own wildcards are matched literally
    "status=failed",
    "surfaced=1&min_score=0.5",
    "severity=critical",
    "type=sycophancy&q=Acme",
    "since=2000-01-01&until=2000-01-02",
]


@pytest.mark.parametrize("query", FILTERS)
def test_the_compiled_query_finds_what_the_orm_finds(query):
    runs = make_audits(80, seed=3, spread=timedelta(hours=2))
    make_audit(
        user_input="A 50%_off sale?", results=[result("bias", 0.9, [annotation("sycophancy")])]
    )
    ids = [run.pk for run in runs][::-1] + [str(r.pk) for r in runs[:5]]  # UUIDs and strings
    filters = fragments.parse_filters(query)
    limit = fragments.LIVE_ROWS + 1
    expected = [run.pk for run in fragments.matching_cards(filters, ids, limit)]
    found = [run.pk for run in fragments.NewsQuery(filters).cards(ids)]
    assert found == expected
    if query == "":
        assert len(found) == limit  # the burst case: more than a page


def test_ids_that_are_not_audit_ids_are_left_out():
    run = make_audit()
    query = fragments.NewsQuery(cards.ListFilters())
    found = query.cards(["not-a-uuid", "", str(uuid.uuid4()), str(run.pk), "'); DROP TABLE x; --"])
    assert [r.pk for r in found] == [run.pk]
    assert query.cards([]) == []


def test_the_query_is_compiled_once_per_page():
    make_audit(user_input="first")
    query = fragments.NewsQuery(fragments.parse_filters("q=first"))
    query.cards([uuid.uuid4()])
    compiled = query._compiled
    newer = make_audit(user_input="first again")
    assert [r.pk for r in query.cards([newer.pk])] == [newer.pk]
    assert query._compiled is compiled


@pytest.mark.django_db(transaction=True)
def test_the_feed_threads_keep_their_connection():
    def connection_of_this_thread():
        connection.ensure_connection()
        return id(connection.connection)

    async def many_calls():
        seen = set()
        for _ in range(db_threads.FEED_THREADS * 4):
            seen.add(await db_threads.run_in_feed_thread(connection_of_this_thread))
        return seen

    seen = asyncio.run(many_calls())
    # one connection per thread at most, not one per call
    assert 1 <= len(seen) <= db_threads.FEED_THREADS


def test_the_counters_count_the_last_minute_and_the_last_hour():
    now = timezone.now()
    surfaced = [result("bias", 0.9, [annotation("sycophancy")], surfaced=True)]
    make_audit()  # now, complete, no card
    make_audit(results=surfaced)  # now, complete, a card
    make_audit(status="failed", created_at=now - timedelta(minutes=10))
    make_audit(status="running", created_at=now - timedelta(minutes=30))
    make_audit(results=surfaced, created_at=now - timedelta(minutes=50))
    make_audit(results=surfaced, created_at=now - timedelta(hours=2))  # too old
    make_audit(status="failed", created_at=now - timedelta(hours=3))  # too old
    assert fragments.counters() == {
        "per_minute": 2,
        "finished": 3,
        "surfaced_pct": 67,
        "failed": 1,
    }


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query plan")
def test_the_counters_read_an_index_only():
    """Sent every second to every Live page: never a scan of the rows (and their texts)."""
    make_audit()
    with CaptureQueriesContext(connection) as queries:
        fragments.counters()
    (query,) = queries.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "COVERING INDEX audit_trends_idx" in plan, plan
