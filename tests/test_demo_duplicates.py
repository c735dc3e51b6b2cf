"""The demo shows duplicates only where a sample is there to show one: `setup_demo` and
`demo_stream` (run twice, as a restarted `make run` does) give COLLISION_DETECTED only to
the demo cases that name a collision key."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from audits.management.commands.demo_stream import SAMPLES
from audits.models import Annotation, AuditRun
from tests.live_support import BASE_DIR, live_server

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_CASES = [
    json.loads(line)
    for line in (BASE_DIR / "audits" / "demo" / "cases.jsonl").read_text().splitlines()
    if line.strip()
]
REPEATED = {case["id"] for case in DEMO_CASES if case.get("collision_key")}


def test_demo_duplicates_appear_only_where_a_sample_shows_one(tmp_path, ingest_key, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    call_command("setup_demo", audits=60, days=3, stdout=io.StringIO())
    with live_server(tmp_path) as host:
        for _ in range(2):  # a restarted demo_stream streams the same samples again
            call_command(
                "demo_stream",
                url=f"http://{host}",
                key=ingest_key,
                count=len(SAMPLES),
                rate=200,
                words_per_second=0,
                wait=20,
                stdout=io.StringIO(),
                stderr=io.StringIO(),
            )

    streamed = AuditRun.objects.filter(metadata__source="demo_stream")
    assert streamed.count() == 2 * len(SAMPLES)
    assert streamed.filter(status="complete").count() == 2 * len(SAMPLES)
    duplicates = Annotation.objects.filter(type="COLLISION_DETECTED")
    assert not duplicates.filter(audit__metadata__source="demo_stream").exists()
    cases = set(duplicates.values_list("audit__metadata__case", flat=True))
    assert REPEATED and cases == REPEATED  # shown, and only by the cases there to show it
