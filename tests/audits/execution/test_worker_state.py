"""Task workers keep their state between audits: loop, connection, Auditor; no useless deletes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.db.backends.signals import connection_created
from django.test.utils import CaptureQueriesContext

from analyzers.config_store import config_version, save_config
from analyzers.engine.config import AuditorConfig
from audits import events
from audits.execution import execute, people_first, queueing, workers
from audits.intake.submit import submit_audit
from audits.models import AuditRun


@pytest.fixture(autouse=True)
def _in_memory_layer(settings):
    """These tests read the in-memory layer's groups (the PostgreSQL run sets REDIS_URL)."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


INPUT = {
    "user_input": "Which retailers use Acme?",
    "response": "Acme is easy to set up. See https://www.acme.example/docs.",
}


def test_the_engine_runs_on_one_loop_per_worker_thread():
    async def where():
        return asyncio.get_running_loop()

    first, second = workers.run_engine(where), workers.run_engine(where)
    other = []
    t = threading.Thread(target=lambda: other.append(workers.run_engine(where)))
    t.start()
    t.join()
    assert first is second and other[0] is not first


def test_thread_sensitive_calls_come_back_to_the_worker_thread():
    async def hop():
        return await sync_to_async(threading.get_ident, thread_sensitive=True)()

    assert workers.run_engine(hop) == threading.get_ident()


def test_engine_errors_reach_the_caller():
    async def boom():
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        workers.run_engine(boom)


@pytest.mark.django_db(transaction=True)
def test_worker_threads_keep_their_database_connections(thread_tasks, settings):
    settings.AUDITOR_TASK_CONN_MAX_AGE = 600
    opened = []

    def count(sender, connection, **kwargs):
        if threading.current_thread().name.startswith("tasks-"):
            opened.append(threading.current_thread().name)

    connection_created.connect(count)
    try:
        runs = [submit_audit(**INPUT) for _ in range(8)]
        assert thread_tasks.wait_idle(timeout=60)
    finally:
        connection_created.disconnect(count)
    assert set(
        AuditRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    ) == {"complete"}
    # One connection per worker thread (2), not one per task (8).
    assert 1 <= len(opened) <= thread_tasks.max_workers


@pytest.mark.django_db(transaction=True)
def test_the_auditor_is_built_once_per_configuration(monkeypatch):
    built = []
    original = execute.build_auditor

    def counting(config):
        built.append(config)
        return original(config)

    monkeypatch.setattr(execute, "build_auditor", counting)
    for _ in range(3):
        assert execute.execute_run(submit_audit(**INPUT, enqueue=False).pk) == "complete"
    assert len(built) == 1
    before = config_version()
    save_config(AuditorConfig(threshold=0.5), actor="test")
    assert config_version() > before
    run = submit_audit(**INPUT, enqueue=False)
    assert execute.execute_run(run.pk) == "complete"
    assert len(built) == 2 and built[-1].threshold == 0.5
    run.refresh_from_db()
    assert run.threshold == 0.5


@pytest.mark.django_db(transaction=True)
def test_a_first_attempt_stores_without_deleting_and_a_retry_starts_clean():
    run = submit_audit(**INPUT, enqueue=False)
    with CaptureQueriesContext(connection) as ctx:
        execute.execute_run(run.pk)
    assert not [q for q in ctx.captured_queries if q["sql"].startswith("DELETE")]
    lines = run.trace_lines.count()
    AuditRun.objects.filter(pk=run.pk).update(status="pending")  # a retry (attempt 2)
    with CaptureQueriesContext(connection) as ctx:
        execute.execute_run(run.pk)
    assert [q for q in ctx.captured_queries if q["sql"].startswith("DELETE")]
    assert run.trace_lines.count() == lines  # replaced, not doubled


@pytest.fixture
def batches(monkeypatch) -> list[int]:
    """The number of runs of every `execute.execute_runs` call, in order."""
    sizes: list[int] = []
    original = execute.execute_runs

    def recording(run_ids):
        sizes.append(len(run_ids))
        return original(run_ids)

    monkeypatch.setattr(execute, "execute_runs", recording)
    return sizes


