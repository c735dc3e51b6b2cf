"""The cheap paths of the ingest API: cached keys, the in-memory rate limit, DB queue rows."""

from __future__ import annotations

import pytest
from django.utils import timezone

from analyzers import auth
from analyzers.models import ApiKey, RateLimitCounter
from audits.models import AuditRun

pytestmark = pytest.mark.django_db

BODY = {"user_input": "Which retailers use Acme?", "response": "Acme is easy to set up."}


def test_revoking_through_save_takes_effect_at_once(api_client, ingest_key):
    assert api_client.post("/api/audits", BODY, key=ingest_key).status_code == 202
    key = ApiKey.objects.get(prefix=ingest_key.split("_")[1])
    key.revoked_at = timezone.now()
    key.save()
    assert api_client.post("/api/audits", BODY, key=ingest_key).status_code == 401


def test_a_revocation_elsewhere_is_seen_when_the_cache_entry_expires(
    api_client, ingest_key, monkeypatch
):
    assert api_client.post("/api/audits", BODY, key=ingest_key).status_code == 202
    # No signal: like a revocation in another process.
    ApiKey.objects.filter(prefix=ingest_key.split("_")[1]).update(revoked_at=timezone.now())
    assert api_client.post("/api/audits", BODY, key=ingest_key).status_code == 202
    monkeypatch.setattr(auth, "AUTH_CACHE_SECONDS", 0.0)
    auth.forget_keys()
    assert api_client.post("/api/audits", BODY, key=ingest_key).status_code == 401


def test_only_the_exact_token_hits_the_cache(api_client, ingest_key):
    assert api_client.post("/api/audits", BODY, key=ingest_key).status_code == 202
    assert api_client.post("/api/audits", BODY, key=ingest_key + "x").status_code == 401


def test_a_batched_rate_limit_is_exact_in_one_process(api_client, make_key):
    key = make_key("ingest", rate_limit_per_minute=40)
    codes = [api_client.post("/api/audits", BODY, key=key).status_code for _ in range(42)]
    assert codes[:40] == [202] * 40
    assert codes[40:] == [429, 429]
    assert AuditRun.objects.count() == 40


def test_hits_of_other_processes_count_after_a_sync(api_client, make_key, monkeypatch):
    key = make_key("ingest", rate_limit_per_minute=100)
    assert api_client.post("/api/audits", BODY, key=key).status_code == 202
    # Another process accepted 99 more for this key and added them to the shared counter.
    RateLimitCounter.objects.update(count=100)
    monkeypatch.setattr(auth, "RATE_SYNC_SECONDS", 0.0)
    r = api_client.post("/api/audits", BODY, key=key)
    assert r.status_code == 429
    assert int(r["Retry-After"]) >= 1


def test_the_shared_counter_gets_this_process_hits(api_client, make_key, monkeypatch):
    monkeypatch.setattr(auth, "RATE_SYNC_SECONDS", 0.0)
    key = make_key("ingest", rate_limit_per_minute=1000)
    for _ in range(5):
        assert api_client.post("/api/audits", BODY, key=key).status_code == 202
    assert RateLimitCounter.objects.get().count == 5


def test_a_database_queue_row_commits_with_the_audit(api_client, ingest_key, settings):
    from django_tasks_db.models import DBTaskResult

    from tests.conftest import _reset_task_backends

    value = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    settings.TASKS = value
    _reset_task_backends(value)
    r = api_client.post("/api/audits", BODY, key=ingest_key)
    assert r.status_code == 202
    task = DBTaskResult.objects.get()
    assert task.args_kwargs["args"] == [r.json()["id"]]


