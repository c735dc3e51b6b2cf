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


@pytest.fixture
def staff_cookie(staff_user) -> str:
    """The Cookie header of a staff user's session."""
    from django.test import Client

    client = Client()
    client.force_login(staff_user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def _live(server: str, cookie: str, path: str = "/ws/audits/"):
    """A live socket to `server` with the session `cookie`."""
    import websockets

    return websockets.connect(
        f"ws://{server}{path}", additional_headers={"Cookie": cookie}, origin=f"http://{server}"
    )


async def _submit(server: str, ingest_key: str, text: str) -> str:
    """An audit of `text` through `server`; its id."""
    async with httpx.AsyncClient() as http:
        r = await http.post(
            f"http://{server}/api/audits",
            json={"user_input": text, "response": "Acme is easy."},
            headers={"Authorization": f"Bearer {ingest_key}"},
        )
    assert r.status_code == 202, r.text
    return r.json()["id"]


async def _until_seen(ws, audit_id: str, also: str = "", within: float = 15) -> str:
    """What `ws` receives until the card of `audit_id` (with `also` in it) came."""
    seen = ""
    deadline = time.monotonic() + within
    while f"audit-card-{audit_id}" not in seen or also not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"not seen: {seen[:500]}"
        seen += await asyncio.wait_for(ws.recv(), timeout=left)
    return seen


def test_an_audit_submitted_to_one_server_is_seen_live_on_the_other(
    redis_url, staff_cookie, ingest_key, tmp_path
):

    with daphne(tmp_path, REDIS_URL=redis_url) as one, daphne(tmp_path, REDIS_URL=redis_url) as two:

        async def scenario() -> str:
            async with _live(two, staff_cookie) as ws:
                audit_id = await _submit(one, ingest_key, "redis across processes")
                return await _until_seen(ws, audit_id, 'data-status="complete"')

        html = asyncio.run(scenario())
    assert "redis across processes" in html


def test_live_sockets_on_the_redis_layer_survive_silence(
    redis_url, staff_cookie, ingest_key, tmp_path
):
    """Nothing on the channel layer for longer than redis-py's default socket timeout: the
    layer's blocking reads wait on; both live sockets stay open and the feed still gets
    what the other server ingests afterwards."""
    import uuid

    with daphne(tmp_path, REDIS_URL=redis_url) as one, daphne(tmp_path, REDIS_URL=redis_url) as two:

        async def scenario() -> str:
            async with (
                _live(two, staff_cookie) as feed,
                _live(two, staff_cookie, f"/ws/audits/{uuid.uuid4()}/") as page,
            ):
                silence_until = time.monotonic() + 15
                while (left := silence_until - time.monotonic()) > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(feed.recv(), timeout=left)  # counters only
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(page.recv(), timeout=0.1)
                await asyncio.wait_for(await page.ping(), timeout=5)  # still open
                audit_id = await _submit(one, ingest_key, "after the silence")
                return await _until_seen(feed, audit_id)

        html = asyncio.run(scenario())
        logs = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert "after the silence" in html
    assert "TimeoutError" not in logs, logs[-3000:]


def test_a_feed_that_redis_forgot_joins_again_and_sees_the_other_servers_audits(
    redis_url, staff_cookie, ingest_key, tmp_path
):
    """Redis loses the feed group (as a restarted Redis does) while the server's reads go on
    without failing: within a few seconds the feed is a member again and shows what the
    other server ingests."""
    import redis

    store = redis.Redis.from_url(redis_url)
    with daphne(tmp_path, REDIS_URL=redis_url) as one, daphne(tmp_path, REDIS_URL=redis_url) as two:

        async def scenario() -> str:
            async with _live(two, staff_cookie) as feed:
                deadline = time.monotonic() + 5
                while not store.zcard("asgi:group:audits"):  # the page joins after its accept
                    assert time.monotonic() < deadline, store.keys()
                    await asyncio.sleep(0.05)
                store.delete("asgi:group:audits")
                audit_id = await _submit(one, ingest_key, "forgotten by redis")
                seen = await _until_seen(feed, audit_id)
                assert store.zcard("asgi:group:audits") == 1
                return seen

        html = asyncio.run(scenario())
    assert "forgotten by redis" in html


def test_after_a_lost_membership_the_hub_has_its_pages_catch_up_from_when_it_last_was_one(
    redis_url,
):
    """What was published while the hub was no member never reaches it: once it is one
    again, every page catches up from the database from the last check that found it in
    the group (before the loss), and only then; a kept membership costs no catch-up."""
    import datetime

    import redis
    from channels_redis.core import RedisChannelLayer

    from audits.live import hub as hub_module

    class Page:
        filter_key = "{}"

        def __init__(self) -> None:
            self.catch_ups: list[datetime.datetime] = []

        async def render_events(self, audit_ids):
            return ""

        async def catch_up(self, after):
            self.catch_ups.append(after)

        async def send(self, text_data=None, bytes_data=None, close=False):
            pass

    async def scenario() -> tuple[list, datetime.datetime, datetime.datetime]:
        layer = RedisChannelLayer(hosts=[{"address": redis_url, "socket_timeout": None}])
        hub = hub_module.FeedHub(layer)
        page = Page()
        await hub.join(page)
        await asyncio.sleep(3.5)  # a few checks while a member
        kept = list(page.catch_ups)
        lost_at = django_now()
        redis.Redis.from_url(redis_url).delete("asgi:group:audits")
        deadline = time.monotonic() + 5
        while not page.catch_ups and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.5)  # no second catch-up for the same loss
        await hub.leave(page)
        return kept, lost_at, page.catch_ups

    from django.utils.timezone import now as django_now

    kept, lost_at, catch_ups = asyncio.run(scenario())
    assert kept == []
    assert len(catch_ups) == 1, catch_ups
    after = catch_ups[0]
    assert lost_at - datetime.timedelta(seconds=hub_module.MEMBERSHIP_CHECK_S + 1.5) < after
    assert after <= lost_at


