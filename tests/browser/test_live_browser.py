"""Live pages in headless Chromium against a daphne server (run with `-m browser`)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from django.db import connection
from playwright.sync_api import expect
from websockets.sync.client import connect

from analyzers.models import ApiKey
from audits.execution import execute
from audits.intake import submit
from tests.live_support import free_port, start_daphne, stop

pytestmark = pytest.mark.browser


@pytest.fixture
def staff_page(page, staff_user, login):
    login(page)
    return page


@pytest.fixture
def ingest_key(staff_user) -> str:
    _, raw = ApiKey.create_key("browser", scope="ingest")
    return raw


def test_a_submitted_audit_appears_on_live_without_reload(staff_page, server_url, ingest_key):
    page = staff_page
    page.goto("/live/")
    page.wait_for_selector("[data-live-indicator][data-state=connected]")
    r = httpx.post(
        f"{server_url}/api/audits",
        json={"user_input": "browser live check", "response": "Acme is easy."},
        headers={"Authorization": f"Bearer {ingest_key}"},
    )
    assert r.status_code == 202, r.text
    card = page.locator(f"#audit-card-{r.json()['id']}")
    card.wait_for()
    page.wait_for_selector(f"#audit-card-{r.json()['id']}[data-status=complete]")
    assert "browser live check" in card.inner_text()
    assert page.locator(f"#audit-card-{r.json()['id']}").count() == 1
    assert not [e for e in page.errors if "WebSocket" not in e]


PARAGRAPHS = [
    "First paragraph: Acme is easy to set up.\n\n",
    "Al-Futtaim achieved +206% revenue after adopting Acme. Second paragraph stays.\n\n",
    "See [this guide](https://random-blog.example.org/acme-tips) in the third paragraph.\n\n",
    "Fourth and last paragraph, thanks!",
]
MARKERS = ["First paragraph", "Second paragraph stays", "in the third paragraph", "Fourth and last"]
FINAL_SECTIONS = ["audit-header", "results", "response", "diff", "links", "trace"]


def ingest_events(ws, until: str) -> list[tuple[str, dict]]:
    """Frames of the ingest socket up to and including the first `until` event."""
    events = []
    while True:
        frame = json.loads(ws.recv(timeout=15))
        events.append((frame["event"], frame["data"]))
        if frame["event"] == until:
            return events


def test_a_streaming_audit_shows_paragraphs_and_trace_lines_in_order(
    staff_page, server_url, ingest_key
):
    page = staff_page
    host = server_url.removeprefix("http://")
    with connect(
        f"ws://{host}/ws/ingest/", additional_headers={"Authorization": f"Bearer {ingest_key}"}
    ) as ws:
        ws.send(json.dumps({"user_input": "streamed into the browser"}))
        audit_id = ingest_events(ws, "accepted")[-1][1]["id"]
        sockets: list[str] = []
        page.on("websocket", lambda socket: sockets.append(socket.url))
        page.goto(f"/audits/{audit_id}/")
        page.wait_for_selector(
            f"#live-audit-{audit_id} [data-live-indicator][data-state=connected]"
        )
        text = page.locator(f"#stream-{audit_id} [data-stream-text]")
        trace = page.locator(f"#trace-{audit_id} > li[id]")
        sent_trace: list[str] = []
        for n, paragraph in enumerate(PARAGRAPHS[:-1]):
            ws.send(json.dumps({"text": paragraph}))
            events = ingest_events(ws, "chunk")
            sent_trace += [d["text"] for name, d in events if name == "audit_trace"]
            expect(text).to_contain_text(MARKERS[n])
            shown = text.inner_text()
            positions = [shown.index(m) for m in MARKERS[: n + 1]]
            assert positions == sorted(positions), shown
            assert not any(m in shown for m in MARKERS[n + 1 :])  # nothing before it is audited
            # The trace so far, in order (more may follow this paragraph's chunk event).
            expect(trace.nth(len(sent_trace) - 1)).to_be_attached()
            assert trace.all_inner_texts()[: len(sent_trace)] == sent_trace
        assert page.locator(f"#stream-{audit_id} del").count() >= 1  # the stripped claim
        ws.send(json.dumps({"text": PARAGRAPHS[-1]}))
        ws.send(json.dumps({"done": True}))
        final = ingest_events(ws, "audit")[-1][1]
        # One socket for the whole stream: updates never replace the element holding it.
        assert [u for u in sockets if audit_id in u] == [f"ws://{host}/ws/audits/{audit_id}/"]

    page.wait_for_selector(f"#audit-header-{audit_id}[data-status=complete]")
    expect(page.locator(f"#live-audit-{audit_id}")).to_be_hidden()
    expect(page.locator(f"#stream-{audit_id}")).to_be_hidden()
    # Link-health lines come with the final audit: the page shows every one of them.
    expect(trace).to_have_count(len(final["trace"]))
    live = {name: page.locator(f"#{name}-{audit_id}").inner_text() for name in FINAL_SECTIONS}
    assert trace.all_inner_texts() == final["trace"]
    page.reload()
    reloaded = {name: page.locator(f"#{name}-{audit_id}").inner_text() for name in FINAL_SECTIONS}
    assert live == reloaded
    assert not [e for e in page.errors if "WebSocket" not in e]


def run_audit_offline(user_input: str) -> str:
    """Submit and audit in this process (a worker while the web server is down): the id."""
    result: list[str] = []

    def work() -> None:
        try:
            run = submit.submit_audit(
                user_input=user_input, response="Acme is easy.", enqueue=False
            )
            execute.execute_run(run.pk)
            result.append(str(run.pk))
        finally:
            connection.close()

    thread = threading.Thread(target=work)  # no event loop there (Playwright has one here)
    thread.start()
    thread.join(30)
    return result[0]


@pytest.fixture
def own_server(tmp_path):
    """A daphne server of this test's own, which it can stop and start again on its port."""
    port = free_port()
    servers: list = []

    def start():
        servers.append(start_daphne(port, tmp_path / "daphne.log", DEBUG="true"))

    def kill():
        stop(servers.pop())

    start()
    yield f"http://127.0.0.1:{port}", start, kill
    while servers:
        stop(servers.pop())


