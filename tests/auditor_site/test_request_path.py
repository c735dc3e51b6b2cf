"""The lean ASGI request path (auditor_site/asgi_handler.py, the CSRF twin in
auditor_site/middleware.py): no request thread for an async API call, Django's request
signals still tidy the thread a request used, other receivers still get them, and the
protections are unchanged over real HTTP."""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest
from django.conf import settings
from django.core.cache.backends.locmem import LocMemCache
from django.core.signals import request_finished, request_started
from django.db.backends.signals import connection_created
from django.http import FileResponse, JsonResponse
from django.test import Client, override_settings

from auditor_site.asgi_handler import (
    RequestThread,
    ReusableThreadASGIHandler,
    _closes_inline,
    _ExecutorPool,
)
from tests.live_support import live_server

AUDIT = {"user_input": "Which retailers use Acme?", "response": "Decathlon uses Acme."}


class CountingPool(_ExecutorPool):
    def __init__(self) -> None:
        super().__init__()
        self.acquired = 0

    def acquire(self):
        self.acquired += 1
        return super().acquire()


@pytest.fixture
def pool(monkeypatch) -> CountingPool:
    counting = CountingPool()
    monkeypatch.setattr(ReusableThreadASGIHandler, "executors", counting)
    return counting


async def asgi(method: str, path: str, **kwargs) -> httpx.Response:
    from auditor_site.asgi import application

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.request(method, path, **kwargs)


# --- no request thread for an async API call ------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_an_api_submission_takes_no_request_thread(pool, ingest_key, monkeypatch):
    from analyzers import auth

    monkeypatch.setattr(auth, "RATE_SYNC_SECONDS", 3600)  # no counter sync in between
    headers = {"Authorization": f"Bearer {ingest_key}"}
    # The key's first call looks it up in the database (and syncs the rate counter).
    assert (await asgi("POST", "/api/audits", json=AUDIT, headers=headers)).status_code == 202
    pool.acquired = 0
    response = await asgi("POST", "/api/audits", json=AUDIT, headers=headers)
    assert response.status_code == 202
    assert response.headers["X-Frame-Options"] == "DENY"
    assert pool.acquired == 0
    login = await asgi("GET", "/accounts/login/")  # a sync view: its thread, once
    assert login.status_code == 200
    assert pool.acquired == 1


@pytest.mark.django_db(transaction=True)
async def test_reading_an_audit_takes_no_request_thread(pool, read_key):
    headers = {"Authorization": f"Bearer {read_key}"}
    created = await asgi("POST", "/api/audits", json=AUDIT, headers=headers)
    audit_id = created.json()["id"]
    pool.acquired = 0
    found = await asgi("GET", f"/api/audits/{audit_id}", headers=headers)
    assert found.status_code == 200 and found.json()["id"] == audit_id
    assert (await asgi("GET", f"/api/audits/{uuid.uuid4()}", headers=headers)).status_code == 404
    assert (await asgi("GET", "/api/audits/not-a-uuid", headers=headers)).status_code == 404
    assert (await asgi("GET", f"/api/audits/{audit_id}")).status_code == 401
    assert pool.acquired == 0


@pytest.mark.django_db(transaction=True)
async def test_a_request_thread_closes_its_database_connections(pool, staff_user):
    from asgiref.sync import sync_to_async

    client = Client()
    await sync_to_async(client.force_login)(staff_user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    opened = []

    def record(sender, connection, **kwargs):
        opened.append((threading.current_thread().name, connection))

    connection_created.connect(record)
    try:
        page = await asgi("GET", "/", headers={"Cookie": cookie})
    finally:
        connection_created.disconnect(record)
    assert page.status_code == 200
    on_request_thread = [conn for name, conn in opened if name.startswith("request")]
    assert on_request_thread, opened  # the page's queries ran on its request thread
    # request_finished (close_old_connections) ran there: CONN_MAX_AGE=0 closes them.
    assert all(conn.connection is None for conn in on_request_thread)


@pytest.mark.django_db(transaction=True)
async def test_other_receivers_of_the_request_signals_are_called(pool, ingest_key):
    calls = []

    def started(sender, **kwargs):
        calls.append("started")

    def finished(sender, **kwargs):
        calls.append("finished")

    request_started.connect(started)
    request_finished.connect(finished)
    try:
        response = await asgi(
            "POST", "/api/audits", json=AUDIT, headers={"Authorization": f"Bearer {ingest_key}"}
        )
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)
    assert response.status_code == 202
    assert calls == ["started", "finished"]


