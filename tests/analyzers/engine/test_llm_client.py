"""The model client against a real HTTP test server: retries, repair, timeouts, usage."""

from __future__ import annotations

import asyncio
import socket
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from pydantic import BaseModel

from analyzers.engine.config import LLMConfig
from analyzers.engine.llm import (
    LLMClient,
    LLMError,
    LLMInvalidOutput,
    LLMNotConfigured,
    Usage,
    client_for_config,
    parse_json_object,
    parse_retry_after,
)
from tests.llm_server import Reply, ScriptedLLMServer


class Verdict(BaseModel):
    ok: bool
    reason: str = ""


MESSAGES = [{"role": "user", "content": "judge this"}]


@pytest.fixture
def server():
    with ScriptedLLMServer() as srv:
        yield srv


def make_client(server: ScriptedLLMServer, **kwargs) -> LLMClient:
    options = {"timeout_s": 2.0, "max_retries": 2, "backoff_base_s": 0.01} | kwargs
    return LLMClient(base_url=server.base_url, model="judge-1", **options)


async def test_it_returns_validated_json_and_records_usage(server):
    server.enqueue(Reply(content={"ok": True, "reason": "fine"}, prompt_tokens=30))
    usage = Usage()
    verdict = await make_client(server).complete_json(MESSAGES, Verdict, usage=usage)
    assert verdict == Verdict(ok=True, reason="fine")
    assert usage.calls == 1
    assert usage.prompt_tokens == 30 and usage.completion_tokens == 7
    assert usage.latency_ms > 0
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.json["model"] == "judge-1"
    assert sent.json["response_format"] == {"type": "json_object"}
    assert sent.json["messages"] == MESSAGES


async def test_it_sends_the_key_from_the_named_env_var(server):
    config = LLMConfig(base_url=server.base_url, model="m", api_key_env="JUDGE_KEY")
    client = LLMClient.from_config(config, environ={"JUDGE_KEY": "sk-test-123"})
    server.enqueue(Reply(content={"ok": True}))
    await client.complete_json(MESSAGES, Verdict)
    assert server.requests[0].headers["Authorization"] == "Bearer sk-test-123"
    assert "sk-test-123" not in repr(client)


async def test_it_omits_response_format_when_json_mode_is_off(server):
    server.enqueue(Reply(content={"ok": True}))
    await make_client(server, json_mode=False).complete_json(MESSAGES, Verdict)
    assert "response_format" not in server.requests[0].json


async def test_it_retries_429_honouring_retry_after(server):
    server.enqueue(
        Reply(status=429, headers={"Retry-After": "0.4"}),
        Reply(content={"ok": True}),
    )
    usage = Usage()
    started = time.perf_counter()
    verdict = await make_client(server).complete_json(MESSAGES, Verdict, usage=usage)
    elapsed = time.perf_counter() - started
    assert verdict.ok
    assert len(server.requests) == 2
    assert elapsed >= 0.4
    assert usage.retries == 1 and usage.calls == 1


async def test_it_fails_fast_when_retry_after_is_too_long(server):
    server.enqueue(Reply(status=429, headers={"Retry-After": "3600"}))
    with pytest.raises(LLMError, match="retry after 3600"):
        await make_client(server).chat(MESSAGES)
    assert len(server.requests) == 1


async def test_it_retries_500s_then_succeeds(server):
    server.enqueue(Reply(status=500), Reply(status=503), Reply(content={"ok": False}))
    verdict = await make_client(server).complete_json(MESSAGES, Verdict)
    assert verdict.ok is False
    assert len(server.requests) == 3


async def test_it_gives_up_after_max_retries_with_a_clear_error(server):
    server.enqueue(*[Reply(status=500) for _ in range(5)])
    with pytest.raises(LLMError, match=r"after 3 attempt\(s\): HTTP 500"):
        await make_client(server, max_retries=2).chat(MESSAGES)
    assert len(server.requests) == 3


async def test_it_does_not_retry_client_errors(server):
    server.enqueue(Reply(status=401), Reply(content={"ok": True}))
    with pytest.raises(LLMError, match="HTTP 401"):
        await make_client(server).chat(MESSAGES)
    assert len(server.requests) == 1


async def test_a_hanging_server_times_out_and_is_retried(server):
    server.enqueue(Reply(hang=True), Reply(hang=True))
    started = time.perf_counter()
    with pytest.raises(LLMError, match="timed out after 0.3 s"):
        await make_client(server, timeout_s=0.3, max_retries=1).chat(MESSAGES)
    assert len(server.requests) == 2
    assert time.perf_counter() - started < 2.0


async def test_a_timeout_then_success_returns_the_answer(server):
    server.enqueue(Reply(hang=True), Reply(content={"ok": True}))
    verdict = await make_client(server, timeout_s=0.3).complete_json(MESSAGES, Verdict)
    assert verdict.ok


