"""A stream through the OpenAI-compatible proxy shows on the Live page while it streams."""

from __future__ import annotations

import json
import threading

import pytest
from openai import OpenAI

from analyzers.config_store import save_config
from analyzers.models import ApiKey
from tests.live_support import BASE_DIR
from tests.proxy_upstream import Completion, UpstreamServer

pytestmark = pytest.mark.browser

ANSWER = (
    "Acme search is easy to set up.\n\n"
    "See [the guide](https://evil-tracker.example.net/x) for more.\n\nThanks!"
)


def test_a_proxied_stream_appears_on_live_while_it_streams(
    page, staff_user, login, server_url, settings
):
    settings.AUDITOR_PROXY_ALLOW_PRIVATE = True
    _, key = ApiKey.create_key("proxy browser", scope="ingest")
    with UpstreamServer() as upstream:
        config = json.loads((BASE_DIR / "tests" / "samples" / "config.json").read_text())
        config["proxy"] = {"base_url": upstream.base_url, "timeout_s": 30}
        save_config(config, actor="test")
        # the first paragraph, then the upstream pauses mid-answer
        upstream.enqueue(Completion(content=ANSWER, pause_after=8, pause=4.0))
        login(page)
        page.goto("/live/")
        page.wait_for_selector("[data-live-indicator][data-state=connected]")

        received: list[str] = []
        ids: list[str] = []

        def consume() -> None:
            client = OpenAI(base_url=f"{server_url}/v1", api_key=key, max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model="m",
                messages=[{"role": "user", "content": "proxied into the browser"}],
                stream=True,
            )
            ids.append(raw.headers["x-auditor-audit-id"])
            for chunk in raw.parse():
                if chunk.choices and chunk.choices[0].delta.content:
                    received.append(chunk.choices[0].delta.content)

        thread = threading.Thread(target=consume)
        thread.start()
        try:
            page.wait_for_selector("[id^=audit-card-][data-status=running]", timeout=10_000)
            card = page.locator("[id^=audit-card-][data-status=running]").first
            assert "proxied into the browser" in card.inner_text()
            assert thread.is_alive()  # still streaming: the upstream is paused
        finally:
            thread.join(30)
        audit_id = ids[0]
        page.wait_for_selector(f"#audit-card-{audit_id}[data-status=complete]", timeout=20_000)
        assert "evil-tracker" not in "".join(received)
        assert not [e for e in page.errors if "WebSocket" not in e]
