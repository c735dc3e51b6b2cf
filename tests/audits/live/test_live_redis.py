"""Two server processes sharing a real redis-server: an audit submitted to one is seen live on the other."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time

import httpx
import pytest
from django.conf import settings

from tests.live_support import daphne, free_port

pytestmark = pytest.mark.django_db(transaction=True)


def _redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None:
        try:
            subprocess.run(
                ["apt-get", "install", "-y", "redis-server"],
                check=True,
                capture_output=True,
                timeout=180,
            )
        except (OSError, subprocess.SubprocessError):
            pytest.skip(
                "redis-server is not installed and `apt-get install -y redis-server` failed"
            )
        path = shutil.which("redis-server")
        if path is None:
            pytest.skip("redis-server could not be installed")
    return path


@pytest.fixture
def redis_url():
    binary = _redis_server()
    port = free_port()
    subprocess.run(
        [
            binary,
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        check=True,
        timeout=10,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        client = redis.Redis.from_url(url)
        for _ in range(50):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        yield url
    finally:
        with contextlib.suppress(Exception):
            redis.Redis.from_url(url).shutdown(nosave=True)


def test_an_audit_submitted_to_one_server_is_seen_live_on_the_other(
    redis_url, staff_user, ingest_key, tmp_path
):
    import websockets
    from django.test import Client

    client = Client()
    client.force_login(staff_user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    with daphne(tmp_path, REDIS_URL=redis_url) as one, daphne(tmp_path, REDIS_URL=redis_url) as two:

        async def scenario() -> str:
            async with websockets.connect(
                f"ws://{two}/ws/audits/",
                additional_headers={"Cookie": cookie},
                origin=f"http://{two}",
            ) as ws:
                async with httpx.AsyncClient() as http:
                    r = await http.post(
                        f"http://{one}/api/audits",
                        json={"user_input": "redis across processes", "response": "Acme is easy."},
                        headers={"Authorization": f"Bearer {ingest_key}"},
                    )
                    assert r.status_code == 202, r.text
                    audit_id = r.json()["id"]
                seen = ""
                deadline = time.monotonic() + 15
                while f"audit-card-{audit_id}" not in seen or 'data-status="complete"' not in seen:
                    left = deadline - time.monotonic()
                    assert left > 0, f"not seen on the other server: {seen[:500]}"
                    seen += await asyncio.wait_for(ws.recv(), timeout=left)
                return seen

        html = asyncio.run(scenario())
    assert "redis across processes" in html


def test_live_sockets_on_the_redis_layer_survive_silence(
    redis_url, staff_user, ingest_key, tmp_path
):
    """Nothing on the channel layer for longer than redis-py's default socket timeout: the
    layer's blocking reads wait on; both live sockets stay open and the feed still gets
    what the other server ingests afterwards."""
    import uuid

    import websockets
    from django.test import Client

    client = Client()
    client.force_login(staff_user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    with daphne(tmp_path, REDIS_URL=redis_url) as one, daphne(tmp_path, REDIS_URL=redis_url) as two:

        async def scenario() -> str:
            headers = {"Cookie": cookie}
            async with (
                websockets.connect(
                    f"ws://{two}/ws/audits/", additional_headers=headers, origin=f"http://{two}"
                ) as feed,
                websockets.connect(
                    f"ws://{two}/ws/audits/{uuid.uuid4()}/",
                    additional_headers=headers,
                    origin=f"http://{two}",
                ) as page,
            ):
                silence_until = time.monotonic() + 15
                while (left := silence_until - time.monotonic()) > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(feed.recv(), timeout=left)  # counters only
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(page.recv(), timeout=0.1)
                await asyncio.wait_for(await page.ping(), timeout=5)  # still open
                async with httpx.AsyncClient() as http:
                    r = await http.post(
                        f"http://{one}/api/audits",
                        json={"user_input": "after the silence", "response": "Acme is easy."},
                        headers={"Authorization": f"Bearer {ingest_key}"},
                    )
                    assert r.status_code == 202, r.text
                    audit_id = r.json()["id"]
                seen = ""
                deadline = time.monotonic() + 15
                while f"audit-card-{audit_id}" not in seen:
                    left = deadline - time.monotonic()
                    assert left > 0, f"not seen after the silence: {seen[:500]}"
                    seen += await asyncio.wait_for(feed.recv(), timeout=left)
                return seen

        html = asyncio.run(scenario())
        logs = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert "after the silence" in html
    assert "TimeoutError" not in logs, logs[-3000:]
