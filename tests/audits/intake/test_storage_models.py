"""Storage: constraints, the database collision store, concurrent submissions."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import async_to_sync
from django.db import IntegrityError, close_old_connections, connections

from analyzers.models import ApiKey
from audits.intake.submit import ExternalIdConflict, rerun_audit, submit_audit
from audits.models import AuditRun, CollisionDigest, TraceLine
from audits.store.collisions import DatabaseCollisionStore
from tests.conftest import ApiClient
from tests.factories import make_audit, make_audits

INPUT = {"user_input": "q", "response": "a"}


@pytest.mark.django_db
def test_external_id_is_unique_per_key_at_the_database_level():
    key, _ = ApiKey.create_key("k")
    AuditRun.objects.create(api_key=key, external_id="x")
    with pytest.raises(IntegrityError):
        AuditRun.objects.create(api_key=key, external_id="x")


@pytest.mark.django_db
def test_many_audits_may_have_no_external_id():
    key, _ = ApiKey.create_key("k")
    AuditRun.objects.create(api_key=key)
    AuditRun.objects.create(api_key=key)
    assert AuditRun.objects.count() == 2


@pytest.mark.django_db
def test_submit_is_idempotent_and_detects_conflicts():
    key, _ = ApiKey.create_key("k")
    first = submit_audit(**INPUT, external_id="e1", api_key=key, enqueue=False)
    again = submit_audit(**INPUT, external_id="e1", api_key=key, enqueue=False)
    assert first.was_created and not again.was_created and again.pk == first.pk
    with pytest.raises(ExternalIdConflict):
        submit_audit(user_input="q", response="other", external_id="e1", api_key=key, enqueue=False)


@pytest.mark.django_db
def test_trace_line_positions_are_unique_per_audit():
    run = make_audit(trace=["a"])
    with pytest.raises(IntegrityError):
        TraceLine.objects.create(audit=run, position=0, text="again")


@pytest.mark.django_db
def test_rerun_links_to_the_original_and_keeps_it():
    original = make_audit()
    new = rerun_audit(original, enqueue=False)
    assert new.rerun_of == original and new.pk != original.pk
    assert list(original.reruns.all()) == [new]
    assert AuditRun.objects.count() == 2


@pytest.mark.django_db
def test_make_audits_builds_varied_audits():
    runs = make_audits(30, seed=1)
    assert len(runs) == 30
    assert {r.has_card for r in runs} == {True, False}
    assert AuditRun.objects.filter(annotations__severity="critical").exists()


@pytest.mark.django_db
def test_collision_store_remembers_per_scope():
    store = DatabaseCollisionStore()
    seen = async_to_sync(store.seen_before)
    assert seen("user input A", "d1") is False
    assert seen("user input A", "d1") is True
    assert seen("user input B", "d1") is False
    assert CollisionDigest.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_collision_store_is_atomic_under_concurrency():
    store = DatabaseCollisionStore()
    barrier = threading.Barrier(8)

    def attempt(_):
        barrier.wait()
        try:
            return store.seen_before_sync("scope", "same-digest")
        finally:
            connections.close_all()

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(attempt, range(8)))
    assert outcomes.count(False) == 1  # exactly one first sighting
    assert CollisionDigest.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_submissions_store_each_audit_once_and_lose_none(
    thread_tasks, make_key, settings
):
    """8 threads x 50 POSTs; every 5th reuses one of 10 shared external ids."""
    key = make_key("ingest", rate_limit_per_minute=100_000)
    settings.AUDITOR_RATE_BURST_PER_S = 100_000  # 400 POSTs may well come within a second
    barrier = threading.Barrier(8)

    def submit(thread_no: int) -> list[tuple[int, str, str | None]]:
        client = ApiClient(key)
        out = []
        barrier.wait()
        try:
            for i in range(50):
                external = f"shared-{i % 10}" if i % 5 == 0 else f"t{thread_no}-{i}"
                r = client.post(
                    "/api/audits", {**INPUT, "response": f"r-{external}", "external_id": external}
                )
                out.append((r.status_code, r.json()["id"], external))
        finally:
            close_old_connections()
            connections.close_all()
        return out

    with ThreadPoolExecutor(8) as pool:
        results = [row for rows in pool.map(submit, range(8)) for row in rows]
    assert thread_tasks.wait_idle(timeout=120)

    assert {code for code, _, _ in results} <= {200, 202}
    by_external: dict[str, set[str]] = {}
    for _, run_id, external in results:
        by_external.setdefault(external, set()).add(run_id)
    assert all(len(ids) == 1 for ids in by_external.values())  # no duplicates
    expected = 8 * 40 + 2  # 40 unique ids per thread + shared-0 and shared-5
    assert len(by_external) == expected
    assert AuditRun.objects.count() == expected
    assert sum(code == 202 for code, _, _ in results) == expected
    assert set(AuditRun.objects.values_list("status", flat=True)) == {"complete"}  # none lost
