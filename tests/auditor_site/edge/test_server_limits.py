"""The shipped server: bodies and heads refused before they are buffered, heads that take
too long refused, prompt SIGTERM.

Against a real server process on 127.0.0.1 (`tests.live_support.start_server`), with raw
sockets so the test controls exactly what is sent: a body that never arrives, or a chunked
body that never ends, must still get its 413.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import httpx
import pytest

from auditor_site.edge.body_limit import BodyLimitMiddleware
from tests.live_support import free_port, start_server, stop

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 100_000


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    proc = start_server(
        port, log, os.environ.get("TEST_SERVER", "uvicorn"), AUDITOR_MAX_BODY_BYTES=str(LIMIT)
    )
    yield port, proc
    stop(proc)


def read_status(sock: socket.socket, timeout: float = 5.0) -> tuple[int, bytes]:
    """The status code and raw head of the response on `sock`."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]), data


def test_a_declared_length_over_the_limit_gets_413_before_any_body_is_sent(server):
    port, _ = server
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /api/audits HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 104857600\r\n\r\n"
        )
        status, head = read_status(sock)  # daphne waited for the 100 MB here
    assert status == 413
    assert b"connection: close" in head.lower()


def test_a_chunked_body_over_the_limit_gets_413_while_it_is_still_being_sent(server, make_key):
    port, _ = server
    key = make_key(
        "ingest"
    )  # without one, the head alone is refused (tests/auditor_site/edge/test_edge_limits.py)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /api/audits HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + key.encode() + b"\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        piece = b"x" * 16_384
        for _ in range(LIMIT // len(piece) + 2):  # past the limit, and the body never ends
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        status, _ = read_status(sock)
    assert status == 413


def test_bodies_within_the_limit_still_reach_the_api(server, make_key):
    port, _ = server
    key = make_key("ingest")
    body = {"user_input": "q", "response": "Plain answer."}

    def chunks():
        yield json.dumps(body).encode()

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        assert client.post("/api/audits", json=body, headers=headers).status_code == 202
        # No Content-Length (chunked): counted, and under the limit.
        assert client.post("/api/audits", content=chunks(), headers=headers).status_code == 202
        unauthenticated = client.post("/api/audits", content=b"x" * (LIMIT + 1))
        assert unauthenticated.status_code == 413


HEAD_LIMIT = 65_536  # AUDITOR_MAX_HEAD_BYTES's default


def rss_kb(proc) -> int:
    with open(f"/proc/{proc.pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def send_endlessly(sock: socket.socket, prefix: bytes, total: int) -> int:
    """`prefix`, then up to `total` bytes of "a" in 1 MiB pieces; how many were sent
    before the server closed the connection."""
    sock.sendall(prefix)
    piece, sent = b"a" * (1 << 20), 0
    try:
        while sent < total:
            sock.sendall(piece)
            sent += len(piece)
    except OSError:  # the server answered and closed
        pass
    return sent


def test_a_header_that_never_ends_gets_431_and_the_server_keeps_its_memory(server):
    """httptools keeps a header until it ends: before the bound, 200 MB of one header grew
    the server by ~400 MB."""
    port, proc = server
    before = rss_kb(proc)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sent = send_endlessly(
            sock, b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ", 64 << 20
        )
        status, head = read_status(sock)
    assert status == 431
    assert b"connection: close" in head.lower()
    assert sent < 64 << 20  # refused while it was still being sent
    assert rss_kb(proc) - before < 16_000


def test_a_url_over_the_head_limit_gets_431(server):
    port, _ = server
    with socket.create_connection(("127.0.0.1", port)) as sock:
        send_endlessly(sock, b"GET /accounts/login/?q=", 4 << 20)
        status, _ = read_status(sock)
    assert status == 431


def test_heads_within_the_limit_still_reach_the_app(server, make_key):
    """A head just under the limit, sent in small pieces; then, on one keep-alive
    connection, three requests whose heads add up to more than the limit; and a body larger
    than the limit that may arrive in the same read as its head: none of it is refused."""
    port, _ = server

    def head(headers: int) -> bytes:  # ~1 KB per header
        padding = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"v" * 1000) for i in range(headers))
        return b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n" + padding + b"\r\n"

    big, get = head(62), head(40)
    assert HEAD_LIMIT - 4096 < len(big) < HEAD_LIMIT
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for i in range(0, len(big), 1000):
            sock.sendall(big[i : i + 1000])
            time.sleep(0.001)
        assert read_status(sock)[0] == 200
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for _ in range(3):
            sock.sendall(get)
            status, head = read_status(sock)
            assert status == 200
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            rest = head.split(b"\r\n\r\n", 1)[1]
            while len(rest) < length:
                rest += sock.recv(65536)
    key = make_key("ingest")
    body = json.dumps({"user_input": "q", "response": "x" * 90_000}).encode()
    assert len(body) > HEAD_LIMIT
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /api/audits HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer " + key.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        assert read_status(sock)[0] == 202