@pytest.mark.django_db(transaction=True)
def test_a_shallow_queue_is_taken_whole_by_one_worker_and_a_lone_audit_runs_alone(
    thread_tasks,
    batches,
):
    gate = threading.Event()
    blockers = [
        thread_tasks._pool.executor.submit(gate.wait, 30) for _ in range(thread_tasks.max_workers)
    ]
    runs = [submit_audit(**INPUT) for _ in range(3)]  # fewer than one per worker and a half
    gate.set()
    for blocker in blockers:
        blocker.result()
    assert thread_tasks.wait_idle(timeout=60)
    assert batches == [3]  # one transaction for the three (before: 2 and 1)
    lone = submit_audit(**INPUT)
    assert thread_tasks.wait_idle(timeout=60)
    assert batches == [3]  # alone: `execute_run`, no batch
    statuses = AuditRun.objects.filter(pk__in=[r.pk for r in [*runs, lone]]).values_list(
        "status", flat=True
    )
    assert list(statuses) == ["complete"] * 4


@pytest.mark.django_db(transaction=True)
def test_a_deep_queue_is_claimed_and_stored_in_small_batches(thread_tasks, monkeypatch, batches):
    monkeypatch.setattr(thread_tasks, "batch_size", 8)  # 20 queued: full batches of 8
    gate = threading.Event()
    blockers = [
        thread_tasks._pool.executor.submit(gate.wait, 30) for _ in range(thread_tasks.max_workers)
    ]
    runs = [submit_audit(**INPUT) for _ in range(20)]  # queued behind the blockers
    gate.set()
    for blocker in blockers:
        blocker.result()
    assert thread_tasks.wait_idle(timeout=60)
    assert max(batches) == thread_tasks.batch_size and sum(batches) >= 20 - len(batches)
    statuses = AuditRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    assert set(statuses) == {"complete"}
    for run in runs:
        run.refresh_from_db()
        assert run.results.count() > 0 and run.attempts == 1


async def _no_pause() -> float:
    return 0.0


@pytest.mark.parametrize("someone", ["nobody", "a feed watcher", "a page request"])
@pytest.mark.django_db(transaction=True)
def test_a_deep_queue_takes_longer_batches_only_while_nobody_watches_or_waits(
    thread_tasks,
    monkeypatch,
    batches,
    someone,
):
    monkeypatch.setattr(thread_tasks, "batch_size", 4)
    monkeypatch.setattr(thread_tasks, "deep_batch_size", 8)  # deep: 16 queued (2 threads)
    layer = get_channel_layer()
    async_to_sync(layer.flush)()  # no watcher left behind by an earlier test
    assert not events.has_watchers(events.ALL_AUDITS_GROUP)
    assert not people_first.someone_waiting()
    with contextlib.ExitStack() as stack:
        if someone == "a feed watcher":
            async_to_sync(layer.group_add)(events.ALL_AUDITS_GROUP, "watcher-channel")
            stack.callback(
                async_to_sync(layer.group_discard), events.ALL_AUDITS_GROUP, "watcher-channel"
            )
        elif someone == "a page request":
            stack.enter_context(people_first.waiting())
        gate = threading.Event()
        blockers = [
            thread_tasks._pool.executor.submit(gate.wait, 30)
            for _ in range(thread_tasks.max_workers)
        ]
        runs = [submit_audit(**INPUT, enqueue=False) for _ in range(40)]
        queueing.enqueue_audits([(run.pk, False) for run in runs])  # queued behind blockers
        monkeypatch.setattr(people_first, "make_way", _no_pause)  # batches only, here
        gate.set()
        for blocker in blockers:
            blocker.result()
        assert thread_tasks.wait_idle(timeout=60)
    assert sum(batches) == 40
    if someone == "nobody":
        assert batches[:2] == [8, 8] and batches[-1] <= 4  # shallower: batches of 4 again
    else:
        assert max(batches) == 4
    assert set(
        AuditRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    ) == {"complete"}


