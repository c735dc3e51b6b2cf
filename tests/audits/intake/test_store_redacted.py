"""`privacy.store: redacted`: whatever way an audit comes in (the API, a batch, a stream, the
proxy, OTLP), the card number and the key it holds never reach the database: no table
holds them and neither do the SQLite files' bytes; the placeholders are still flagged."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from openai import OpenAI

from analyzers.config_store import VERSION_CHECK_INTERVAL_S, save_config
from audits.models import AuditRun
from tests.audits.api.test_otlp_live import wait_for_audits
from tests.live_support import free_port, start_server, stop
from tests.otlp_support import genai_chat, json_body, record
from tests.privacy_support import CARD, KEY, RAW, TEXT, files_holding, tables_holding
from tests.proxy_upstream import Completion, UpstreamServer

pytestmark = pytest.mark.django_db(transaction=True)

SOURCE = {"title": "CRM note", "url": f"https://acme.example/crm?key={KEY}", "text": TEXT}


@pytest.fixture(scope="module")
def upstream():
    with UpstreamServer() as server:
        yield server


@pytest.fixture(scope="module")
def server(upstream, tmp_path_factory):
    port = free_port()
    env = {"AUDITOR_PROXY_ALLOW_PRIVATE": "true", "AUDITOR_UPSTREAM_API_KEY": "sk-upstream"}
    proc = start_server(port, tmp_path_factory.mktemp("redacted") / "server.log", **env)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(autouse=True)
def _redacting(upstream, settings, transactional_db):
    settings.AUDITOR_PROXY_ALLOW_PRIVATE = True
    save_config(
        {
            "allowed_hosts": ["acme.example"],
            "privacy": {"store": "redacted"},
            "proxy": {"base_url": upstream.base_url, "timeout_s": 5},
        },
        actor="test",
    )
    time.sleep(VERSION_CHECK_INTERVAL_S + 0.1)  # the server notices the change


@pytest.fixture
def key(make_key) -> str:
    return make_key("ingest")


def assert_nothing_raw(runs: list[AuditRun]) -> None:
    assert tables_holding() == []
    assert files_holding() == []
    for run in runs:
        assert run.status == "complete", run.error
        assert "[CARD]" in run.response and "[SECRET]" in run.response
        flagged = {a.type for a in run.annotations.filter(result__analyzer_id="privacy")}
        assert {"PII_CREDIT_CARD", "SECRET_API_KEY"} <= flagged


def test_the_api(server, key):
    body = {
        "user_input": f"Check {CARD}",
        "response": TEXT,
        "sources": [SOURCE],
        "metadata": {"user_id": "u-1"},
    }
    r = httpx.post(f"{server}/api/audits", json=body, headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 202, r.text
    runs = wait_for_audits(1)
    assert runs[0].user_input == "Check [CARD]" and runs[0].metadata == {"user_id": "u-1"}
    assert_nothing_raw(runs)


def test_a_batch(server, key):
    items = [
        {
            "user_input": f"Check {CARD}",
            "response": TEXT,
            "sources": [SOURCE],
            "external_id": f"b-{i}",
        }
        for i in range(3)
    ]
    r = httpx.post(
        f"{server}/api/audits/batch",
        json={"audits": items},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 202, r.text
    assert_nothing_raw(wait_for_audits(3))
    # a retry of the same body is the same audit (compared by the original's fingerprint)
    r = httpx.post(
        f"{server}/api/audits/batch",
        json={"audits": items},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 202 and AuditRun.objects.count() == 3


def test_a_stream(server, key):
    lines = [
        {"user_input": f"Check {CARD}", "sources": [SOURCE]},
        {"text": "First paragraph.\n\nYour card "},
        {"text": CARD[:9]},
        {"text": CARD[9:] + f" and the key {KEY[:10]}"},
        {"text": KEY[10:] + ".\n\nBye."},
    ]
    body = "".join(json.dumps(line) + "\n" for line in lines)
    chunks = []
    with httpx.stream(
        "POST",
        f"{server}/api/audits/stream",
        content=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and '"text"' in line:
                chunks.append(json.loads(line[6:]).get("text", ""))
    sent = "".join(chunks)
    assert "[CARD]" in sent and all(v not in sent for v in RAW)
    assert_nothing_raw(wait_for_audits(1))


def test_the_proxy(server, upstream, key):
    upstream.enqueue(Completion(content=f"Sure.\n\n{TEXT}\n\nAnything else?", token_delay=0))
    client = OpenAI(base_url=f"{server}/v1", api_key=key, max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-x",
        stream=True,
        messages=[{"role": "user", "content": f"My card is {CARD}, key {KEY}"}],
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert "[CARD]" in text and all(v not in text for v in RAW)
    assert_nothing_raw(wait_for_audits(1))


def test_otlp(server, key):
    spans = record(
        lambda t: genai_chat(
            t, question=f"My card is {CARD}", answer=TEXT, extra={"app.note": f"key {KEY}"}
        )
    )
    r = httpx.post(
        f"{server}/v1/traces",
        content=json_body(spans),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text
    assert_nothing_raw(wait_for_audits(1))


def test_the_original_is_stored_by_default(server, key):
    """The check can fail: with `store: original` the raw values are in the tables."""
    save_config({"allowed_hosts": ["acme.example"]}, actor="test")
    time.sleep(VERSION_CHECK_INTERVAL_S + 0.1)  # the server notices the change
    r = httpx.post(
        f"{server}/api/audits",
        json={"user_input": "q", "response": TEXT},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 202
    wait_for_audits(1)
    assert "audits_auditrun.response" in tables_holding()
