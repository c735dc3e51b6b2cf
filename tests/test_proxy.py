"""Acceptance: the OpenAI-compatible proxy with the real `openai` SDK, against the shipped
server (uvicorn) on 127.0.0.1 and a scripted upstream (tests/proxy_upstream.py)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from analyzers.config_store import save_config
from audits.models import AuditRun
from tests.live_support import BASE_DIR, live_server
from tests.proxy_upstream import Completion, UpstreamServer, stream_frames

pytestmark = pytest.mark.django_db(transaction=True)

SAMPLE_CONFIG = BASE_DIR / "tests" / "samples" / "config.json"
HOSTILE_HOST = "evil-tracker.example.net"
ANSWER = (
    "Acme search is easy to set up. Decathlon grew conversion by 50%.\n\n"
    f"For the details see [the setup guide](https://{HOSTILE_HOST}/steal?c=1) today.\n\n"
    "Thanks for asking!"
)
MESSAGES = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "How do I set up Acme?"}]


@pytest.fixture(scope="module")
def upstream():
    with UpstreamServer() as server:
        yield server


@pytest.fixture(scope="module")
def server(upstream, tmp_path_factory):
    with live_server(tmp_path_factory.mktemp("proxy"), AUDITOR_PROXY_ALLOW_PRIVATE="true",
                     AUDITOR_UPSTREAM_API_KEY="sk-upstream-secret") as host:
        yield f"http://{host}"


def configure(upstream: UpstreamServer, **proxy) -> None:
    config = json.loads(SAMPLE_CONFIG.read_text())
    config["proxy"] = {"base_url": upstream.base_url, "timeout_s": 5, **proxy}
    save_config(config, actor="test")


@pytest.fixture(autouse=True)
def _setup(upstream, settings, transactional_db):
    settings.AUDITOR_PROXY_ALLOW_PRIVATE = True
    configure(upstream)
    upstream.script.clear()
    upstream.requests.clear()
    upstream.sent.clear()
    upstream.disconnected.clear()


@pytest.fixture
def key(make_key) -> str:
    return make_key("ingest")


def finished(audit_id: str, timeout: float = 30.0) -> AuditRun:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = AuditRun.objects.filter(pk=audit_id).first()
        if run is not None and run.is_finished:
            return run
        time.sleep(0.05)
    raise AssertionError(f"audit {audit_id} did not finish")


def client(server: str, key: str, **kw) -> OpenAI:
    return OpenAI(base_url=f"{server}/v1", api_key=key, max_retries=0, **kw)


# --- streaming, clean --------------------------------------------------------------------


def test_a_hostile_link_in_paragraph_two_never_reaches_the_client(server, upstream, key):
    upstream.enqueue(Completion(content=ANSWER, token_delay=0.002))
    raw = client(server, key).chat.completions.with_raw_response.create(
        model="gpt-x", messages=MESSAGES, stream=True, stream_options={"include_usage": True},
        extra_body={"auditor": {"metadata": {"team": "search"}}},
    )
    audit_id = raw.headers["x-auditor-audit-id"]
    chunks = list(raw.parse())
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert deltas and all(HOSTILE_HOST not in d for d in deltas)
    assert chunks[-1].usage.completion_tokens > 0  # include_usage passed through
    run = finished(audit_id)
    assert run.status == "complete" and not run.incomplete
    assert "".join(deltas) == run.cleaned_response
    assert HOSTILE_HOST in run.response  # the original is stored, the client never saw it
    assert run.user_input == "How do I set up Acme?"
    assert run.external_id == "chatcmpl-test"
    assert run.metadata["team"] == "search"
    assert run.metadata["proxy"]["messages"] == MESSAGES
    assert run.metadata["proxy"]["model"] == "upstream-model"
    assert run.metadata["proxy"]["usage"]["completion_tokens"] > 0
    forwarded = upstream.requests[-1]
    assert "auditor" not in forwarded.json and forwarded.json["stream"] is True
    assert forwarded.headers["Authorization"] == "Bearer sk-upstream-secret"


def test_paragraphs_arrive_only_once_audited_each_as_a_whole(server, upstream, key):
    upstream.enqueue(Completion(content=ANSWER, token_delay=0.001))
    stream = client(server, key).chat.completions.create(
        model="m", messages=MESSAGES, stream=True)
    deltas = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    # one delta per paragraph (or blank line), never a token: nothing leaves unaudited
    assert deltas[0].startswith("Acme search is easy to set up.")
    assert deltas[0].endswith("\n")
    assert len(deltas) <= 5


async def test_the_async_client_streams_and_trace_lines_come_only_as_comments(server, upstream, key):
    upstream.enqueue(Completion(content=ANSWER), Completion(content=ANSWER))
    aclient = AsyncOpenAI(base_url=f"{server}/v1", api_key=key, max_retries=0,
                          default_headers={"X-Auditor-Trace": "1"})
    stream = await aclient.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    deltas = [c.choices[0].delta.content async for c in stream
              if c.choices and c.choices[0].delta.content]
    assert not any("[AUDIT]" in d for d in deltas)
    assert HOSTILE_HOST not in "".join(deltas)
    async with httpx.AsyncClient(timeout=30) as http, http.stream(
        "POST", f"{server}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", "X-Auditor-Trace": "1"},
        json={"model": "m", "messages": MESSAGES, "stream": True},
    ) as response:
        body = (await response.aread()).decode()
    comments = [line for line in body.splitlines() if line.startswith(": ")]
    assert comments and all(line.startswith(": [AUDIT]") for line in comments)
    assert all("[AUDIT]" not in line for line in body.splitlines() if line.startswith("data:"))


def test_tool_calls_arrive_intact_and_in_order(server, upstream, key):
    args = json.dumps({"query": "acme setup", "limit": 3})
    upstream.enqueue(Completion(content="Let me look that up.",
                                tool_calls=[{"id": "call_1", "name": "search", "arguments": args}]))
    stream = client(server, key).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    kinds, calls, finish = [], {}, None
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                kinds.append("content")
            for call in choice.delta.tool_calls or []:
                kinds.append("tool")
                kept = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                kept["id"] = call.id or kept["id"]
                kept["name"] += (call.function.name or "") if call.function else ""
                kept["arguments"] += (call.function.arguments or "") if call.function else ""
            finish = choice.finish_reason or finish
    assert kinds[0] == "content" and set(kinds[1:]) == {"tool"}
    assert calls == {0: {"id": "call_1", "name": "search", "arguments": args}}
    assert finish == "tool_calls"


# --- not streaming -----------------------------------------------------------------------


def test_a_whole_completion_is_cleaned_and_stored(server, upstream, key):
    upstream.enqueue(Completion(content=ANSWER))
    raw = client(server, key).chat.completions.with_raw_response.create(
        model="m", messages=MESSAGES, extra_body={"auditor": {"external_id": "conv-7"}})
    completion = raw.parse()
    text = completion.choices[0].message.content
    assert HOSTILE_HOST not in text and text.startswith("Acme search")
    run = finished(raw.headers["x-auditor-audit-id"])
    assert text == run.cleaned_response
    assert run.external_id == "conv-7"
    assert run.metadata["proxy"]["completion_id"] == "chatcmpl-test"


async def test_the_async_client_gets_whole_completions_with_tool_calls(server, upstream, key):
    upstream.enqueue(Completion(tool_calls=[{"id": "c9", "name": "lookup", "arguments": "{}"}]))
    aclient = AsyncOpenAI(base_url=f"{server}/v1", api_key=key, max_retries=0)
    completion = await aclient.chat.completions.create(model="m", messages=MESSAGES)
    call = completion.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == ("c9", "lookup", "{}")


def test_models_are_passed_through(server, key):
    assert [m.id for m in client(server, key).models.list()] == ["upstream-model"]


def test_a_wrong_key_is_refused_and_nothing_is_forwarded(server, upstream):
    with pytest.raises(openai.AuthenticationError):
        client(server, "ra_nope_nope").chat.completions.create(model="m", messages=MESSAGES)
    assert upstream.requests == []


def test_a_bad_extension_is_a_422_in_openai_shape(server, upstream, key):
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client(server, key).chat.completions.create(
            model="m", messages=MESSAGES, extra_body={"auditor": {"nope": 1}})
    assert "unknown keys" in caught.value.body["message"]
    assert upstream.requests == []


# --- faults ------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "error"), [(429, openai.RateLimitError),
                                               (500, openai.InternalServerError)])
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_keep_their_status_and_shape(server, upstream, key, status, error, stream):
    upstream.enqueue(Completion(status=status, headers={"Retry-After": "7"}))
    with pytest.raises(error) as caught:
        client(server, key).chat.completions.create(model="m", messages=MESSAGES, stream=stream)
    response = caught.value.response
    assert response.status_code == status
    assert response.json()["error"]["message"] == f"scripted {status}"
    assert response.headers["retry-after"] == "7"
    run = finished(response.headers["x-auditor-audit-id"])
    assert run.status == "failed" and str(status) in run.error


def test_an_upstream_timeout_is_a_504(server, upstream, key):
    configure(upstream, timeout_s=0.5)
    upstream.enqueue(Completion(content="late", first_delay=3))
    with pytest.raises(openai.APIStatusError) as caught:
        client(server, key).chat.completions.create(model="m", messages=MESSAGES)
    assert caught.value.status_code == 504
    assert caught.value.body["code"] == "upstream_timeout"
    assert caught.value.response.headers["x-auditor-audit-id"]


def test_an_upstream_that_stops_mid_stream_ends_with_a_timeout_frame(server, upstream, key):
    configure(upstream, timeout_s=0.5)
    upstream.enqueue(Completion(content=ANSWER, pause_after=3, pause=3))
    with httpx.stream("POST", f"{server}/v1/chat/completions",
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": "m", "messages": MESSAGES, "stream": True},
                      timeout=10) as response:
        assert response.status_code == 200  # the stream had started
        frames = [line for line in response.iter_lines() if line.startswith("data: ")]
    error = json.loads(frames[-1].removeprefix("data: "))["error"]
    assert error["code"] == "upstream_timeout"
    assert error["message"] == "the upstream stopped sending"


def test_a_client_that_disconnects_cancels_upstream_and_the_audit_is_incomplete(server, upstream, key):
    upstream.enqueue(Completion(content=ANSWER, pause_after=20, pause=20))
    with httpx.stream("POST", f"{server}/v1/chat/completions",
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": "m", "messages": MESSAGES, "stream": True},
                      timeout=10) as response:
        audit_id = response.headers["x-auditor-audit-id"]
        for line in response.iter_lines():
            if '"content": "Acme search' in line:
                break  # the first paragraph arrived; leave
    assert upstream.disconnected.wait(10), "the upstream request was not cancelled"
    run = finished(audit_id)
    assert run.incomplete
    assert run.response.startswith("Acme search is easy")



@pytest.mark.parametrize("stream", [True, False])
async def test_a_client_that_leaves_once_it_has_the_whole_answer_leaves_a_complete_audit(
    upstream, key, monkeypatch, stream
):
    """The SDKs close the connection at `[DONE]`. A client gone while the proxy is still
    in its last send (a loaded server) cut nothing: the audit is complete, not incomplete.
    Driven through the proxy's ASGI app with a client that leaves at the end marker."""
    from asgiref.sync import sync_to_async

    from audits.api.proxy.app import proxy_endpoint

    monkeypatch.setenv("AUDITOR_UPSTREAM_API_KEY", "sk-upstream-secret")
    upstream.enqueue(Completion(content=ANSWER))
    request = json.dumps({"model": "m", "messages": MESSAGES, "stream": stream}).encode()
    requested, gone, sent = False, asyncio.Event(), []

    async def receive():
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": request, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        body = message.get("body", b"")
        if b"data: [DONE]" in body or (not stream and body):
            gone.set()  # the client has it all and leaves ...
            await asyncio.sleep(0.2)  # ... while this send is still under way

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "query_string": b"", "headers": [(b"authorization", f"Bearer {key}".encode()),
                                              (b"content-type", b"application/json")]}
    await asyncio.wait_for(proxy_endpoint(scope, receive, send), 30)
    audit_id = dict(sent[0]["headers"])[b"x-auditor-audit-id"].decode()
    run = await sync_to_async(finished)(audit_id)
    assert (run.status, run.incomplete) == ("complete", False)
    assert run.response == ANSWER


