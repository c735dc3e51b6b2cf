"""A page that closes its socket while an update is on its way: no traceback.

Servers refuse a send on a socket the page already closed, before the consumer has seen
the disconnect (daphne: autobahn's `Disconnected("Attempt to send on a closed
protocol")`; uvicorn: `ClientDisconnected`). The test runs the real consumers, channel
layer, session auth and origin check; only the server's transport is played here, in the
state it is in after the page left: it raises what daphne raises.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from asgiref.sync import sync_to_async
from autobahn.exception import Disconnected
from channels.testing import WebsocketCommunicator

from auditor_site.asgi import application
from audits.events import apublish
from audits.models import AuditRun
from tests.live_support import session_headers

pytestmark = pytest.mark.django_db(transaction=True)


class ClosedSocketQueue(asyncio.Queue):
    """The server side of the socket: once `closed`, a send raises like daphne's."""

    closed = False
    refused = 0

    async def put(self, item):
        if self.closed and item.get("type") == "websocket.send":
            self.refused += 1
            raise Disconnected("Attempt to send on a closed protocol")
        await super().put(item)


class Communicator(WebsocketCommunicator):
    @property
    def output_queue(self):
        if self._output_queue is None:
            self._output_queue = ClosedSocketQueue()
        return self._output_queue


@pytest.fixture(autouse=True)
def _fresh_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


async def _leave_while_updates_arrive(path: str, headers, events: list[dict]) -> Communicator:
    page = Communicator(application, path, headers=headers)
    connected, _ = await page.connect(timeout=5)
    assert connected
    await page.receive_nothing(timeout=0.2)  # whatever it sends on connect
    page.output_queue.closed = True  # the page navigated away; the server knows, the app not yet
    for event in events:
        await apublish(event)
    for _ in range(50):
        if page.output_queue.refused:
            break
        await asyncio.sleep(0.02)
    assert page.output_queue.refused, "no update was sent after the page left"
    await page.send_input({"type": "websocket.disconnect", "code": 1001})
    await page.wait(timeout=5)  # re-raises what the application raised
    return page


async def test_a_detail_page_leaving_mid_stream_logs_no_error(staff_user, caplog):
    run = await sync_to_async(AuditRun.objects.create)(
        user_input="q", response="Streaming text.", status=AuditRun.Status.RUNNING
    )
    headers = await sync_to_async(session_headers)(staff_user)
    with caplog.at_level(logging.INFO):
        await _leave_while_updates_arrive(
            f"/ws/audits/{run.pk}/",
            headers,
            [
                {"type": "stream_progress", "audit_id": str(run.pk)},
                {"type": "stream_progress", "audit_id": str(run.pk)},
            ],
        )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_the_live_feed_leaving_logs_no_error(staff_user, caplog):
    run = await sync_to_async(AuditRun.objects.create)(user_input="q", response="x")
    headers = await sync_to_async(session_headers)(staff_user)
    with caplog.at_level(logging.INFO):
        page = Communicator(application, "/ws/audits/", headers=headers)
        connected, _ = await page.connect(timeout=5)
        assert connected
        page.output_queue.closed = True
        await page.send_to(text_data='{"after": "2000-01-01T00:00:00+00:00"}')  # a catch-up
        for _ in range(50):
            if page.output_queue.refused:
                break
            await asyncio.sleep(0.02)
        assert page.output_queue.refused
        await page.send_input({"type": "websocket.disconnect", "code": 1001})
        await page.wait(timeout=5)
    assert run.pk and not [r for r in caplog.records if r.levelno >= logging.WARNING]
