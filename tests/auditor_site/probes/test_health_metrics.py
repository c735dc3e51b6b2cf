"""Probes and metrics, answered in front of Django: `/healthz` (the process), `/readyz`
(database, channel layer, migrations; 503 naming what failed, and back once it heals),
`/metrics` (Prometheus text, read from the database; off unless a token or an address
lets a scraper in)."""

from __future__ import annotations

import time

import httpx
import pytest
from django.db import OperationalError, connection, connections
from prometheus_client.parser import text_string_to_metric_families

from auditor_site.probes import health
from bench.services import PgCluster
from tests.live_support import live_server

AUDIT = {"user_input": "Which retailers use Acme?", "response": "Decathlon uses Acme."}
TOKEN = "scrape-token-0123456789"


async def asgi(
    method: str, path: str, client: tuple[str, int] = ("127.0.0.1", 5000), **kwargs
) -> httpx.Response:
    from auditor_site.asgi import application

    transport = httpx.ASGITransport(app=application, client=client)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        return await c.request(method, path, **kwargs)


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def fresh_readiness(monkeypatch):
    """A readiness of its own (the module's remembers that migrations were applied)."""
    readiness = health.Readiness()
    monkeypatch.setattr(health, "readiness", readiness)
    return readiness


# --- /healthz and /readyz ---------------------------------------------------------------------


async def test_healthz_answers_without_session_key_or_allowed_host():
    r = await asgi("GET", "/healthz", headers={"Host": "10.9.8.7:8000"})  # a pod's address
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}
    assert r.headers["cache-control"] == "no-store"
    assert (await asgi("POST", "/healthz")).status_code == 405


@pytest.mark.django_db(transaction=True)
async def test_readyz_is_ready_when_database_layer_and_migrations_are(fresh_readiness):
    r = await asgi("GET", "/readyz")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "status": "ok",
        "checks": {"database": "ok", "migrations": "ok", "channel_layer": "ok"},
    }


@pytest.mark.django_db(transaction=True)
async def test_readyz_fails_while_the_database_cannot_be_reached_then_recovers(
    fresh_readiness, monkeypatch
):
    def refuse(self, params):
        raise OperationalError("connection refused")

    assert (await asgi("GET", "/readyz")).status_code == 200  # migrations now remembered

    with monkeypatch.context() as patch:  # every new connection fails: the server is down
        patch.setattr(type(connections["default"]), "get_new_connection", refuse)
        r = await asgi("GET", "/readyz")
    assert r.status_code == 503
    assert r.json()["failed"] == ["database"]
    assert r.json()["checks"]["channel_layer"] == "ok"
    r = await asgi("GET", "/readyz")
    assert r.status_code == 200, r.text


@pytest.mark.django_db(transaction=True)
async def test_readyz_fails_while_a_migration_is_unapplied(fresh_readiness, monkeypatch):
    from django.db.migrations.executor import MigrationExecutor

    plan = MigrationExecutor.migration_plan
    monkeypatch.setattr(
        MigrationExecutor, "migration_plan", lambda self, targets, clean_start=False: ["one"]
    )
    r = await asgi("GET", "/readyz")
    assert r.status_code == 503
    assert r.json()["failed"] == ["migrations"]
    monkeypatch.setattr(MigrationExecutor, "migration_plan", plan)
    assert (await asgi("GET", "/readyz")).status_code == 200


@pytest.mark.django_db(transaction=True)
async def test_readyz_fails_while_the_channel_layer_cannot_be_reached(fresh_readiness, settings):
    from channels.layers import channel_layers

    from bench.services import free_port

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{free_port()}/0"]},  # nothing listens
        }
    }
    channel_layers.backends.clear()
    try:
        r = await asgi("GET", "/readyz")
    finally:
        channel_layers.backends.clear()
    assert r.status_code == 503
    assert r.json()["failed"] == ["channel_layer"]


@pytest.mark.django_db(transaction=True)
def test_readyz_on_a_stopped_postgresql_cluster_fails_then_recovers(tmp_path):
    cluster = PgCluster.from_environment()
    if cluster is None or connection.vendor != "postgresql":
        pytest.skip("needs the throwaway cluster of `make test-postgres`")
    with live_server(tmp_path) as host:
        assert httpx.get(f"http://{host}/readyz").status_code == 200
        connection.close()
        cluster.stop()
        try:
            r = httpx.get(f"http://{host}/readyz", timeout=10)
            assert r.status_code == 503 and r.json()["failed"] == ["database"], r.text
            assert httpx.get(f"http://{host}/healthz").status_code == 200
        finally:
            cluster.start()
        deadline = time.monotonic() + 20
        while (r := httpx.get(f"http://{host}/readyz", timeout=10)).status_code != 200:
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)


