"""Streamed ingestion: /ws/ingest/ and POST /api/audits/stream (and the example client)."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from analyzers.config_store import load_config, save_config
from analyzers.engine.guardrails.settings import settings_from_config
from analyzers.engine.guardrails.stream import audit_text
from auditor_site.asgi import application
from audits.api.stream_http import stream_endpoint
from audits.execution import execute, recovery
from audits.models import AuditRun
from tests.conftest import ApiClient
from tests.live_support import BASE_DIR, daphne

pytestmark = pytest.mark.django_db(transaction=True)

SAMPLE_CONFIG = BASE_DIR / "tests" / "samples" / "config.json"
RESPONSE = (
    "Decathlon grew conversion by 50% ([case study](https://www.acme.example/customers/decathlon)).\n\n"
    "Al-Futtaim achieved +206% revenue after adopting Acme. Acme is easy to set up.\n\n"
    "```\ncode block\n\nstill code\n```\n\n"
    "See [this guide](https://random-blog.example.org/acme-tips) for tips.\n"
    "Read [this article](https://www.acme.example/blog/faceting) first.\n\n\n"
    "Namedrop: internal note.\n\nThanks!"
)
HEAD = {"user_input": "Which retailers use Acme?", "metadata": {"model": "m"}}


@pytest.fixture(autouse=True)
def _setup(settings, transactional_db):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    save_config(json.loads(SAMPLE_CONFIG.read_text()), actor="test")


def split_randomly(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 40)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


async def ingest(key: str | None, chunks: list[str], head=None, done: bool = True):
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    ws = WebsocketCommunicator(application, "/ws/ingest/", headers=headers)
    connected, _ = await ws.connect(timeout=5)
    assert connected
    await ws.send_to(text_data=json.dumps(head or HEAD))
    for chunk in chunks:
        await ws.send_to(text_data=json.dumps({"text": chunk}))
    events = []
    if done:
        await ws.send_to(text_data=json.dumps({"done": True}))
        while True:
            message = await ws.receive_output(timeout=20)
            if message["type"] == "websocket.close":
                break
            frame = json.loads(message["text"])
            events.append((frame["event"], frame["data"]))
    return ws, events


def comparable(audit: dict) -> dict:
    return {
        "cleaned_response": audit["cleaned_response"],
        "overall_score": audit["overall_score"],
        "links": audit["links"],
        "trace": audit["trace"],
        "results": [
            (
                r["analyzer_id"],
                r["score"],
                r["surfaced"],
                r["status"],
                [(a["type"], a["evidence"], a["start"], a["end"]) for a in r["annotations"]],
            )
            for r in audit["results"]
        ],
    }


@pytest.mark.parametrize("seed", range(4))
async def test_chunking_anywhere_gives_the_batch_audit(seed, make_key):
    key = await sync_to_async(make_key)("ingest")
    chunks = split_randomly(RESPONSE, random.Random(seed))
    ws, events = await ingest(key, chunks, head={**HEAD, "collision_key": f"stream-{seed}"})
    names = [name for name, _ in events]
    assert names[0] == "accepted" and names[-1] == "audit"
    streamed = "".join(data["text"] for name, data in events if name == "chunk")

    config = await sync_to_async(load_config)()
    batch_text = audit_text(RESPONSE, settings_from_config(config)).cleaned_response
    assert streamed == batch_text
    assert "random-blog.example.org" not in streamed and "Namedrop:" not in streamed

    audit = events[-1][1]
    assert audit["status"] == "complete" and audit["incomplete"] is False
    assert audit["response"] == RESPONSE
    api = ApiClient(key)
    batch = await sync_to_async(api.post)(
        "/api/audits?wait=true",
        {**HEAD, "response": RESPONSE, "collision_key": f"batch-{seed}"},
    )
    assert comparable(audit) == comparable(batch.json())
    # Trace events are the paragraphs' trace lines, in order.
    traced = [data["text"] for name, data in events if name == "audit_trace"]
    assert traced and all(line.startswith("[AUDIT]") for line in traced)


async def test_no_text_leaves_before_its_paragraph_is_complete(make_key):
    key = await sync_to_async(make_key)("ingest")
    sent = [
        "Al-Futtaim achieved +206% revenue",
        " after adopting Acme. Acme is easy",
        " to set up.",
    ]
    ws, _ = await ingest(key, sent, done=False)
    await ws.receive_from(timeout=5)  # accepted
    assert await ws.receive_nothing(timeout=0.3)  # the paragraph is still open
    await ws.send_to(text_data=json.dumps({"text": "\n\nNext"}))
    frames = [json.loads(await ws.receive_from(timeout=5)) for _ in range(2)]
    chunk = next(f["data"]["text"] for f in frames if f["event"] == "chunk")
    assert "Acme is easy to set up." in chunk and "Al-Futtaim" not in chunk
    await ws.disconnect()


async def test_a_client_that_leaves_midway_leaves_an_incomplete_audit(make_key):
    key = await sync_to_async(make_key)("ingest")
    sent = ["First paragraph is fine.\n\n", "Second one was cut"]
    ws, _ = await ingest(key, sent, done=False)
    accepted = json.loads(await ws.receive_from(timeout=5))
    await ws.receive_from(timeout=5)  # the first paragraph's chunk
    await ws.disconnect()
    for _ in range(100):
        run = await sync_to_async(AuditRun.objects.get)(pk=accepted["data"]["id"])
        if run.status == "complete":
            break
        await asyncio.sleep(0.05)
    assert run.status == "complete"
    assert run.incomplete is True
    assert run.response == "".join(sent)
    assert "Second one was cut" in run.cleaned_response


async def test_a_long_stream_is_not_taken_for_a_stale_run(make_key, monkeypatch):
    from audits.intake import stream

    monkeypatch.setattr(stream, "HEARTBEAT_SECONDS", 0.1)
    key = await sync_to_async(make_key)("ingest")
    ws, _ = await ingest(key, ["A paragraph.\n\n"], done=False)
    accepted = json.loads(await ws.receive_from(timeout=5))
    run_id = accepted["data"]["id"]
    first = (await sync_to_async(AuditRun.objects.get)(pk=run_id)).started_at
    await asyncio.sleep(0.6)  # the model is slow: no text for a while
    run = await sync_to_async(AuditRun.objects.get)(pk=run_id)
    assert run.status == "running" and run.started_at > first
    outcome = await sync_to_async(recovery.recover_stale_runs)(
        stale_after=timedelta(seconds=0.3), enqueue=False
    )
    assert outcome["requeued"] == 0
    await ws.send_to(text_data=json.dumps({"text": "The end."}))
    await ws.send_to(text_data=json.dumps({"done": True}))
    while (await ws.receive_output(timeout=20))["type"] != "websocket.close":
        pass
    run = await sync_to_async(AuditRun.objects.get)(pk=run_id)
    assert run.status == "complete" and not run.incomplete


def test_a_stream_whose_server_died_is_recovered_as_incomplete():
    # As the stream session leaves it: running, never claimed, the audited part stored.
    run = AuditRun.objects.create(
        user_input="q",
        response="A paragraph.\n\n",
        status=AuditRun.Status.RUNNING,
        started_at=timezone.now() - timedelta(minutes=10),
    )
    outcome = recovery.recover_stale_runs(enqueue=False)
    assert outcome["requeued"] == 1
    execute.execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == "complete" and run.incomplete
    assert run.cleaned_response == "A paragraph.\n\n"


async def test_a_bad_key_is_refused_before_any_work(make_key):
    read_only_none = [None, "ra_nope_nope"]
    for key in read_only_none:
        headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
        ws = WebsocketCommunicator(application, "/ws/ingest/", headers=headers)
        connected, _ = await ws.connect(timeout=5)
        frame = json.loads(await ws.receive_from(timeout=5))
        assert frame == {
            "event": "error",
            "data": {"status": 401, "detail": frame["data"]["detail"]},
        }
        close = await ws.receive_output(timeout=5)
        assert close == {
            "type": "websocket.close",
            "code": 4401,
            "reason": frame["data"]["detail"][:120],
        }
    assert await sync_to_async(AuditRun.objects.count)() == 0


async def test_the_http_form_refuses_a_bad_key_without_reading_the_body():
    async def receive():
        raise AssertionError("the body was read")

    sent = []

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/audits/stream",
        "headers": [(b"authorization", b"Bearer ra_bad_key")],
    }
    await stream_endpoint(scope, receive, send)
    assert sent[0]["status"] == 401
    assert json.loads(sent[1]["body"])["detail"].startswith("a valid API key")
    assert await sync_to_async(AuditRun.objects.count)() == 0


def body_messages(lines: list[dict], cut_after: int | None = None) -> list[dict]:
    messages = [
        {"type": "http.request", "body": (json.dumps(line) + "\n").encode(), "more_body": True}
        for line in lines
    ]
    if cut_after is not None:
        return [*messages[:cut_after], {"type": "http.disconnect"}]
    return [*messages, {"type": "http.request", "body": b"", "more_body": False}]


async def call_http(
    key: str, messages: list[dict], receive=None
) -> tuple[int, list[tuple[str, dict]]]:
    queue = list(messages)

    async def next_message():
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    receive = receive or next_message

    sent = []

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/audits/stream",
        "headers": [(b"authorization", f"Bearer {key}".encode())],
    }
    await stream_endpoint(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent[1:]).decode()
    if sent[0]["status"] != 200:
        return sent[0]["status"], [("error", json.loads(body))]
    events = []
    for block in body.split("\n\n"):
        if block.strip():
            name, data = block.split("\n", 1)
            events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return sent[0]["status"], events


async def test_the_http_form_answers_server_sent_events(make_key):
    key = await sync_to_async(make_key)("ingest")
    chunks = split_randomly(RESPONSE, random.Random(7))
    status, events = await call_http(key, body_messages([HEAD, *({"text": c} for c in chunks)]))
    assert status == 200
    assert [n for n, _ in events][0] == "accepted" and events[-1][0] == "audit"
    config = await sync_to_async(load_config)()
    assert (
        "".join(d["text"] for n, d in events if n == "chunk")
        == audit_text(RESPONSE, settings_from_config(config)).cleaned_response
    )
    assert events[-1][1]["incomplete"] is False


async def test_the_http_form_stores_an_incomplete_audit_when_the_client_leaves(make_key):
    key = await sync_to_async(make_key)("ingest")
    lines = [HEAD, {"text": "One.\n\n"}, {"text": "Two, cut"}, {"text": " never sent"}]
    status, events = await call_http(key, body_messages(lines, cut_after=3))
    assert status == 200
    audit = events[-1][1]
    assert audit["incomplete"] is True and audit["response"] == "One.\n\nTwo, cut"


async def test_bad_heads_get_4xx_before_anything_is_stored(make_key):
    key = await sync_to_async(make_key)("ingest")
    for head, code in (
        (["not", "an object"], 400),
        ({"user_input": 1}, 422),
        ({"user_input": "q", "response": "x"}, 422),
    ):
        status, _ = await call_http(key, body_messages([head]))
        assert status == code
    assert await sync_to_async(AuditRun.objects.count)() == 0


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_the_example_client_against_a_real_daphne_server(transport, make_key, tmp_path):
    key = make_key("ingest")
    with daphne(tmp_path) as host:
        args = [
            sys.executable,
            "examples/stream_client.py",
            "--url",
            f"http://{host}",
            "--key",
            key,
            "--delay",
            "0",
        ]
        if transport == "http":
            args.append("--http")
        done = subprocess.run(args, cwd=BASE_DIR, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("accepted")
    assert any(line.startswith("chunk") for line in lines)
    assert any(line.startswith("trace  [AUDIT]") for line in lines)
    assert lines[-1].startswith("audit ")
    run = AuditRun.objects.get()
    assert run.status == "complete" and not run.incomplete
    assert f"audit  {run.pk} complete" in lines[-1]
    assert "random-blog.example.org" not in run.cleaned_response


async def test_the_final_audit_takes_the_streams_own_pipeline_result(make_key, monkeypatch):
    from analyzers.engine.guardrails import analyzers as guardrail_analyzers

    runs = []
    real = guardrail_analyzers.audit_text
    monkeypatch.setattr(
        guardrail_analyzers, "audit_text", lambda *a, **kw: runs.append(a[0]) or real(*a, **kw)
    )
    key = await sync_to_async(make_key)("ingest")
    chunks = split_randomly(RESPONSE, random.Random(3))
    status, events = await call_http(key, body_messages([HEAD, *({"text": c} for c in chunks)]))
    assert status == 200 and events[-1][1]["status"] == "complete"
    assert runs == []  # the paragraphs audited as they came stand for the final audit's run
    config = await sync_to_async(load_config)()
    assert (
        events[-1][1]["cleaned_response"]
        == audit_text(RESPONSE, settings_from_config(config)).cleaned_response
    )
    # a source that arrived mid-stream is not the final audit's: its pipeline runs again
    source = {"source": {"title": "Case", "url": "https://www.acme.example/x", "text": "t"}}
    status, events = await call_http(
        key, body_messages([HEAD, {"text": "One.\n\n"}, source, {"text": "Two."}])
    )
    assert status == 200 and runs == ["One.\n\nTwo."]
