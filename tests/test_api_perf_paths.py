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