def test_the_deep_batch_limit_needs_a_deep_queue_and_never_raises(thread_tasks, monkeypatch):
    deep = thread_tasks.deep_batch_size * thread_tasks.max_workers
    monkeypatch.setattr(events, "has_watchers", lambda group: False)
    monkeypatch.setattr(people_first, "someone_waiting", lambda: False)
    assert thread_tasks._batch_limit(deep - 1) == thread_tasks.batch_size
    assert thread_tasks._batch_limit(deep) == thread_tasks.deep_batch_size

    def broken_layer(group):
        raise RuntimeError("no channel layer")

    monkeypatch.setattr(events, "has_watchers", broken_layer)
    assert thread_tasks._batch_limit(deep) == thread_tasks.batch_size  # as if watched


@pytest.mark.django_db(transaction=True)
def test_one_failing_audit_of_a_batch_leaves_the_others_complete(monkeypatch):
    runs = [submit_audit(**INPUT, enqueue=False) for _ in range(3)]
    original = execute._engine_call

    def flaky(run, *rest):
        if run.pk == runs[1].pk:
            raise RuntimeError("engine exploded")
        return original(run, *rest)

    monkeypatch.setattr(execute, "_engine_call", flaky)
    outcome = execute.execute_runs([r.pk for r in runs] + [runs[0].pk])
    assert [outcome[str(r.pk)] for r in runs] == ["complete", "failed", "complete"]
    assert execute.execute_runs([runs[0].pk, runs[2].pk]) == {
        str(runs[0].pk): "skipped",
        str(runs[2].pk): "skipped",
    }
    run = AuditRun.objects.get(pk=runs[1].pk)
    assert run.status == "failed" and "engine exploded" in run.error


@pytest.mark.django_db(transaction=True)
def test_an_audit_raising_inside_the_engine_fails_alone_in_its_batch(monkeypatch):
    runs = [submit_audit(**INPUT, enqueue=False) for _ in range(3)]
    original = execute._engine_call

    def flaky(run, *rest):
        if run.pk != runs[1].pk:
            return original(run, *rest)

        async def explode():
            raise RuntimeError("engine exploded mid-audit")

        return explode

    monkeypatch.setattr(execute, "_engine_call", flaky)
    outcome = execute.execute_runs([r.pk for r in runs])
    assert [outcome[str(r.pk)] for r in runs] == ["complete", "failed", "complete"]
    assert "mid-audit" in AuditRun.objects.get(pk=runs[1].pk).error


@pytest.fixture
def database_tasks(settings):
    from django.tasks import task_backends  # noqa: F401

    from tests.conftest import IMMEDIATE, _reset_task_backends

    value = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    settings.TASKS = value
    _reset_task_backends(value)
    yield
    _reset_task_backends(IMMEDIATE)


@pytest.mark.django_db(transaction=True)
def test_db_worker_logs_no_record_per_task_at_its_default_verbosity(
    database_tasks,
    settings,
    caplog,
):
    from django.core.management import call_command

    settings.AUDITOR_RECOVERY_INTERVAL = 0
    tasks_logger = logging.getLogger("django.tasks")
    level = tasks_logger.level
    tasks_logger.setLevel(logging.WARNING)  # AUDITOR_TASK_LOG_LEVEL's default
    caplog.set_level(logging.DEBUG)  # every record that is made reaches caplog
    runs = [submit_audit(**INPUT) for _ in range(3)]
    own_settings = connection.settings_dict
    try:
        call_command("db_worker", "--batch", "--no-startup-delay", "--no-reload")
        assert tasks_logger.level == logging.WARNING
    finally:
        connection.settings_dict = own_settings  # the worker made this thread's persistent
        tasks_logger.setLevel(level)
    assert set(
        AuditRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    ) == {"complete"}
    assert not [
        r
        for r in caplog.records
        if r.name.startswith("django.tasks") and r.levelno < logging.WARNING
    ]