@pytest.fixture
def redis_layer(redis_url, settings):
    """This process's channel layer on the test's redis-server (group expiry 2 s)."""
    from channels.layers import get_channel_layer

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis_url], "group_expiry": 2},
        }
    }
    return get_channel_layer()


def test_on_redis_only_the_audits_someone_watches_get_their_progress(redis_url, redis_layer):
    """One round trip tells which audits have a live member in their group (a member past
    the layer's group expiry is gone); when Redis does not answer, every audit counts as
    watched, so progress is sent as before."""
    import redis
    from asgiref.sync import async_to_sync

    from audits.events import audit_group, watched_audits

    async_to_sync(redis_layer.group_add)(audit_group("watched"), "specific.page!one")
    ids = ["watched", "other", "third"]
    assert watched_audits(ids) == {"watched"}
    time.sleep(2.2)  # the member's join is older than the group expiry now
    assert watched_audits(ids) == set()
    async_to_sync(redis_layer.group_add)(audit_group("third"), "specific.page!two")
    assert watched_audits(ids) == {"third"}
    redis.Redis.from_url(redis_url).shutdown(nosave=True)
    assert watched_audits(ids) == set(ids)


def test_on_redis_a_batch_of_events_goes_only_to_groups_with_a_member(redis_layer, monkeypatch):
    """A worker's batch of state changes: one question to Redis, then sends only to the
    groups someone is in (here one audit's page; no Live page), in order."""
    from asgiref.sync import async_to_sync

    from audits.events import audit_group, publish_many

    page = async_to_sync(redis_layer.new_channel)()
    async_to_sync(redis_layer.group_add)(audit_group("seen"), page)
    sent, send = [], redis_layer.group_send

    async def recorded(group, message):
        sent.append((group, message["event"]["type"]))
        await send(group, message)

    monkeypatch.setattr(redis_layer, "group_send", recorded)
    publish_many(
        [
            {"type": "audit_started", "audit_id": "seen"},
            {"type": "audit_started", "audit_id": "unseen"},
            {"type": "audit_finished", "audit_id": "seen", "status": "complete"},
        ]
    )
    assert sent == [(audit_group("seen"), "audit_started"), (audit_group("seen"), "audit_finished")]
    got = [async_to_sync(redis_layer.receive)(page)["event"]["type"] for _ in range(2)]
    assert got == ["audit_started", "audit_finished"]


def test_in_a_server_a_batch_of_events_goes_through_its_loop_to_groups_with_a_member(
    redis_layer, monkeypatch
):
    """From a thread of a server whose loop runs live pages (an ingest's announcement): the
    batch is handed to that loop without waiting, and sent there only to the groups
    someone is in, in order."""
    import threading

    from asgiref.sync import async_to_sync

    from audits import events

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="server-loop", daemon=True).start()

    async def remember() -> None:
        events.remember_server_loop()

    asyncio.run_coroutine_threadsafe(remember(), loop).result(timeout=5)
    monkeypatch.setattr(events, "_server_loop", events._server_loop)  # forgotten afterwards
    page = async_to_sync(redis_layer.new_channel)()
    async_to_sync(redis_layer.group_add)(events.audit_group("seen"), page)
    sent, send = [], redis_layer.group_send

    async def recorded(group, message):
        sent.append((group, message["event"]["type"], threading.current_thread().name))
        await send(group, message)

    monkeypatch.setattr(redis_layer, "group_send", recorded)
    try:
        events.publish_many(
            [
                {"type": "audit_submitted", "audit_id": "seen"},
                {"type": "audit_submitted", "audit_id": "unseen"},
                {"type": "audit_finished", "audit_id": "seen", "status": "complete"},
            ]
        )
        deadline = time.monotonic() + 5
        while len(sent) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # nothing else follows
    finally:
        loop.call_soon_threadsafe(loop.stop)
    group = events.audit_group("seen")
    assert sent == [
        (group, "audit_submitted", "server-loop"),
        (group, "audit_finished", "server-loop"),
    ]