# --- observe ------------------------------------------------------------------------------


def test_observe_mode_streams_the_upstream_bytes_unchanged(server, upstream, key):
    configure(upstream, mode="observe")
    upstream.enqueue(Completion(content=ANSWER, token_delay=0.001))
    with httpx.stream("POST", f"{server}/v1/chat/completions",
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": "m", "messages": MESSAGES, "stream": True}, timeout=10) as response:
        body = response.read()
        audit_id = response.headers["x-auditor-audit-id"]
    assert body == b"".join(stream_frames(Completion(content=ANSWER), {"stream": True}))
    run = finished(audit_id)
    assert (run.status, run.error, run.incomplete, run.response) == ("complete", "", False, ANSWER), run.cleaned_response
    assert HOSTILE_HOST not in run.cleaned_response
    assert run.metadata["proxy"]["mode"] == "observe"


def test_observe_mode_returns_a_whole_completion_unchanged(server, upstream, key):
    configure(upstream, mode="observe")
    upstream.enqueue(Completion(content=ANSWER))
    completion = client(server, key).chat.completions.create(model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == ANSWER


def test_a_paragraph_longer_than_max_chars_is_audited_and_sent_in_pieces(server, upstream, key):
    config = json.loads(SAMPLE_CONFIG.read_text())
    config["analyzers"]["redflag"]["max_chars"] = 200
    config["proxy"] = {"base_url": upstream.base_url, "timeout_s": 5}
    # The server caches the configuration by the newest change id, and every test starts
    # from an emptied database: a change id no other test reaches makes it reload.
    for max_chars in (202, 201, 200):
        config["analyzers"]["redflag"]["max_chars"] = max_chars
        save_config(config, actor="test")
    time.sleep(1.1)  # ... and it looks for changes at most once a second
    sentence = "Acme indexes every product in the catalogue quickly. "
    long_paragraph = sentence * 20  # about 1,060 characters, one paragraph, no line end
    upstream.enqueue(Completion(content=long_paragraph + "\n\nDone.", pause_after=100, pause=2.0))
    stream = client(server, key).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    arrivals, started = [], time.monotonic()
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append((time.monotonic() - started, chunk.choices[0].delta.content))
    pieces = [text for _, text in arrivals]
    assert "".join(pieces) == long_paragraph + "\n\nDone."
    assert len(pieces) >= 5 and all(len(p) <= 200 + len(sentence) for p in pieces)
    # pieces of the long paragraph arrived while the upstream paused mid-paragraph
    # (a relative bound: the whole suite runs on two shared cores)
    assert arrivals[-1][0] - arrivals[0][0] > 1.0
