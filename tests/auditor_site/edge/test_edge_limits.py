"""The shipped server's edge: keys checked from the head, bodies that stall, a flood of
connections, forwarded addresses.

Against a real server process on 127.0.0.1 (`tests.live_support.start_server`) with raw
sockets, so the test controls exactly what is sent and when.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import selectors
import socket
import time
import uuid

import httpx
import pytest

from analyzers.config_store import save_config
from auditor_site.edge.key_gate import KeyGate, ninja_checks
from tests.auditor_site.edge.test_server_limits import read_status
from tests.live_support import BASE_DIR, free_port, session_headers, start_server, stop

pytestmark = pytest.mark.django_db(transaction=True)

BODY_IDLE_S, STREAM_IDLE_S, MAX_CONNECTIONS, LOGIN_FAILURES = 1, 3, 50, 3
SAMPLE_CONFIG = BASE_DIR / "tests" / "samples" / "config.json"
NO_KEY = "a valid API key is required (Authorization: Bearer <key>)"


@pytest.fixture(scope="module")
def edge(django_db_setup, tmp_path_factory):
    """A server with small body timeouts, a cap of 50 connections, no trusted proxy."""
    port = free_port()
    proc = start_server(
        port,
        tmp_path_factory.mktemp("edge") / "server.log",
        AUDITOR_BODY_IDLE_TIMEOUT_S=str(BODY_IDLE_S),
        AUDITOR_STREAM_IDLE_TIMEOUT_S=str(STREAM_IDLE_S),
        AUDITOR_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        AUDITOR_LOGIN_FAILURE_LIMIT=str(LOGIN_FAILURES),
        AUDITOR_PROXY_ALLOW_PRIVATE="true",
        AUDITOR_UPSTREAM_API_KEY="sk-upstream",
    )
    yield port, proc
    stop(proc)


def post_head(
    path: str,
    key: str | None = None,
    length: int | None = 100_000,
    content_type: str = "application/json",
    method: str = "POST",
) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
    if key is not None:
        head += f"Authorization: Bearer {key}\r\n"
    head += (
        f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
    )
    return (head + "\r\n").encode()


def response(sock: socket.socket, timeout: float = 5.0) -> tuple[int, bytes, bytes]:
    """Status, head and body (by its Content-Length) of the answer on `sock`."""
    status, data = read_status(sock, timeout)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(65536)
    return status, head.lower(), body


def closed(sock: socket.socket, timeout: float) -> bool:
    """True when the server closes `sock` within `timeout` (whatever it sends first)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:  # reset: closed too
        pass
    return True


def stalled(port: int, head: bytes) -> tuple[int, bytes, bytes, float, socket.socket]:
    """Send `head` and one byte of the body, then nothing: the answer and its delay."""
    sock = socket.create_connection(("127.0.0.1", port))
    started = time.monotonic()
    sock.sendall(head + (b"10\r\n{" if b"chunked" in head else b"{"))
    status, answer_head, body = response(sock, timeout=10)
    return status, answer_head, body, time.monotonic() - started, sock


# --- keys checked from the head ---------------------------------------------------------


def test_a_stalled_body_without_a_key_is_answered_401_at_once_and_closed(edge):
    """Before: no answer and no close, for as long as the client trickled its body."""
    port, _ = edge
    for key in (None, "ra_unknown_key"):
        status, head, body, delay, sock = stalled(port, post_head("/api/audits", key))
        with sock:
            assert status == 401, body
            assert json.loads(body) == {"detail": NO_KEY}  # the API's own answer
            assert b"www-authenticate: bearer" in head and b"connection: close" in head
            assert delay < BODY_IDLE_S  # not the body timeout
            assert closed(sock, 2)