# --- RequestThread, and when a response closes on the event loop -----------------------------


def test_the_first_job_runs_just_before_the_first_call_on_its_thread():
    pool = CountingPool()
    ran = []
    thread = RequestThread(pool, first=lambda: ran.append(("first", threading.get_ident())))
    assert not thread.used and pool.acquired == 0
    ident = thread.submit(lambda: ran.append(("call", threading.get_ident())) or 7)
    assert ident.result(5) == 7
    thread.submit(lambda: ran.append(("again", threading.get_ident()))).result(5)
    assert [name for name, _ in ran] == ["first", "call", "again"]
    assert len({tid for _, tid in ran}) == 1 and ran[0][1] != threading.get_ident()
    assert pool.acquired == 1
    thread.release()


def test_an_error_of_the_first_job_is_the_first_calls():
    def boom():
        raise RuntimeError("receiver failed")

    thread = RequestThread(CountingPool(), first=boom)
    with pytest.raises(RuntimeError, match="receiver failed"):
        thread.submit(lambda: 1).result(5)
    assert thread.submit(lambda: 2).result(5) == 2  # once only
    thread.release()


def test_an_unused_request_thread_takes_nothing_from_the_pool():
    pool = CountingPool()
    RequestThread(pool, first=lambda: None).release()
    assert pool.acquired == 0 and pool.idle_count() == 0


class ClosingCache(LocMemCache):
    def close(self, **kwargs):  # a cache with connections to close (redis, memcached)
        pass


def test_a_response_closes_inline_only_with_nothing_to_release(tmp_path):
    plain = JsonResponse({"ok": True})
    assert _closes_inline(plain, ReusableThreadASGIHandler)
    path = tmp_path / "file.txt"
    path.write_text("x")
    with path.open("rb") as handle:
        assert not _closes_inline(FileResponse(handle), ReusableThreadASGIHandler)
    with override_settings(CACHES={"default": {"BACKEND": f"{__name__}.ClosingCache"}}):
        from django.core.cache import caches

        caches["default"].get("x")
        assert not _closes_inline(plain, ReusableThreadASGIHandler)


# --- the protections over real HTTP ----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_protections_hold_over_http(tmp_path, ingest_key, staff_user):
    client = Client()
    client.force_login(staff_user)
    sid = client.cookies[settings.SESSION_COOKIE_NAME].value
    session = {settings.SESSION_COOKIE_NAME: sid}
    with (
        live_server(tmp_path) as host,
        httpx.Client(base_url=f"http://{host}", timeout=30) as http,
        httpx.Client(base_url=f"http://{host}", timeout=30, cookies=session) as browser,
    ):
        accepted = http.post(
            "/api/audits", json=AUDIT, headers={"Authorization": f"Bearer {ingest_key}"}
        )
        assert accepted.status_code == 202, accepted.text
        assert accepted.headers["X-Content-Type-Options"] == "nosniff"
        assert accepted.headers["X-Frame-Options"] == "DENY"
        anonymous = http.post("/api/audits", json=AUDIT)
        assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"] == "Bearer"
        # A browser's session POST still needs its CSRF token (the check runs in a thread).
        refused = browser.post("/tuning/", data={"threshold": "0.4"})
        assert refused.status_code == 403
        page = browser.get("/tuning/")
        assert page.status_code == 200
        token = browser.cookies["csrftoken"]
        saved = browser.post("/tuning/", data={"threshold": "0.4", "csrfmiddlewaretoken": token})
        assert saved.status_code == 302
        # Its message (lazy storage: made when the view adds it) shows on the next page.
        shown = browser.get(saved.headers["Location"])
        assert "Threshold saved: 0.40 (was" in shown.text
