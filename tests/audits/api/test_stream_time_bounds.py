"""A stream is bounded in time: idle for AUDITOR_STREAM_IDLE_TIMEOUT_S or open for
AUDITOR_STREAM_MAX_S, it ends with an `error` 408 and what arrived is stored, incomplete."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from auditor_site.asgi import application
from audits.models import AuditRun
from tests.audits.api.test_stream_endpoint import HEAD, call_http

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _setup(settings, transactional_db):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


async def frames_until_close(ws: WebsocketCommunicator, timeout: float) -> list[tuple[str, dict]]:
    events = []
    while True:
        message = await ws.receive_output(timeout=timeout)
        if message["type"] == "websocket.close":
            return events
        frame = json.loads(message["text"])
        events.append((frame["event"], frame["data"]))


async def open_stream(key: str) -> tuple[WebsocketCommunicator, str]:
    ws = WebsocketCommunicator(
        application, "/ws/ingest/", headers=[(b"authorization", f"Bearer {key}".encode())]
    )
    connected, _ = await ws.connect(timeout=5)
    assert connected
    await ws.send_to(text_data=json.dumps(HEAD))
    accepted = json.loads(await ws.receive_from(timeout=5))
    return ws, accepted["data"]["id"]


async def test_an_idle_websocket_stream_ends_and_keeps_what_arrived(make_key, settings):
    settings.AUDITOR_STREAM_IDLE_TIMEOUT_S = 1
    key = await sync_to_async(make_key)("ingest")
    ws, audit_id = await open_stream(key)
    await ws.send_to(text_data=json.dumps({"text": "Arrived before the pause."}))
    started = time.monotonic()
    events = await frames_until_close(ws, timeout=10)
    assert 0.8 < time.monotonic() - started < 5
    assert ("error", {"status": 408, "detail": events[0][1]["detail"]}) == events[0]
    assert "AUDITOR_STREAM_IDLE_TIMEOUT_S" in events[0][1]["detail"]
    audit = events[-1][1]
    assert events[-1][0] == "audit" and audit["id"] == audit_id
    assert (audit["incomplete"], audit["response"]) == (True, "Arrived before the pause.")


async def test_a_websocket_stream_that_keeps_sending_ends_at_its_total_bound(make_key, settings):
    settings.AUDITOR_STREAM_IDLE_TIMEOUT_S = 1
    settings.AUDITOR_STREAM_MAX_S = 2
    key = await sync_to_async(make_key)("ingest")
    ws, audit_id = await open_stream(key)
    started = time.monotonic()
    for _ in range(30):  # a frame every 0.2 s: never idle
        await ws.send_to(text_data=json.dumps({"text": "word "}))
        await asyncio.sleep(0.2)
        if not await ws.receive_nothing(timeout=0.01):
            break
    events = await frames_until_close(ws, timeout=10)
    assert time.monotonic() - started < 4
    error = next(data for name, data in events if name == "error")
    assert error["status"] == 408 and "AUDITOR_STREAM_MAX_S" in error["detail"]
    run = await sync_to_async(AuditRun.objects.get)(pk=audit_id)
    assert run.incomplete is True and run.response.startswith("word word")


async def test_an_http_stream_ends_at_its_total_bound(make_key, settings):
    settings.AUDITOR_STREAM_MAX_S = 1
    key = await sync_to_async(make_key)("ingest")
    queue = [
        {"type": "http.request", "body": (json.dumps(HEAD) + "\n").encode(), "more_body": True},
        {"type": "http.request", "body": b'{"text": "Arrived."}\n', "more_body": True},
    ]

    async def receive():
        if queue:
            return queue.pop(0)
        await asyncio.sleep(30)  # the client sends nothing more, and stays
        return {"type": "http.disconnect"}

    started = time.monotonic()
    status, events = await call_http(key, [], receive=receive)
    assert time.monotonic() - started < 5
    assert status == 200
    error = next(data for name, data in events if name == "error")
    assert error["status"] == 408 and "AUDITOR_STREAM_MAX_S" in error["detail"]
    assert events[-1][0] == "audit"
    assert (events[-1][1]["incomplete"], events[-1][1]["response"]) == (True, "Arrived.")