def test_every_key_protected_endpoint_answers_from_the_head(edge, make_key):
    """Its own refusal (status and body as without a body), for the API, the stream, the
    proxy and OTLP; a key without the scope gets 403."""
    port, _ = edge
    ingest_key = make_key("ingest")
    review = f"/api/audits/{uuid.uuid4()}/reviews"
    cases = [
        (post_head("/api/audits/batch"), 401, {"detail": NO_KEY}),
        (
            post_head(review, ingest_key),
            403,
            {"detail": "this API key has the 'ingest' scope; this call needs 'review'"},
        ),
        (
            post_head("/api/config", ingest_key, method="PUT"),
            403,
            {"detail": "this API key has the 'ingest' scope; this call needs 'admin'"},
        ),
        (post_head("/api/audits/stream", length=None), 401, {"detail": NO_KEY}),
    ]
    for head, code, expected in cases:
        status, answer_head, body, _, sock = stalled(port, head)
        with sock:
            assert (status, json.loads(body)) == (code, expected), head
            assert b"connection: close" in answer_head
    status, _, body, _, sock = stalled(port, post_head("/v1/chat/completions"))
    with sock:
        assert status == 401 and json.loads(body)["error"]["message"] == NO_KEY
    status, _, body, _, sock = stalled(port, post_head("/v1/traces"))
    with sock:
        assert status == 401 and json.loads(body)["code"] == 16  # google.rpc UNAUTHENTICATED


