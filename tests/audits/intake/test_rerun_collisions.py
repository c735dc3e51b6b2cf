"""A re-run never collides with itself: the original and its earlier re-runs are left out
of duplicate detection, while a different audit with the same output still collides."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.test import Client

from analyzers.engine.collisions import InMemoryCollisionStore
from audits.execution import execute
from audits.intake import submit
from audits.models import AuditRun
from audits.store.collisions import DatabaseCollisionStore

INPUT = {
    "user_input": "Which retailers use Acme?",
    "response": "Everyone agrees Acme is the best search engine, obviously.",
}


def analysed(run: AuditRun) -> AuditRun:
    execute.execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == "complete"
    return run


def types(run: AuditRun) -> list[str]:
    return sorted(run.annotations.values_list("type", flat=True))


def collided(run: AuditRun) -> bool:
    return run.annotations.filter(type="COLLISION_DETECTED").exists()


@pytest.mark.django_db
def test_re_running_an_audit_adds_no_collision():
    original = analysed(submit.submit_audit(**INPUT, enqueue=False))
    assert not collided(original)
    rerun = analysed(submit.rerun_audit(original, enqueue=False))
    assert not collided(rerun)
    assert types(rerun) == types(original)
    assert rerun.overall_score == original.overall_score


@pytest.mark.django_db
def test_re_running_twice_adds_no_collision_either():
    original = analysed(submit.submit_audit(**INPUT, enqueue=False))
    first = analysed(submit.rerun_audit(original, enqueue=False))
    again = analysed(submit.rerun_audit(original, enqueue=False))
    of_rerun = analysed(submit.rerun_audit(first, enqueue=False))
    assert not any(collided(r) for r in (first, again, of_rerun))
    assert execute.collision_family(of_rerun) == str(original.pk)
    assert {r.overall_score for r in (original, first, again, of_rerun)} == {original.overall_score}


@pytest.mark.django_db
def test_a_different_audit_with_the_same_output_still_collides():
    original = analysed(submit.submit_audit(**INPUT, enqueue=False))
    other = analysed(submit.submit_audit(**INPUT, enqueue=False))
    assert collided(other)
    assert "COLLISION_DETECTED" not in types(original)
    # The other audit produced it too: now a re-run of the original is a duplicate of it.
    assert collided(analysed(submit.rerun_audit(original, enqueue=False)))
    # And a re-run of the other one collides with the original, as the other one did.
    assert collided(analysed(submit.rerun_audit(other, enqueue=False)))


@pytest.mark.django_db
def test_another_collision_key_is_another_scope():
    analysed(submit.submit_audit(**INPUT, enqueue=False))
    elsewhere = analysed(submit.submit_audit(**INPUT, collision_key="tenant-2", enqueue=False))
    assert not collided(elsewhere)


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_re_run_button_adds_no_collision(staff_user):
    original = analysed(submit.submit_audit(**INPUT, enqueue=False))
    client = Client()
    client.force_login(staff_user)
    for _ in range(2):
        response = client.post(f"/audits/{original.pk}/rerun/")
        assert response.status_code == 302
    reruns = list(AuditRun.objects.filter(rerun_of=original))
    assert len(reruns) == 2
    assert all(r.status == "complete" and not collided(r) for r in reruns)


def test_the_in_memory_store_follows_the_same_rule():
    store = InMemoryCollisionStore()

    def seen(digest: str, family: str | None) -> bool:
        return asyncio.run(store.seen_before("scope", digest, family))

    assert not seen("d", "A")
    assert not seen("d", "A")  # the same family again (a re-run)
    assert seen("d", "B")  # another audit
    assert seen("d", "A")  # now shared
    assert seen("d", None)  # without a family: anyone before counts
    assert not seen("e", None)
    assert seen("e", None)


@pytest.mark.django_db(transaction=True)
def test_concurrent_audits_of_one_output_leave_exactly_one_first():
    store = DatabaseCollisionStore()
    outcomes: list[bool] = []
    start = threading.Barrier(6)

    def one(family: str) -> None:
        from django.db import connection

        try:
            start.wait()
            outcomes.append(store.seen_before_sync("scope", "digest", family))
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(f"family-{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == [False] + [True] * 5


@pytest.mark.django_db
def test_a_batch_follows_the_rule_and_records_with_one_insert(django_assert_max_num_queries):
    from audits.models import CollisionDigest
    from audits.store.collisions import CollisionBatch

    DatabaseCollisionStore().seen_before_sync("scope", "f", "C")  # recorded before the batch
    asked = [
        ("d", "A"),
        ("d", "A"),
        ("d", "B"),
        ("d", "A"),
        ("d", None),
        ("e", None),
        ("e", None),
        ("f", "C"),
        ("f", "D"),
        ("f", "C"),
    ]
    memory = InMemoryCollisionStore()
    asyncio.run(memory.seen_before("scope", "f", "C"))
    expected = [asyncio.run(memory.seen_before("scope", d, f)) for d, f in asked]
    with django_assert_max_num_queries(3):  # one read, one insert, one update
        batch = CollisionBatch([("scope", "d"), ("scope", "e"), ("scope", "f")])
        answers = [batch.answer("run", "scope", d, f) for d, f in asked]
        batch.flush()
    assert answers == expected
    assert batch.answer("run", "scope", "unexpected", "A") is None  # asks the database
    rows = {row.digest: (row.first_family, row.shared) for row in CollisionDigest.objects.all()}
    # "e" asked twice without a family: shared, as the one-by-one store records it.
    assert rows == {"d": ("A", True), "e": ("", True), "f": ("C", True)}
    # The one-by-one store goes on from what the batch wrote.
    assert DatabaseCollisionStore().seen_before_sync("scope", "e", "X") is True
    assert DatabaseCollisionStore().seen_before_sync("scope", "g", "X") is False


@pytest.mark.django_db
def test_a_batch_of_one_output_flags_all_but_the_first_without_asking_one_by_one(monkeypatch):
    runs = [submit.submit_audit(**INPUT, enqueue=False) for _ in range(3)]
    asked = []
    one_by_one = DatabaseCollisionStore.seen_before_sync
    monkeypatch.setattr(
        DatabaseCollisionStore,
        "seen_before_sync",
        lambda self, *a, **k: asked.append(a) or one_by_one(self, *a, **k),
    )
    outcome = execute.execute_runs([run.pk for run in runs])
    assert set(outcome.values()) == {"complete"}
    assert asked == []
    flagged = [collided(AuditRun.objects.get(pk=run.pk)) for run in runs]
    assert sorted(flagged) == [False, True, True]
    # A re-run of the first one (in a batch again) is no duplicate of itself, but the
    # output is shared now: the same rule as one by one.
    first = next(run for run, hit in zip(runs, flagged, strict=True) if not hit)
    rerun = submit.rerun_audit(first, enqueue=False)
    execute.execute_runs([rerun.pk, submit.submit_audit(**INPUT, enqueue=False).pk])
    assert collided(AuditRun.objects.get(pk=rerun.pk))


@pytest.mark.django_db
def test_a_digest_recorded_meanwhile_by_another_process_sends_the_batch_round_again(
    monkeypatch,
):
    from audits.models import CollisionDigest
    from audits.store.collisions import CollisionBatch, scope_hash

    runs = [submit.submit_audit(**INPUT, enqueue=False) for _ in range(2)]
    read = CollisionBatch.__init__
    raced = []

    def racing_read(self, *args, **kwargs):
        read(self, *args, **kwargs)
        if not raced:  # another process records the output first, after the batch's read
            raced.append(True)
            for (scope_h, digest), row in self.state.items():
                assert row is None
                CollisionDigest.objects.create(
                    scope_hash=scope_h, digest=digest, first_family="elsewhere"
                )

    monkeypatch.setattr(CollisionBatch, "__init__", racing_read)
    outcome = execute.execute_runs([run.pk for run in runs])
    assert raced and set(outcome.values()) == {"complete"}
    # Analysed again one question at a time: both are duplicates of the other process's.
    assert all(collided(AuditRun.objects.get(pk=run.pk)) for run in runs)
    row = CollisionDigest.objects.get(scope_hash=scope_hash(INPUT["user_input"]))
    assert (row.first_family, row.shared) == ("elsewhere", True)


@pytest.mark.django_db
def test_a_batch_reads_each_scope_s_own_rows_by_the_index():
    """The batch's read seeks (scope, digest) pairs: the same digest in another scope is
    another question, and the plan searches the unique index instead of reading every
    digest ever recorded (which grows with every audit stored)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from audits.store.collisions import CollisionBatch

    store = DatabaseCollisionStore()
    store.seen_before_sync("scope A", "d", "A")
    for i in range(50):  # other digests, the rows a scan would read
        store.seen_before_sync(f"scope {i}", f"other {i}", "X")
    with CaptureQueriesContext(connection) as queries:
        batch = CollisionBatch([("scope A", "d"), ("scope B", "d"), ("scope B", "e")])
    assert batch.answer("run", "scope A", "d", "B") is True  # A recorded it
    assert batch.answer("run", "scope B", "d", "B") is False  # new in scope B
    assert batch.answer("run", "scope B", "e", "B") is False
    if connection.vendor != "sqlite":
        return
    (query,) = queries.captured_queries
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "SCAN audits_collisiondigest" not in plan and "SCAN t " not in plan, plan
    assert "SEARCH t USING INDEX" in plan, plan