def test_live_reconnects_after_a_server_restart_and_catches_up(
    page, staff_user, login, ingest_key, own_server
):
    url, start, kill = own_server
    staff_user.set_password("restart-test-password-1")
    staff_user.save()
    page.goto(f"{url}/accounts/login/?next=/live/")
    page.fill("#id_username", staff_user.username)
    page.fill("#id_password", "restart-test-password-1")
    page.click("button[type=submit]")
    indicator = page.locator("[data-live-indicator]")
    expect(indicator).to_have_attribute("data-state", "connected")
    r = httpx.post(
        f"{url}/api/audits",
        json={"user_input": "before the restart", "response": "Acme is easy."},
        headers={"Authorization": f"Bearer {ingest_key}"},
    )
    before = r.json()["id"]
    page.wait_for_selector(f"#audit-card-{before}[data-status=complete]")

    kill()
    expect(indicator).to_have_attribute("data-state", "reconnecting")
    missed = [run_audit_offline(f"while the server was down {n}") for n in range(3)]
    start()

    expect(indicator).to_have_attribute("data-state", "connected", timeout=20_000)
    for audit_id in missed:
        page.wait_for_selector(f"#audit-card-{audit_id}[data-status=complete]")
    for audit_id in [before, *missed]:
        assert page.locator(f"#audit-card-{audit_id}").count() == 1
    # Newest first, as a reload shows them.
    shown = page.locator("#live-rows > li").evaluate_all("els => els.map(e => e.id)")
    assert shown[:4] == [f"audit-card-{a}" for a in [*reversed(missed), before]]
    # Still live after the catch-up.
    r = httpx.post(
        f"{url}/api/audits",
        json={"user_input": "after the restart", "response": "Acme is easy."},
        headers={"Authorization": f"Bearer {ingest_key}"},
    )
    page.wait_for_selector(f"#audit-card-{r.json()['id']}")
    # While the server was down, failed attempts were logged by Chromium ("WebSocket
    # connection ... failed") and by htmx (its htmx:wsError event, "[object Event]").
    assert not [e for e in page.errors if "WebSocket" not in e and e != "[object Event]"]


def test_a_burst_replaces_the_live_list_also_while_paused(staff_page):
    """The hub sends only a burst's newest cards, marked `data-live-reset`: they replace
    the list (static/js/live.js); while paused they replace what was queued, and the list
    on resume. The fragments go through htmx's own out-of-band swap, as from the socket."""
    page = staff_page
    page.goto("/live/")
    page.wait_for_selector("[data-live-indicator][data-state=connected]")

    def send(ids: list[str], reset: bool) -> None:
        rows = "".join(f'<li id="audit-card-{i}">{i}</li>' for i in ids)
        marker = " data-live-reset" if reset else ""
        page.evaluate(
            "html => htmx.swap('#live-rows', html, {swapStyle: 'none'})",
            f'<div hx-swap-oob="afterbegin:#live-rows"{marker}>{rows}</div>',
        )

    def shown() -> list[str]:
        return page.eval_on_selector_all(
            "#live-rows > li", "items => items.map(li => li.id.replace('audit-card-', ''))"
        )

    send(["a2", "a1"], reset=False)
    assert shown()[:2] == ["a2", "a1"]
    send(["b3", "b2", "b1"], reset=True)
    assert shown() == ["b3", "b2", "b1"]

    page.click("[data-live-pause]")
    send(["c2", "c1"], reset=True)
    send(["d1"], reset=False)
    assert shown() == ["b3", "b2", "b1"]  # paused: nothing moves
    page.click("[data-live-pause]")
    assert shown() == ["d1", "c2", "c1"]
    assert not [e for e in page.errors if "WebSocket" not in e]