# --- /metrics ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_metrics_are_off_unless_a_token_or_an_address_lets_the_scraper_in(settings):
    assert (await asgi("GET", "/metrics")).status_code == 404
    settings.AUDITOR_METRICS_TOKEN = TOKEN
    assert (await asgi("GET", "/metrics")).status_code == 401
    wrong = {"Authorization": "Bearer not-the-token"}
    assert (await asgi("GET", "/metrics", headers=wrong)).status_code == 401
    right = {"Authorization": f"Bearer {TOKEN}"}
    r = await asgi("GET", "/metrics", headers=right)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    settings.AUDITOR_METRICS_TOKEN = ""
    settings.AUDITOR_METRICS_ALLOW = ["10.0.0.0/8"]
    assert (await asgi("GET", "/metrics", client=("10.1.2.3", 4000))).status_code == 200
    assert (await asgi("GET", "/metrics", client=("192.0.2.1", 4000))).status_code == 401


@pytest.mark.django_db(transaction=True)
async def test_metrics_count_what_the_database_holds_as_audits_are_analysed(settings, ingest_key):
    settings.AUDITOR_METRICS_TOKEN = TOKEN
    headers = {"Authorization": f"Bearer {TOKEN}"}

    before = samples((await asgi("GET", "/metrics", headers=headers)).text)
    assert before[("auditor_store_up", ())] == 1
    for _ in range(3):
        r = await asgi(
            "POST", "/api/audits", json=AUDIT, headers={"Authorization": f"Bearer {ingest_key}"}
        )
        assert r.status_code == 202, r.text
    after = samples((await asgi("GET", "/metrics", headers=headers)).text)

    def moved(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0)

    assert moved("auditor_audits_ingested_total") == 3
    assert moved("auditor_audits_analysed_total", outcome="complete") == 3
    assert moved("auditor_audits", status="complete") == 3
    assert after[("auditor_queue_depth", ())] == 0
    assert after[("auditor_queue_oldest_age_seconds", ())] == 0
    assert moved("auditor_analysis_seconds_bucket", le="+Inf") == 3
    assert moved("auditor_queue_wait_seconds_bucket", le="+Inf") == 3
    ok_results = {
        k: v
        for k, v in after.items()
        if k[0] == "auditor_analyzer_results" and ("status", "ok") in k[1]
    }
    assert ok_results and all(v >= 3 for v in ok_results.values())


@pytest.mark.django_db(transaction=True)
async def test_metrics_show_the_queue_and_its_oldest_audit(settings):
    from datetime import timedelta

    from django.utils import timezone

    from audits.models import AuditRun

    settings.AUDITOR_METRICS_TOKEN = TOKEN
    await AuditRun.objects.acreate(
        user_input="q", response="a", created_at=timezone.now() - timedelta(minutes=2)
    )
    text = (await asgi("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})).text
    got = samples(text)
    assert got[("auditor_queue_depth", ())] == 1
    assert 100 < got[("auditor_queue_oldest_age_seconds", ())] < 600


@pytest.mark.django_db(transaction=True)
def test_metrics_count_the_open_live_sockets_of_the_process(tmp_path, staff_user):
    import asyncio

    import websockets
    from django.conf import settings as conf
    from django.test import Client

    client = Client()
    client.force_login(staff_user)
    cookie = f"{conf.SESSION_COOKIE_NAME}={client.cookies[conf.SESSION_COOKIE_NAME].value}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with live_server(tmp_path, AUDITOR_METRICS_TOKEN=TOKEN) as host:

        def live() -> float:
            got = samples(httpx.get(f"http://{host}/metrics", headers=headers).text)
            return got.get(("auditor_live_connections", (("kind", "live"),)), 0)

        async def scenario() -> tuple[float, float]:
            async with websockets.connect(
                f"ws://{host}/ws/audits/",
                origin=f"http://{host}",
                additional_headers={"Cookie": cookie},
            ):
                await asyncio.sleep(0.2)
                during = await asyncio.to_thread(live)
            await asyncio.sleep(0.2)
            return during, await asyncio.to_thread(live)

        during, after = asyncio.run(scenario())
    assert (during, after) == (1, 0)