def test_requests_the_gate_does_not_refuse_still_reach_their_endpoints(edge, make_key):
    port, _ = edge
    key = make_key("ingest")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        ok = client.post(
            "/api/audits",
            json={"user_input": "q", "response": "Plain."},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert ok.status_code == 202
        login = client.post("/accounts/login/", data={"username": "x", "password": "y"})
        assert login.status_code == 403  # Django's CSRF refusal: not a key's business
        assert client.get("/api/audits").status_code == 401  # no body: ninja as before


# --- bodies that stall --------------------------------------------------------------------


def test_a_stalled_body_with_a_key_gets_408_after_the_body_timeout(edge, make_key):
    port, _ = edge
    status, head, _, delay, sock = stalled(port, post_head("/api/audits", make_key("ingest")))
    with sock:
        assert status == 408
        assert b"connection: close" in head
        assert BODY_IDLE_S * 0.9 < delay < BODY_IDLE_S + 2
        assert closed(sock, 2)


def test_a_body_that_keeps_coming_is_not_cut_however_long_it_takes(edge, make_key):
    port, _ = edge
    body = json.dumps({"user_input": "q", "response": "A slow but steady answer."}).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(post_head("/api/audits", make_key("ingest"), len(body)))
        pieces = [body[i : i + 10] for i in range(0, len(body), 10)]
        for piece in pieces:  # 0.5 s apart: longer in all than the body timeout
            sock.sendall(piece)
            time.sleep(BODY_IDLE_S / 2)
        assert len(pieces) * BODY_IDLE_S / 2 > 2 * BODY_IDLE_S
        assert response(sock)[0] == 202


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def test_a_stream_is_cut_at_the_stream_timeout_not_the_body_timeout(edge, make_key):
    port, _ = edge
    key = make_key("ingest")
    head_line = json.dumps({"user_input": "Which retailers use Acme?"}).encode() + b"\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(post_head("/api/audits/stream", key, length=None) + chunk(head_line))
        assert read_status(sock)[0] == 200  # the server-sent events begin
        time.sleep(BODY_IDLE_S * 2)  # quiet for twice the body timeout: still open
        sock.sendall(chunk(b'{"text": "Plain answer."}\n') + b"0\r\n\r\n")
        sock.settimeout(10)
        events = b""
        while b"event: audit" not in events:
            data = sock.recv(65536)
            assert data, f"closed: {events!r}"
            events += data
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(post_head("/api/audits/stream", key, length=None) + chunk(head_line))
        assert read_status(sock)[0] == 200
        started = time.monotonic()
        assert closed(sock, STREAM_IDLE_S + 5)
        assert STREAM_IDLE_S * 0.9 < time.monotonic() - started < STREAM_IDLE_S + 3


def test_a_proxied_call_whose_body_stalls_gets_408_at_the_stream_timeout(edge, make_key, settings):
    port, _ = edge
    settings.AUDITOR_PROXY_ALLOW_PRIVATE = True
    config = json.loads(SAMPLE_CONFIG.read_text())
    config["proxy"] = {"base_url": "http://127.0.0.1:9/v1", "timeout_s": 5}  # never reached
    save_config(config, actor="test")
    status, _, _, delay, sock = stalled(port, post_head("/v1/chat/completions", make_key("ingest")))
    with sock:
        assert status == 408
        assert STREAM_IDLE_S * 0.9 < delay < STREAM_IDLE_S + 2


# --- the connection cap -------------------------------------------------------------------


def open_fds(proc) -> int:
    return len(os.listdir(f"/proc/{proc.pid}/fd"))


def get_login(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        return read_status(sock)[0]


def test_a_flood_of_connections_is_capped_and_the_server_serves_again_after(edge):
    port, proc = edge
    before = open_fds(proc)
    flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
    try:
        selector = selectors.DefaultSelector()
        for sock in flood:
            selector.register(sock, selectors.EVENT_READ)
        answers: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for ready, _ in selector.select(timeout=0.2):
                sock = ready.fileobj
                answers[sock] = answers.get(sock, b"") + sock.recv(65536)
        refused = [a for a in answers.values() if a.startswith(b"HTTP/1.1 503 ")]
        assert len(refused) == len(answers)  # nothing else was said to anyone
        assert MAX_CONNECTIONS - 5 <= 200 - len(refused) <= MAX_CONNECTIONS
        assert open_fds(proc) - before <= MAX_CONNECTIONS + 5
        assert get_login(port) == 503  # still full
    finally:
        for sock in flood:
            sock.close()
    deadline = time.monotonic() + 5
    while get_login(port) != 200:
        assert time.monotonic() < deadline, "the server did not serve again"
        time.sleep(0.1)


# --- forwarded addresses and the login throttle --------------------------------------------


def failed_then_right(port: int, forwarded: list[str], last: str) -> int:
    """Failed logins of `staff` from each `forwarded` address, then the right password
    from `last`: that answer's status (429 when locked out)."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:

        def login(password: str, address: str) -> int:
            page = client.get("/accounts/login/").text
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
            return client.post(
                "/accounts/login/",
                headers={"X-Forwarded-For": address},
                data={
                    "username": "staff",
                    "password": password,
                    "csrfmiddlewaretoken": token,
                },
            ).status_code

        for address in forwarded:
            assert login("wrong", address) in (200, 429)
        return login("staff-password-1", last)


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored_by_the_login_throttle(edge, staff_user):
    """Before, uvicorn believed it from loopback: rotating it escaped the lockout."""
    port, _ = edge
    rotating = [f"198.51.100.{i}" for i in range(LOGIN_FAILURES)]
    assert failed_then_right(port, rotating, "198.51.100.200") == 429


def test_x_forwarded_for_from_a_trusted_proxy_is_the_address(staff_user, tmp_path):
    port = free_port()
    proc = start_server(
        port,
        tmp_path / "server.log",
        AUDITOR_TRUSTED_PROXIES="10.0.0.0/8, 127.0.0.1",
        AUDITOR_LOGIN_FAILURE_LIMIT=str(LOGIN_FAILURES),
    )
    try:
        rotating = [f"198.51.100.{i}" for i in range(LOGIN_FAILURES)]
        assert failed_then_right(port, rotating, "198.51.100.200") == 302  # each its own
        assert failed_then_right(port, ["203.0.113.9"] * LOGIN_FAILURES, "203.0.113.9") == 429
    finally:
        stop(proc)


# --- the gate on its own (ASGI messages, no server) -----------------------------------------


async def gate_call(scope_headers, path="/api/audits/export", method="GET"):
    seen = []

    async def app(scope, receive, send):
        seen.append(await receive())

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        pass

    scope = {"type": "http", "path": path, "method": method, "headers": scope_headers}
    await KeyGate(app, {})(scope, receive, send)
    return seen[0]["body"]


def test_a_session_cookie_passes_where_the_endpoint_takes_a_session(staff_user):
    assert ninja_checks("/api/audits/export", "GET") == ("read", "session")
    body = [(b"content-length", b"2")]
    cookie = [h for h in session_headers(staff_user) if h[0] == b"cookie"]
    assert asyncio.run(gate_call(body + cookie)) == b"{}"  # the body reaches the endpoint
    assert asyncio.run(gate_call(body)) == b""  # refused: answered from an empty body
    assert asyncio.run(gate_call(body, path="/accounts/login/", method="POST")) == b"{}"
