"""The streamed demo (`manage.py demo_stream`) shows what it claims: every sample, streamed
word by word through /ws/ingest/ with the demo configuration, surfaces its analyzer with
the finding it is there to show."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from analyzers.config_store import save_config
from auditor_site.asgi import application
from audits.management.commands.demo_stream import SAMPLES, stream_head
from tests.live_support import BASE_DIR

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_CONFIG = BASE_DIR / "audits" / "demo" / "config.json"


async def stream(key: str, head: dict, response: str) -> dict:
    ws = WebsocketCommunicator(
        application, "/ws/ingest/", headers=[(b"authorization", f"Bearer {key}".encode())]
    )
    connected, _ = await ws.connect(timeout=5)
    assert connected
    await ws.send_to(text_data=json.dumps(head))
    for word in response.split(" "):  # as demo_stream sends it
        await ws.send_to(text_data=json.dumps({"text": word + " "}))
    await ws.send_to(text_data=json.dumps({"done": True}))
    while True:
        message = await ws.receive_output(timeout=20)
        assert message["type"] != "websocket.close", "the stream closed without an audit"
        frame = json.loads(message["text"])
        if frame["event"] == "audit":
            await ws.disconnect()
            return frame["data"]


@pytest.fixture
def demo_config(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    save_config(json.loads(DEMO_CONFIG.read_text()), actor="test")


@pytest.mark.parametrize("n", range(len(SAMPLES)), ids=[s.finding for s in SAMPLES])
def test_every_demo_sample_surfaces_what_it_is_there_to_show(demo_config, ingest_key, n):
    sample = SAMPLES[n]
    audit = async_to_sync(stream)(ingest_key, stream_head(sample, n), sample.response)
    assert audit["status"] == "complete"
    surfaced = {r["analyzer_id"]: r for r in audit["surfaced_results"]}
    assert sample.analyzer in surfaced, (
        f"{sample.user_input!r} should surface {sample.analyzer}; surfaced: {sorted(surfaced)}"
    )
    types = {a["type"] for a in surfaced[sample.analyzer]["annotations"]}
    assert sample.finding in types


def test_the_json_sample_asks_for_json_per_audit():
    json_samples = [s for s in SAMPLES if s.finding == "JSON_PARSE_FAILED"]
    assert json_samples and json_samples[0].options["redflag"]["require_json"] is True
    assert stream_head(json_samples[0], 3)["options"] == json_samples[0].options
