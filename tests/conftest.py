"""Shared fixtures: API keys per scope, personas (staff, plain user), an API client.

Audits submitted in tests run in the same thread (ImmediateBackend) once the test's
transaction commits; use `django_capture_on_commit_callbacks(execute=True)` with `db`, or
`transactional_db`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

import pytest
from django.core.management.commands import flush
from django.db import OperationalError
from django.tasks import task_backends
from django.test import Client

from analyzers.models import ApiKey

# Servers started by tests (auditor_site.serve) analyse in their threads unless a test asks
# for analysis processes (tests/audits/execution/test_analysis_processes.py): spawning two Django children
# per server start would cost every server test seconds and ~170 MB.
os.environ.setdefault("AUDITOR_ANALYSIS_PROCESSES", "0")

IMMEDIATE = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}


def _reset_task_backends(value: dict) -> None:
    task_backends._settings = task_backends.configure_settings(value)
    with contextlib.suppress(AttributeError):
        del task_backends["default"]


def pytest_sessionstart(session):
    """Tests run with DEBUG off (the production profile): pages link the compressed,
    content-hashed files of `collectstatic`, collected once per run (unchanged files are
    skipped). Child servers share STATIC_ROOT. Before collection: a test module that builds
    the ASGI application at import starts WhiteNoise, which reads STATIC_ROOT once."""
    from django.conf import settings
    from django.contrib.staticfiles import finders
    from django.core.management import call_command

    manifest = settings.STATIC_ROOT / "staticfiles.json"
    if manifest.exists():
        built = manifest.stat().st_mtime
        sources = (
            storage.path(path)
            for finder in finders.get_finders()
            for path, storage in finder.list(None)
        )
        if all(os.stat(source).st_mtime < built for source in sources):
            return  # nothing changed since the last run
    call_command("collectstatic", interactive=False, verbosity=0)


@pytest.fixture(autouse=True)
def _immediate_tasks(settings):
    """Run tasks inline in tests (the thread pool is tested on its own), in this process:
    analysis processes a test configured (tests/audits/execution/test_analysis_processes.py) are stopped
    before and after each test, whichever thread of an earlier test started them (the
    module's configuration is process-wide: left on, it took a later test's audits)."""
    from audits.execution import processes

    processes.shutdown()
    settings.TASKS = IMMEDIATE
    _reset_task_backends(IMMEDIATE)
    yield
    _reset_task_backends(IMMEDIATE)
    processes.shutdown()


@pytest.fixture
def thread_tasks(settings):
    """The default in-process thread-pool backend instead of ImmediateBackend."""
    value = {
        "default": {
            "BACKEND": "audits.execution.backend.ThreadPoolBackend",
            "OPTIONS": {"MAX_WORKERS": 2, "SWEEP_INTERVAL": 0},
        }
    }
    settings.TASKS = value
    _reset_task_backends(value)
    backend = task_backends["default"]
    yield backend
    backend.close_connections()  # worker threads keep theirs between tasks
    _reset_task_backends(IMMEDIATE)


@pytest.fixture(autouse=True)
def _fresh_config_cache():
    from analyzers.config_store import invalidate_cache

    invalidate_cache()
    yield
    invalidate_cache()


@pytest.fixture
def make_key(db):
    def make(scope: str = "read", name: str | None = None, **fields: Any) -> str:
        _, raw = ApiKey.create_key(name or f"{scope} key", scope=scope, **fields)
        return raw

    return make


@pytest.fixture
def ingest_key(make_key) -> str:
    return make_key("ingest")


@pytest.fixture
def read_key(make_key) -> str:
    return make_key("read")


@pytest.fixture
def admin_key(make_key) -> str:
    return make_key("admin")


@pytest.fixture
def staff_user(django_user_model):
    return django_user_model.objects.create_user(
        "staff", "staff@example.com", "staff-password-1", is_staff=True, is_superuser=True
    )


@pytest.fixture
def plain_user(django_user_model):
    return django_user_model.objects.create_user("plain", "plain@example.com", "plain-password-1")


class ApiClient:
    """django.test.Client speaking JSON with a Bearer key (real URL routing and middleware)."""

    def __init__(self, key: str | None = None):
        self.client = Client()
        self.key = key

    def _headers(self, key: str | None) -> dict[str, str]:
        key = self.key if key is None else key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def get(self, path: str, params: dict | None = None, *, key: str | None = None):
        return self.client.get(path, params or {}, headers=self._headers(key))

    def post(
        self, path: str, body: Any = None, *, key: str | None = None, raw: bytes | None = None
    ):
        data = raw if raw is not None else json.dumps(body)
        return self.client.post(
            path, data, content_type="application/json", headers=self._headers(key)
        )

    def put(self, path: str, body: Any = None, *, key: str | None = None, raw: bytes | None = None):
        data = raw if raw is not None else json.dumps(body)
        return self.client.put(
            path, data, content_type="application/json", headers=self._headers(key)
        )


@pytest.fixture
def api_client(read_key) -> ApiClient:
    """A client authenticated with a read-scope key; pass `key=` per call for others."""
    return ApiClient(read_key)


def pytest_sessionfinish(session, exitstatus):
    """pytest-django drops the test database file; its WAL side files are ours to remove."""
    import os
    from pathlib import Path

    name = os.environ.get("AUDITOR_TEST_DB")
    if name:
        for suffix in ("-wal", "-shm"):
            Path(name + suffix).unlink(missing_ok=True)


def pytest_collection_modifyitems(config, items):
    """Tests that watch calls between guardrail functions are skipped when the guardrails
    are compiled (`make test` runs tests/analyzers/engine once more as Python)."""
    from analyzers.engine.guardrails import COMPILED

    if COMPILED:
        skip = pytest.mark.skip(reason="compiled guardrails call each other directly")
        for item in items:
            if "python_guardrails" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _flush_retried_on_deadlock():
    """A transactional test's closing flush (TRUNCATE of every table) retried when
    PostgreSQL picks it as a deadlock's victim: a server process may still be storing an
    analysis then (it fails on the emptied tables and stops)."""
    handle = flush.Command.handle

    def retried(self, **options):
        for attempt in range(5):
            try:
                return handle(self, **options)
            except flush.CommandError as exc:
                cause = exc.__cause__
                if attempt == 4 or not (
                    isinstance(cause, OperationalError) and "deadlock" in str(cause)
                ):
                    raise
                time.sleep(0.5)

    flush.Command.handle = retried
    yield
    flush.Command.handle = handle