async def test_invalid_json_is_repaired_once(server):
    server.enqueue(Reply(content="{'ok': yes"), Reply(content={"ok": True, "reason": "fixed"}))
    usage = Usage()
    verdict = await make_client(server).complete_json(MESSAGES, Verdict, usage=usage)
    assert verdict.reason == "fixed"
    assert usage.calls == 2
    repair = server.requests[1].json["messages"]
    assert repair[:1] == MESSAGES
    assert repair[1] == {"role": "assistant", "content": "{'ok': yes"}
    assert repair[2]["role"] == "user" and "could not be used" in repair[2]["content"]


async def test_json_of_the_wrong_shape_is_repaired_too(server):
    server.enqueue(Reply(content={"verdict": "ok"}), Reply(content={"ok": True}))
    assert (await make_client(server).complete_json(MESSAGES, Verdict)).ok
    assert "ok" in server.requests[1].json["messages"][-1]["content"]  # names the field


async def test_invalid_json_twice_is_a_clear_error(server):
    server.enqueue(Reply(content="not json"), Reply(content="still not json"))
    with pytest.raises(LLMInvalidOutput, match="not valid JSON .* even after one repair"):
        await make_client(server).complete_json(MESSAGES, Verdict)
    assert len(server.requests) == 2


async def test_a_200_without_choices_is_an_error(server):
    server.enqueue(Reply(body='{"object": "error"}'))
    with pytest.raises(LLMError, match="without a chat completion"):
        await make_client(server).chat(MESSAGES)


async def test_fenced_json_is_accepted_without_repair(server):
    server.enqueue(Reply(content='```json\n{"ok": true}\n```'))
    assert (await make_client(server).complete_json(MESSAGES, Verdict)).ok
    assert len(server.requests) == 1


async def test_it_limits_concurrent_requests():
    with ScriptedLLMServer(latency=0.2) as server:
        server.responder = lambda request: {"ok": True}
        client = make_client(server, max_concurrency=2)
        started = time.perf_counter()
        await asyncio.gather(*(client.complete_json(MESSAGES, Verdict) for _ in range(6)))
        elapsed = time.perf_counter() - started
    assert server.max_in_flight == 2
    assert 0.6 <= elapsed < 1.2


async def test_connection_errors_are_retried_then_reported():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = LLMClient(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, backoff_base_s=0.01
    )
    usage = Usage()
    with pytest.raises(LLMError, match="connection error"):
        await client.chat(MESSAGES, usage=usage)
    assert usage.retries == 1


def test_an_unconfigured_model_is_a_clear_error():
    with pytest.raises(LLMNotConfigured, match="no model is configured"):
        LLMClient.from_config(LLMConfig(base_url="http://x/v1"))
    assert client_for_config(LLMConfig(model="m")) is None


def test_clients_are_cached_per_configuration():
    a = client_for_config(LLMConfig(base_url="http://a.test/v1", model="m"))
    b = client_for_config(LLMConfig(base_url="http://a.test/v1", model="m"))
    c = client_for_config(LLMConfig(base_url="http://a.test/v1", model="other"))
    assert a is b and a is not c


def test_retry_after_accepts_seconds_and_http_dates():
    now = datetime(2025, 1, 1, tzinfo=UTC)
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=5)), now=now) == 5.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=5)), now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_backoff_grows_with_jitter_and_respects_the_cap():
    client = LLMClient(base_url="http://x/v1", model="m", backoff_base_s=1.0, backoff_max_s=4.0)
    for attempt, (low, high) in enumerate([(0.5, 1.0), (1.0, 2.0), (2.0, 4.0), (2.0, 4.0)]):
        delays = {client.backoff_delay(attempt) for _ in range(50)}
        assert all(low <= d <= high for d in delays)
        assert len(delays) > 1  # jittered
    assert 3.0 <= client.backoff_delay(0, retry_after=3.0) <= 3.3


def test_parse_json_object_tolerates_chatter_but_wants_an_object():
    assert parse_json_object('Sure! {"a": 1} Hope that helps.') == {"a": 1}
    with pytest.raises(ValueError):
        parse_json_object("[1, 2]")
    with pytest.raises(ValueError):
        parse_json_object("no json here")


def test_one_client_serves_several_event_loops(server):
    """Workers run audits in fresh event loops; a shared client must not break."""
    server.responder = lambda request: {"ok": True}
    client = make_client(server, max_concurrency=1)
    for _ in range(2):
        assert asyncio.run(client.complete_json(MESSAGES, Verdict)).ok
    assert len(server.requests) == 2


async def test_the_configured_client_is_guarded_by_the_operators_policy(server, monkeypatch):
    from analyzers.engine.llm import ModelAccessPolicy, clear_client_cache

    clear_client_cache()
    config = LLMConfig(base_url=server.base_url, model="m")  # a server on 127.0.0.1
    with pytest.raises(LLMError, match="SSRF guard"):
        await client_for_config(config).chat(MESSAGES)  # the default policy: public only
    assert server.requests == []
    server.enqueue(Reply(content={"ok": True}))
    allowed = client_for_config(config, ModelAccessPolicy(allow_private=True))
    assert (await allowed.complete_json(MESSAGES, Verdict)).ok
    monkeypatch.setenv("SECRET_KEY", "never-sent")
    with pytest.raises(LLMError, match="api_key_env"):
        client_for_config(config.model_copy(update={"api_key_env": "SECRET_KEY"}))
    clear_client_cache()
