"""Publishing progress: only to watched groups, one event per state change, one loop."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from audits import events
from audits.execution import execute
from audits.intake.submit import submit_audit


@pytest.fixture(autouse=True)
def _in_memory_layer(settings):
    """These tests read the in-memory layer's groups (the PostgreSQL run sets REDIS_URL)."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


INPUT = {
    "user_input": "Which retailers use Acme?",
    "response": "Acme is easy to set up. See https://www.acme.example/docs.",
}


@pytest.fixture
def sent(monkeypatch):
    """(group, event type, loop) of every group_send of the real in-memory layer."""
    layer = get_channel_layer()
    async_to_sync(layer.flush)()  # no members left by other tests
    original = layer.group_send
    calls: list[tuple[str, str, asyncio.AbstractEventLoop]] = []

    async def recording(group, message):
        calls.append((group, message["event"]["type"], asyncio.get_running_loop()))
        await original(group, message)

    monkeypatch.setattr(layer, "group_send", recording)
    yield calls


def test_nothing_is_sent_to_groups_nobody_watches(sent):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("audit-1", channel)
    events.publish({"type": "audit_started", "audit_id": "1"})
    events.publish({"type": "audit_started", "audit_id": "2"})
    events.publish({"type": "analyzer_started", "audit_id": "2"})
    # Only the watched audit's group; the feed group ("audits") has no member either.
    assert [(g, t) for g, t, _ in sent] == [("audit-1", "audit_started")]
    assert events.has_watchers("audit-1") and not events.has_watchers("audits")
    async_to_sync(layer.group_discard)("audit-1", channel)


def test_threads_publish_through_one_long_lived_loop(sent):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("audit-7", channel)
    threads = [
        threading.Thread(
            target=events.publish, args=({"type": "analyzer_started", "audit_id": "7"},)
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events.publish({"type": "analyzer_started", "audit_id": "7"})
    loops = {loop for _, _, loop in sent}
    assert len(sent) == 4 and loops == {events.publisher_loop()}
    async_to_sync(layer.group_discard)("audit-7", channel)


@pytest.mark.django_db(transaction=True)
def test_an_unwatched_audit_publishes_nothing(sent):
    run = submit_audit(**INPUT, enqueue=False)
    assert execute.execute_run(run.pk) == "complete"
    assert sent == []


@pytest.mark.django_db(transaction=True)
def test_a_watched_audit_gets_one_event_per_state_change_and_no_trace_lines(sent):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    run = submit_audit(**INPUT, enqueue=False)
    async_to_sync(layer.group_add)(f"audit-{run.pk}", channel)
    execute.execute_run(run.pk)
    kinds = [t for _, t, _ in sent]
    assert kinds[0] == "audit_started" and kinds[-1] == "audit_finished"
    assert kinds.count("audit_started") == kinds.count("audit_finished") == 1
    assert set(kinds[1:-1]) <= {"analyzer_started", "analyzer_finished"}
    assert run.trace_lines.count() > 0  # stored, but not published line by line
    async_to_sync(layer.group_discard)(f"audit-{run.pk}", channel)


@pytest.mark.django_db(transaction=True)
def test_the_analyzers_progress_is_made_only_for_a_watched_audit(sent, monkeypatch):
    made = []
    real = execute._progress_callback
    monkeypatch.setattr(
        execute, "_progress_callback", lambda audit_id: made.append(audit_id) or real(audit_id)
    )
    unwatched = submit_audit(**INPUT, enqueue=False)
    assert execute.execute_run(unwatched.pk) == "complete"
    assert made == []  # nobody could see it: no progress events built at all

    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    watched = submit_audit(**INPUT, enqueue=False)
    async_to_sync(layer.group_add)(f"audit-{watched.pk}", channel)
    assert execute.execute_run(watched.pk) == "complete"
    assert made == [str(watched.pk)]
    assert "analyzer_finished" in [t for _, t, _ in sent]
    async_to_sync(layer.group_discard)(f"audit-{watched.pk}", channel)


def test_an_analysis_process_asks_its_sink_which_audits_are_watched():
    kept: list[dict] = []
    events.capture(kept.append, lambda audit_id: audit_id == "7")
    try:
        assert events.audit_watched("7") and not events.audit_watched("8")
    finally:
        events.capture(None)
    assert not events.audit_watched("7")  # nobody in its group of the in-memory layer