def test_a_batch_queues_its_audits_in_one_insert_with_the_rows_enqueue_makes(
    api_client, ingest_key, settings, django_assert_max_num_queries
):
    """A batch's database queue rows: one INSERT, each the row `run_audit.enqueue` makes,
    carrying up to RUNS_PER_ROW of its audits (a large one alone, on its lane)."""
    from django_tasks_db.models import DBTaskResult

    from audits.execution.queueing import RUNS_PER_ROW
    from audits.execution.tasks import run_audit
    from tests.conftest import _reset_task_backends

    value = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    settings.TASKS = value
    _reset_task_backends(value)
    big = {**BODY, "response": "x" * settings.AUDITOR_LARGE_AUDIT_CHARS}
    small = RUNS_PER_ROW + 8  # two rows of 20
    # the key, its rate counter, the configuration, the audits, their queue rows: 18
    with django_assert_max_num_queries(20):
        r = api_client.post("/api/audits/batch", {"audits": [BODY] * small + [big]}, key=ingest_key)
    assert r.status_code == 202
    ids = [item["id"] for item in r.json()["items"]]
    rows = list(DBTaskResult.objects.all())
    assert sorted(len(row.args_kwargs["args"]) for row in rows) == [1, 20, 20]
    carried = [one for row in rows for one in row.args_kwargs["args"]]
    assert sorted(carried) == sorted(ids)  # each audit in exactly one row
    made = run_audit.enqueue(ids[0]).db_result  # the library's own way, for comparison
    fields = [
        "status",
        "priority",
        "task_path",
        "queue_name",
        "run_after",
        "backend_name",
        "worker_ids",
    ]
    assert [ids[-1]] in [row.args_kwargs["args"] for row in rows]  # the large one alone
    for row in rows:
        assert row.args_kwargs["kwargs"] == {}
        assert row.enqueued_at is not None
        assert [getattr(row, f) for f in fields] == [getattr(made, f) for f in fields]
    assert made.args_kwargs == {"args": [ids[0]], "kwargs": {}}


def test_a_row_of_several_audits_runs_them_all(api_client, ingest_key, settings):
    """`run_audit` with a row's several runs analyses and stores each of them."""
    from django_tasks_db.models import DBTaskResult

    from audits.execution.tasks import run_audit
    from tests.conftest import _reset_task_backends

    value = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    settings.TASKS = value
    _reset_task_backends(value)
    r = api_client.post("/api/audits/batch", {"audits": [BODY] * 5}, key=ingest_key)
    (row,) = DBTaskResult.objects.all()
    outcome = run_audit.call(*row.args_kwargs["args"])
    assert outcome.split(",") == ["complete"] * 5
    ids = [item["id"] for item in r.json()["items"]]
    statuses = AuditRun.objects.filter(pk__in=ids).values_list("status", flat=True)
    assert sorted(statuses) == ["complete"] * 5


def test_submitted_rows_are_converted_before_the_write_lock(api_client, ingest_key, monkeypatch):
    """The audits' INSERT is built (every value converted for the driver) before the
    transaction whose write lock holds every other writer; only its run is inside."""
    from django.db import connection

    from audits.intake import submit
    from audits.store import bulk

    prepare, run, depths = bulk.prepare_insert, bulk.run_statement, []

    def preparing(model, *args, **kwargs):
        statement = prepare(model, *args, **kwargs)
        if model is AuditRun:
            depths.append(("built", len(connection.atomic_blocks)))
        return statement

    def running(statement):
        if "audits_auditrun" in statement.sql.split("(")[0]:
            depths.append(("run", len(connection.atomic_blocks)))
        return run(statement)

    monkeypatch.setattr(submit, "prepare_insert", preparing)
    monkeypatch.setattr(submit, "run_statement", running)
    assert (
        api_client.post("/api/audits/batch", {"audits": [BODY] * 3}, key=ingest_key).status_code
        == 202
    )
    assert api_client.post("/api/audits", BODY, key=ingest_key).status_code == 202
    assert [what for what, _ in depths] == ["built", "run"] * 2
    for (_, built), (_, ran) in zip(depths[::2], depths[1::2], strict=True):
        assert built < ran  # the statement's transaction began after it was built
