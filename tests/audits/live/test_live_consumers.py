"""The live pages' WebSocket consumers, through the real ASGI stack (origin check, session auth)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from auditor_site.asgi import application
from audits.events import apublish
from audits.intake import submit
from audits.models import AuditRun, TraceLine
from tests.live_support import session_headers

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_layer(settings):
    # A new in-memory layer per test (each test has its own event loop).
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


async def connect(path: str, headers) -> tuple[WebsocketCommunicator, bool]:
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    return communicator, connected


async def receive_until(communicator, needle: str, timeout: float = 15.0) -> str:
    """Concatenated messages until one contains `needle`."""
    seen = []
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise AssertionError(f"{needle!r} never arrived; got {seen!r}")
        seen.append(await communicator.receive_from(timeout=left))
        if needle in seen[-1]:
            return "".join(seen)


async def drain(communicator, timeout: float = 0.3) -> str:
    out = []
    while not await communicator.receive_nothing(timeout=timeout):
        out.append(await communicator.receive_from())
    return "".join(out)


def make_run(**fields) -> AuditRun:
    return AuditRun.objects.create(
        user_input=fields.pop("user_input", "question"), response="", **fields
    )


@pytest.fixture
def staff_headers(staff_user):
    return session_headers(staff_user)


async def test_it_refuses_anonymous_users():
    communicator, connected = await connect("/ws/audits/", session_headers(None))
    assert not connected


async def test_it_refuses_non_staff_users(plain_user):
    headers = await sync_to_async(session_headers)(plain_user)
    for path in ("/ws/audits/", "/ws/audits/8c3f1f9e-8f1a-4c55-9d0e-2f6d3c1b7a10/"):
        communicator, connected = await connect(path, headers)
        assert not connected


async def test_it_refuses_foreign_origins(staff_user):
    headers = await sync_to_async(session_headers)(staff_user, origin=b"http://evil.example")
    communicator, connected = await connect("/ws/audits/", headers)
    assert not connected


async def test_staff_are_accepted(staff_user):
    headers = await sync_to_async(session_headers)(staff_user)
    communicator, connected = await connect("/ws/audits/", headers)
    assert connected
    await communicator.disconnect()


async def test_a_submitted_audit_reaches_the_feed_as_an_escaped_card(staff_user):
    headers = await sync_to_async(session_headers)(staff_user)
    communicator, connected = await connect("/ws/audits/", headers)
    assert connected
    run = await sync_to_async(submit.submit_audit)(
        user_input="<script>alert(1)</script> retailers?", response="Acme is easy to set up."
    )
    html = await receive_until(communicator, f'id="audit-card-{run.pk}"')
    assert 'hx-swap-oob="afterbegin:#live-rows"' in html
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;" in html
    assert 'id="live-status"' in html  # the counters tick with every card
    # ImmediateBackend ran it: the card ends complete.
    await receive_until(communicator, 'data-status="complete"')
    await communicator.disconnect()


async def test_queued_audits_show_as_pending_cards_at_once(staff_user, settings):
    """A deep queue may hold an audit for seconds before "audit_started": its card is
    announced when it is stored (here nothing runs it: a database queue with no worker)."""
    from tests.conftest import _reset_task_backends

    queue = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
    settings.TASKS = queue
    _reset_task_backends(queue)
    headers = await sync_to_async(session_headers)(staff_user)
    page, connected = await connect("/ws/audits/", headers)
    assert connected
    one = await sync_to_async(submit.submit_audit)(user_input="alone", response="Fine.")
    batch = await sync_to_async(submit.submit_audits)(
        [{"user_input": f"batch {i}", "response": "Fine."} for i in range(3)]
    )
    html = await receive_until(page, f'id="audit-card-{batch[-1].pk}"')
    html += await drain(page)
    for run in [one, *batch]:
        card = re.search(rf'<li id="audit-card-{run.pk}"[^>]*>', html)
        assert card and 'data-status="pending"' in card.group(0)
    await page.disconnect()


async def test_the_feed_honours_its_filters(staff_user):
    headers = await sync_to_async(session_headers)(staff_user)
    communicator, connected = await connect("/ws/audits/?q=needle-xyz", headers)
    assert connected
    other = await sync_to_async(make_run)(user_input="something else")
    match = await sync_to_async(make_run)(user_input="has needle-xyz inside")
    await apublish({"type": "audit_submitted", "audit_id": str(other.pk)})
    await apublish({"type": "audit_submitted", "audit_id": str(match.pk)})
    html = await receive_until(communicator, f"audit-card-{match.pk}")
    html += await drain(communicator)
    assert f"audit-card-{other.pk}" not in html
    await communicator.disconnect()


async def test_the_feed_renders_an_event_once_for_every_page_with_the_same_filters(
    staff_user, monkeypatch
):
    from audits.live import consumers
    from audits.live import hub as live_hub

    rendered = []
    render = consumers.LiveFeedConsumer._render

    async def counting(query, audit_ids):
        rendered.append((query.filters.q, tuple(audit_ids)))
        return await render(query, audit_ids)

    monkeypatch.setattr(consumers.LiveFeedConsumer, "_render", staticmethod(counting))
    headers = await sync_to_async(session_headers)(staff_user)
    pages = [(await connect("/ws/audits/", headers))[0] for _ in range(5)]
    filtered = (await connect("/ws/audits/?q=needle", headers))[0]
    run = await sync_to_async(make_run)(user_input="a needle in it")
    await apublish({"type": "audit_submitted", "audit_id": str(run.pk)})
    for page in [*pages, filtered]:
        await receive_until(page, f'id="audit-card-{run.pk}"')
    assert sorted(rendered, key=str) == [("", (str(run.pk),)), ("needle", (str(run.pk),))]
    # Per-audit progress does not reach the feed at all.
    await apublish({"type": "trace_line", "audit_id": str(run.pk), "position": 0, "text": "x"})
    assert all([await page.receive_nothing(timeout=0.2) for page in pages])
    hub = live_hub.feed_hub()
    assert len(hub.watchers) == 6
    for page in [*pages, filtered]:
        await page.disconnect()
    assert hub.task is None and not hub.watchers  # the last page gone: unsubscribed


async def test_a_burst_is_rendered_in_few_rounds_and_shows_its_newest_cards(
    staff_user, monkeypatch
):
    """While one round renders, the hub keeps draining its channel (the in-memory layer
    drops what does not fit in a channel's 100 messages) and renders what came meanwhile
    in one round. A round never renders more cards than the page shows: of a burst, the
    newest LIVE_ROWS, which replace the list (`data-live-reset`)."""
    from audits.live import consumers, fragments

    rounds = []
    render = consumers.LiveFeedConsumer._render

    async def slow(query, audit_ids):
        rounds.append(list(audit_ids))
        if len(rounds) == 1:
            await asyncio.sleep(0.5)  # the burst arrives during the first round
        return await render(query, audit_ids)

    monkeypatch.setattr(consumers.LiveFeedConsumer, "_render", staticmethod(slow))
    headers = await sync_to_async(session_headers)(staff_user)
    page, connected = await connect("/ws/audits/", headers)
    assert connected
    count = 150  # more than the layer's channel holds (100)
    runs = await sync_to_async(lambda: [make_run(user_input=f"q{i}") for i in range(count)])()
    for run in runs:
        await apublish({"type": "audit_submitted", "audit_id": str(run.pk)})
        await asyncio.sleep(0)  # as the outbox lets the loop run between its sends
    newest = await sync_to_async(
        lambda: [
            str(pk)
            for pk in AuditRun.objects.order_by("-created_at", "-id").values_list("pk", flat=True)[
                : fragments.LIVE_ROWS
            ]
        ]
    )()
    html = await receive_until(page, f'id="audit-card-{newest[0]}"')
    html += await drain(page)
    assert len(rounds) <= 3
    assert sorted(i for ids in rounds for i in ids) == sorted(str(r.pk) for r in runs)
    burst = html[html.index("data-live-reset") :]
    assert re.findall(r'id="audit-card-([0-9a-f-]+)"', burst) == newest  # newest on top
    await page.disconnect()


async def test_the_counters_go_out_at_most_once_a_second_and_after_a_burst(staff_user):
    """Two rounds within a second: the second has its card but no counters; they follow
    on their own once the second is over, without another event."""
    headers = await sync_to_async(session_headers)(staff_user)
    page, connected = await connect("/ws/audits/", headers)
    assert connected
    first, second = await sync_to_async(lambda: [make_run(), make_run()])()
    await apublish({"type": "audit_submitted", "audit_id": str(first.pk)})
    one = await receive_until(page, f'id="audit-card-{first.pk}"')
    assert 'id="live-status"' in one
    await apublish({"type": "audit_submitted", "audit_id": str(second.pk)})
    two = await receive_until(page, f'id="audit-card-{second.pk}"')
    assert 'id="live-status"' not in two
    later = await receive_until(page, 'id="live-status"', timeout=3)
    assert "audit-card-" not in later
    await page.disconnect()


def test_a_page_s_next_update_looks_at_the_latest_news_only():
    """The news pending for a set of filters is bounded: the oldest news goes first, and
    news about an audit already pending makes it the latest again."""
    from audits.live.hub import PENDING_CAP, FilterGroup

    group = FilterGroup()
    for i in range(PENDING_CAP + 10):
        group.note(f"a{i}")
    group.note("a10")
    group.note("a-new")
    pending = list(group.pending)
    assert len(pending) == PENDING_CAP
    assert pending[-2:] == ["a10", "a-new"]
    assert "a11" not in pending and "a12" in pending


async def test_a_page_in_a_burst_is_paced_and_a_quiet_filtered_page_is_not(staff_user, monkeypatch):
    """After a burst, the pages watching everything wait BURST_INTERVAL_S for their next
    update; a page whose filters the burst does not match gets its card at once."""
    from audits.live import hub as live_hub

    monkeypatch.setattr(live_hub, "BURST_INTERVAL_S", 3.0)
    headers = await sync_to_async(session_headers)(staff_user)
    everything, _ = await connect("/ws/audits/", headers)
    filtered, _ = await connect("/ws/audits/?q=needle", headers)
    runs = await sync_to_async(lambda: [make_run(user_input=f"q{i}") for i in range(60)])()
    for run in runs:  # all noted before the renderer runs: one update, a burst
        live_hub.feed_hub().note({"type": "audit_submitted", "audit_id": str(run.pk)})
    await receive_until(everything, "data-live-reset")
    burst_at = asyncio.get_running_loop().time()
    needle = await sync_to_async(make_run)(user_input="a needle")
    await apublish({"type": "audit_submitted", "audit_id": str(needle.pk)})
    await receive_until(filtered, f'id="audit-card-{needle.pk}"', timeout=2.5)
    assert asyncio.get_running_loop().time() - burst_at < 2.5  # not held up by the burst
    await receive_until(everything, f'id="audit-card-{needle.pk}"', timeout=10)
    assert asyncio.get_running_loop().time() - burst_at >= 2.9  # paced
    await everything.disconnect()
    await filtered.disconnect()


async def test_messages_for_an_audit_reach_its_group_only(staff_user):
    headers = await sync_to_async(session_headers)(staff_user)
    run = await sync_to_async(make_run)(status=AuditRun.Status.RUNNING)
    other = await sync_to_async(make_run)(status=AuditRun.Status.RUNNING)
    communicator, connected = await connect(f"/ws/audits/{run.pk}/", headers)
    assert connected
    await apublish(
        {
            "type": "analyzer_finished",
            "audit_id": str(other.pk),
            "analyzer_id": "tone",
            "status": "ok",
            "score": 0.1,
            "surfaced": False,
        }
    )
    await apublish(
        {
            "type": "analyzer_finished",
            "audit_id": str(run.pk),
            "analyzer_id": "redflag",
            "status": "ok",
            "score": 0.5,
            "surfaced": True,
        }
    )
    html = await receive_until(communicator, f"progress-{run.pk}-redflag")
    assert f"beforeend:#progress-{run.pk}" in html
    assert "surfaced" in html
    assert "tone" not in html + await drain(communicator)
    await communicator.disconnect()


async def test_stream_progress_sends_new_trace_lines_and_the_audited_text(staff_user):
    headers = await sync_to_async(session_headers)(staff_user)
    run = await sync_to_async(make_run)(status=AuditRun.Status.RUNNING)
    communicator, connected = await connect(f"/ws/audits/{run.pk}/", headers)
    assert connected

    def progress(response: str, cleaned: str, lines: list[str]):
        AuditRun.objects.filter(pk=run.pk).update(response=response, cleaned_response=cleaned)
        start = TraceLine.objects.filter(audit=run).count()
        TraceLine.objects.bulk_create(
            [TraceLine(audit=run, position=start + i, text=t) for i, t in enumerate(lines)]
        )

    await sync_to_async(progress)(
        "See evil.example now.\n", "See now.\n", ["[AUDIT] stripped link"]
    )
    await apublish({"type": "stream_progress", "audit_id": str(run.pk)})
    html = await receive_until(communicator, f"trace-{run.pk}-0")
    assert f'<section hx-swap-oob="true" id="stream-{run.pk}"' in html
    assert re.search(r"<del[^>]*>\s*evil\.example\s*</del>", html)
    await sync_to_async(progress)(
        "See evil.example now.\n\nMore.\n", "See now.\n\nMore.\n", ["[AUDIT] ok"]
    )
    await apublish({"type": "stream_progress", "audit_id": str(run.pk)})
    html = await receive_until(communicator, f"trace-{run.pk}-1")
    assert f"trace-{run.pk}-0" not in html  # only what this client has not seen
    await communicator.disconnect()


async def test_the_feed_catches_up_after_a_reconnect_without_duplicates(staff_user):
    headers = await sync_to_async(session_headers)(staff_user)
    old = await sync_to_async(make_run)(user_input="before the page")
    await sync_to_async(AuditRun.objects.filter(pk=old.pk).update)(
        created_at=timezone.now() - timezone.timedelta(minutes=5)
    )
    cursor = timezone.now().isoformat()
    communicator, connected = await connect("/ws/audits/", headers)
    assert connected
    await communicator.disconnect()
    # While the client was away (no events reach it):
    missed = [await sync_to_async(make_run)(user_input=f"missed {i}") for i in range(3)]

    communicator, connected = await connect("/ws/audits/", headers)
    assert connected
    await communicator.send_to(text_data=json.dumps({"after": cursor}))
    html = await receive_until(communicator, 'id="live-status"')
    for run in missed:
        assert html.count(f'id="audit-card-{run.pk}"') == 1
    assert f"audit-card-{old.pk}" not in html
    # Newest first: prepended as a block, the newest ends on top.
    positions = [html.index(f"audit-card-{run.pk}") for run in missed]
    assert positions == sorted(positions, reverse=True)
    await communicator.disconnect()


async def test_an_audit_page_catches_up_from_its_last_trace_line(staff_user):
    headers = await sync_to_async(session_headers)(staff_user)
    run = await sync_to_async(make_run)(status=AuditRun.Status.RUNNING)
    await sync_to_async(TraceLine.objects.bulk_create)(
        [TraceLine(audit=run, position=i, text=f"[AUDIT] line {i}") for i in range(5)]
    )
    communicator, connected = await connect(f"/ws/audits/{run.pk}/?after_trace=2", headers)
    assert connected
    html = await receive_until(communicator, f"trace-{run.pk}-4")
    for i in range(3):
        assert f'id="trace-{run.pk}-{i}"' not in html
    assert html.count(f'id="trace-{run.pk}-3"') == 1
    # Still live: the connector (it holds the page's socket) is left alone, not re-sent.
    assert f'id="live-audit-{run.pk}"' not in html
    await communicator.disconnect()


async def test_a_finished_audit_ends_in_the_reloaded_state(staff_user, client):
    headers = await sync_to_async(session_headers)(staff_user)
    run = await sync_to_async(make_run)(status=AuditRun.Status.RUNNING)
    communicator, connected = await connect(f"/ws/audits/{run.pk}/", headers)
    assert connected
    await sync_to_async(AuditRun.objects.filter(pk=run.pk).update)(
        status=AuditRun.Status.COMPLETE, finished_at=timezone.now(), overall_score=0.1
    )
    await apublish({"type": "audit_finished", "audit_id": str(run.pk), "status": "complete"})
    html = await receive_until(communicator, f'id="live-audit-{run.pk}"')
    # The connector is replaced by a hidden placeholder: the socket closes, as after a reload.
    assert f'<div hx-swap-oob="true" id="live-audit-{run.pk}" hidden>' in html
    assert f'<section hx-swap-oob="true" class="card" id="trace-section-{run.pk}"' in html
    await communicator.disconnect()


async def test_a_verdict_updates_the_card_on_every_live_page(staff_user):
    from audits.store.verdicts import record_review
    from tests.factories import annotation, make_audit, result

    run = await sync_to_async(make_audit)(
        results=[result("tone", 0.9, [annotation("dismissive", "warning")])]
    )
    headers = await sync_to_async(session_headers)(staff_user)
    communicator, connected = await connect("/ws/audits/", headers)
    assert connected
    await sync_to_async(record_review)(audit_id=run.pk, verdict="false_positive", user=staff_user)
    html = await receive_until(communicator, f'id="verdict-{run.pk}"')
    assert f'id="audit-card-{run.pk}"' in html
    assert 'value="false_positive" class="verdict-button verdict-fp" aria-pressed="true"' in html
    assert "csrfmiddlewaretoken" not in html  # one fragment for all watchers: htmx sends the token
    await communicator.disconnect()