@pytest.fixture(scope="module")
def impatient_server(django_db_setup, tmp_path_factory):
    """A server giving a request head 1 s, whose audits take 1.5 s to analyse."""
    port = free_port()
    log = tmp_path_factory.mktemp("impatient") / "server.log"
    proc = start_server(
        port,
        log,
        AUDITOR_HEAD_TIMEOUT_S="1",
        AUDITOR_EXTRA_ANALYZERS="tests.slow_analyzer.SlowAnalyzer",
        SLOW_ANALYZER_SECONDS="1.5",
    )
    yield port
    stop(proc)


def test_a_head_trickling_in_gets_408_when_its_time_is_up(impatient_server):
    """uvicorn's keep-alive timeout stops at the first byte: a byte now and then held a
    connection for as long as the client liked."""
    with socket.create_connection(("127.0.0.1", impatient_server)) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        try:
            for _ in range(20):  # 6 s of one byte every 0.3 s, unless closed before
                time.sleep(0.3)
                sock.sendall(b"z")
        except OSError:
            pass
        status, head = read_status(sock)
        assert status == 408
        assert b"connection: close" in head.lower()
        assert time.monotonic() - started < 3
        assert sock.recv(65536) == b""  # closed


def test_a_connection_that_never_sends_a_byte_is_closed_without_an_answer(impatient_server):
    with socket.create_connection(("127.0.0.1", impatient_server)) as sock:
        sock.settimeout(5)
        started = time.monotonic()
        assert sock.recv(65536) == b""
        assert time.monotonic() - started < 3


def test_the_head_timeout_spares_slow_answers_and_idle_keep_alive(impatient_server, make_key):
    """A response longer than the timeout (an analysis of 1.5 s waited for), a pause
    between two requests, and a head sent in pieces within its time: all answered on one
    connection."""
    key = make_key("ingest")
    body = json.dumps({"user_input": "q", "response": "answer"}).encode()
    post = (
        b"POST /api/audits?wait=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + key.encode() + b"\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    with socket.create_connection(("127.0.0.1", impatient_server)) as sock:
        started = time.monotonic()
        sock.sendall(post)
        status, head = read_status(sock, timeout=15)
        assert status == 201 and time.monotonic() - started > 1.5
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        rest = head.split(b"\r\n\r\n", 1)[1]
        while len(rest) < length:
            rest += sock.recv(65536)
        time.sleep(0.8)  # idle between requests (the keep-alive timeout is 5 s)
        get = b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        for i in range(0, len(get), 10):
            sock.sendall(get[i : i + 10])
            time.sleep(0.1)
        assert read_status(sock)[0] == 200


def test_sigterm_stops_the_server_promptly_while_a_request_keeps_a_thread_busy(tmp_path, make_key):
    port = free_port()
    proc = start_server(
        port,
        tmp_path / "server.log",
        AUDITOR_EXTRA_ANALYZERS="tests.slow_analyzer.SlowAnalyzer",
        SLOW_ANALYZER_SECONDS="120",
    )
    try:
        key = make_key("ingest")
        with socket.create_connection(("127.0.0.1", port)) as sock:
            body = json.dumps({"user_input": "q", "response": "answer"}).encode()
            sock.sendall(
                b"POST /api/audits?wait=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer " + key.encode() + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            time.sleep(1.0)  # the analysis is running in a thread of the server
            assert proc.poll() is None
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
            assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- the middleware on its own (ASGI messages, no server) ---------------------------------


async def call(app, headers, messages, path="/api/audits"):
    sent, queue = [], messages  # consumed in place: the test sees what was read

    async def receive():
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "POST", "headers": headers}
    await app(scope, receive, send)
    return sent


async def reading_app(scope, receive, send):
    """Reads the whole body (like Django), then answers 200 with its size."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


async def test_the_middleware_never_calls_the_app_for_a_declared_length_over_the_limit():
    called = []

    async def app(scope, receive, send):
        called.append(scope)

    sent = await call(BodyLimitMiddleware(app, 10), [(b"content-length", b"11")], [])
    assert not called and sent[0]["status"] == 413


async def test_the_middleware_counts_chunks_and_stops_reading_past_the_limit():
    chunks = [{"type": "http.request", "body": b"x" * 6, "more_body": True} for _ in range(100)]
    sent = await call(BodyLimitMiddleware(reading_app, 10), [], chunks)
    assert sent[0]["status"] == 413
    assert len(chunks) == 98  # read two chunks (12 bytes), then refused

    sent = await call(
        BodyLimitMiddleware(reading_app, 12),
        [],
        [
            {"type": "http.request", "body": b"x" * 6, "more_body": True},
            {"type": "http.request", "body": b"x" * 6},
        ],
    )
    assert sent[0]["status"] == 200 and sent[1]["body"] == b"12"


async def test_otlp_exporters_get_their_own_larger_limit(settings):
    from auditor_site.asgi import body_limit

    settings.AUDITOR_MAX_BODY_BYTES = 10
    settings.AUDITOR_OTLP_MAX_BODY_BYTES = 20
    middleware = BodyLimitMiddleware(reading_app, body_limit)
    chunk = [{"type": "http.request", "body": b"x" * 15}]
    sent = await call(middleware, [], list(chunk), path="/v1/traces")
    assert sent[0]["status"] == 200 and sent[1]["body"] == b"15"
    sent = await call(middleware, [], list(chunk), path="/api/audits")
    assert sent[0]["status"] == 413