@pytest.mark.django_db(transaction=True)
def test_db_worker_claims_a_deep_queue_in_batches(database_tasks, settings, batches):
    from django.core.management import call_command
    from django_tasks_db.models import DBTaskResult

    settings.AUDITOR_RECOVERY_INTERVAL = 0
    runs = [submit_audit(**INPUT) for _ in range(11)]
    assert DBTaskResult.objects.filter(status="READY").count() == 11
    own_settings = connection.settings_dict
    try:
        with CaptureQueriesContext(connection) as ctx:
            call_command(
                "db_worker", "--batch", "--no-startup-delay", "--no-reload", "--claim", "4"
            )
    finally:
        connection.settings_dict = own_settings  # the worker made this thread's persistent
    assert batches == [4, 4, 3]
    assert set(DBTaskResult.objects.values_list("status", flat=True)) == {"SUCCESSFUL"}
    # Claimed and marked successful with one UPDATE each per batch, not one per row.
    updates = [
        q
        for q in ctx.captured_queries
        if q["sql"].startswith('UPDATE "django_tasks_database_dbtaskresult"')
    ]
    assert len(updates) == 6, [q["sql"][:80] for q in ctx.captured_queries]
    for row in DBTaskResult.objects.all():
        assert row.return_value == "complete" and len(row.worker_ids) == 1
        assert row.started_at is not None and row.finished_at >= row.started_at
        assert row.exception_class_path == "" and row.traceback == ""
    assert set(
        AuditRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    ) == {"complete"}


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_first_attempt_are_replaced_not_duplicated():
    from audits.models import TraceLine

    run = submit_audit(**INPUT, enqueue=False)
    TraceLine.objects.create(audit=run, position=0, text="[AUDIT] streamed")  # as a stream does
    assert execute.execute_run(run.pk) == "complete"
    assert not run.trace_lines.filter(text="[AUDIT] streamed").exists()
    batch = [submit_audit(**INPUT, enqueue=False) for _ in range(2)]
    TraceLine.objects.create(audit=batch[1], position=0, text="[AUDIT] streamed")
    assert set(execute.execute_runs([r.pk for r in batch]).values()) == {"complete"}
    assert not TraceLine.objects.filter(text="[AUDIT] streamed").exists()


def test_the_snapshot_key_is_remembered_and_follows_the_snapshot():
    first = {"threshold": 0.3, "analyzers": {"tone": {"enabled": True}}}
    text = workers.snapshot_text(first)
    assert text == json.dumps(first, sort_keys=True)
    assert workers.snapshot_text(dict(first)) is text  # an equal snapshot: no encoding
    changed = {**first, "threshold": 0.5}
    assert workers.snapshot_text(changed) == json.dumps(changed, sort_keys=True)


@pytest.mark.django_db
def test_claiming_a_batch_seeks_its_ids_whatever_the_queue_depth():
    """The claim seeks the ids. With `status = ?` in SQL, SQLite's planner took the status
    index and walked every pending run of the queue for each batch. The claimed runs come
    back as stored now, newest first."""
    runs = [submit_audit(**INPUT, enqueue=False) for _ in range(12)]
    with CaptureQueriesContext(connection) as queries:
        claimed = execute._claim_many([r.pk for r in runs[:11]] + [runs[0].pk])
    assert [r.pk for r in claimed] == [r.pk for r in reversed(runs[:11])]
    assert {(r.status, r.attempts) for r in claimed} == {("running", 1)}
    assert [r.pk for r in execute._claim_many([runs[0].pk, runs[11].pk])] == [runs[11].pk]
    assert AuditRun.objects.get(pk=runs[0].pk).attempts == 1  # claimed once
    if connection.vendor != "sqlite":
        return  # (the plan below is SQLite's EXPLAIN QUERY PLAN)
    claim = next(q["sql"] for q in queries if q["sql"].startswith("UPDATE"))
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {claim}")
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "audit_status_idx" not in plan and "sqlite_autoindex" in plan, plan


@pytest.mark.django_db
def test_the_claim_tells_which_runs_have_trace_lines_already():
    """Storing skips its deletes only when nothing of the runs is stored yet: the claim
    says whether a run has trace lines (a stream writes them as it goes)."""
    from audits.models import TraceLine

    streamed, plain = (submit_audit(**INPUT, enqueue=False) for _ in range(2))
    TraceLine.objects.create(audit=streamed, position=0, text="[AUDIT] paragraph 1")
    claimed = {r.pk: r for r in execute._claim_many([streamed.pk, plain.pk])}
    assert execute._nothing_stored([claimed[plain.pk]]) is True
    assert execute._nothing_stored([claimed[streamed.pk]]) is False
    assert execute._nothing_stored(list(claimed.values())) is False
