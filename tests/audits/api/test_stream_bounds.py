"""A streamed audit keeps at most `limits.max_trace_lines` trace lines, as a batch one."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.test.utils import override_settings

from analyzers.config_store import save_config
from audits.models import TraceLine
from tests.audits.api.test_stream_endpoint import RESPONSE, SAMPLE_CONFIG, ingest

pytestmark = pytest.mark.django_db(transaction=True)


@override_settings(CHANNEL_LAYERS={"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}})
async def test_a_long_stream_keeps_a_bounded_trace_with_a_note(make_key):
    config = json.loads(SAMPLE_CONFIG.read_text())
    config["limits"] = {"max_trace_lines": 5}
    await sync_to_async(save_config)(config, actor="test")
    key = await sync_to_async(make_key)("ingest")
    _, events = await ingest(key, [RESPONSE + "\n\n"] * 10)
    streamed = [data["text"] for name, data in events if name == "audit_trace"]
    assert len(streamed) == 5
    assert "further trace lines not kept" in streamed[-1]
    audit = next(data for name, data in events if name == "audit")
    stored = await sync_to_async(TraceLine.objects.filter(audit_id=audit["id"]).count)()
    assert stored <= 5
