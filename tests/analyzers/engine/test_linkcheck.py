"""The link checker against real servers on 127.0.0.1: SSRF guards, redirects, deadlines."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from analyzers.engine.linkcheck import LinkChecker, is_public_address


class Handler(BaseHTTPRequestHandler):
    hits: list[tuple[str, str, str]] = []

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _route(self, method: str) -> None:
        Handler.hits.append((method, self.path, self.headers.get("Host", "")))
        if self.path == "/ok":
            self._send(200)
        elif self.path == "/missing":
            self._send(404)
        elif self.path == "/no-head":
            self._send(405 if method == "HEAD" else 200, b"x" * 100_000)
        elif self.path.startswith("/redirect-to?"):
            self.send_response(302)
            self.send_header("Location", self.path.split("?", 1)[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path.startswith("/loop"):
            n = int(self.path[5:] or 0)
            self.send_response(301)
            self.send_header("Location", f"/loop{n + 1}")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._send(500)

    def _send(self, status: int, body: bytes = b"ok") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_GET(self) -> None:
        self._route("GET")


@pytest.fixture
def server() -> Iterator[str]:
    Handler.hits = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def tarpit() -> Iterator[str]:
    """Accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "2002:7f00:1::",
        "64:ff9b::a00:1",
        "ff02::1",
        "not-an-ip",
    ],
)
def test_non_global_addresses_are_refused(address):
    assert not is_public_address(address)


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_global_addresses_are_allowed(address):
    assert is_public_address(address)


async def test_it_blocks_loopback_by_default_without_connecting(server):
    health = await LinkChecker().check(f"{server}/ok")
    assert health.healthy is False and health.http_status is None
    assert health.error.startswith("blocked")
    assert Handler.hits == []


async def test_it_blocks_a_hostname_that_resolves_to_loopback(server):
    port = server.rsplit(":", 1)[1]
    health = await LinkChecker().check(f"http://localhost:{port}/ok")
    assert health.error.startswith("blocked") and Handler.hits == []


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://169.254.169.254/latest/meta-data",
        "ftp://example.com/",
        "http://user:pw@example.com/",
    ],
)
async def test_it_blocks_ip_tricks_and_other_schemes(url):
    health = await LinkChecker().check(url)
    assert health.healthy is False and health.error.startswith("blocked")


async def test_it_blocks_non_standard_ports_on_public_hosts():
    health = await LinkChecker().check("http://93.184.216.34:8080/")
    assert health.error == "blocked: port 8080 is not allowed"


async def test_private_networks_can_be_allowed(server):
    checker = LinkChecker(allow_private_networks=True)
    results = await checker.check_many(
        [f"{server}/ok", f"{server}/missing", f"{server}/no-head", f"{server}/ok"]
    )
    assert results[f"{server}/ok"].http_status == 200
    assert results[f"{server}/ok"].healthy is True
    assert results[f"{server}/missing"].healthy is False
    assert results[f"{server}/no-head"].http_status == 200
    assert [h for h in Handler.hits if h[1] == "/ok"] == [
        ("HEAD", "/ok", server.removeprefix("http://"))
    ]  # checked once, with the original Host
    assert ("GET", "/no-head", server.removeprefix("http://")) in Handler.hits


async def test_localhost_is_resolved_once_and_keeps_its_host_header(server):
    port = server.rsplit(":", 1)[1]
    health = await LinkChecker(allow_private_networks=True).check(f"http://localhost:{port}/ok")
    assert health.healthy is True
    assert Handler.hits[-1][2] == f"localhost:{port}"


async def test_every_redirect_hop_is_checked(server):
    """With loopback allowed only for the first server, a redirect elsewhere is refused."""
    checker = LinkChecker(allow_private_networks=True)
    ok = await checker.check(f"{server}/redirect-to?/ok")
    assert ok.healthy is True and ok.final_url.endswith("/ok")
    strict = LinkChecker()
    blocked = await strict.check(f"{server}/redirect-to?http://169.254.169.254/")
    assert blocked.error.startswith("blocked")


async def test_a_redirect_to_a_blocked_address_is_refused(server, monkeypatch):
    """The first hop passes the policy, the redirect target does not."""
    checker = LinkChecker()
    port = int(server.rsplit(":", 1)[1])
    real = checker.resolve

    async def resolve(host, p):
        if host == "public.test":
            return ["93.184.216.34"] if p != port else ["127.0.0.1"]
        return await real(host, p)

    # Treat the first hop's address as public, keep the real policy for every other hop.
    import analyzers.engine.linkcheck as linkcheck

    first_hop = {"done": False}
    original_policy = linkcheck.is_public_address

    def policy(address):
        if address == "127.0.0.1" and not first_hop["done"]:
            first_hop["done"] = True
            return True
        return original_policy(address)

    monkeypatch.setattr(linkcheck, "is_public_address", policy)
    monkeypatch.setattr(checker, "resolve", resolve)
    monkeypatch.setattr(linkcheck, "ALLOWED_PORTS", frozenset({80, 443, port}))
    health = await checker.check(
        f"http://public.test:{port}/redirect-to?http://localhost:{port}/ok"
    )
    assert health.error.startswith("blocked") and "not globally routable" in health.error
    assert [h[1] for h in Handler.hits] == [f"/redirect-to?http://localhost:{port}/ok"]


async def test_too_many_redirects_are_unhealthy(server):
    health = await LinkChecker(allow_private_networks=True).check(f"{server}/loop0")
    assert health.healthy is False and health.error == "too many redirects"
    assert len(Handler.hits) == 4  # the link and three redirects


async def test_a_tarpit_hits_the_deadline_and_the_rest_completes(server, tarpit):
    checker = LinkChecker(allow_private_networks=True)
    started = time.monotonic()
    results = await checker.check_many(
        [f"{tarpit}/slow", f"{server}/ok"], timeout_s=0.5, deadline_s=3
    )
    assert time.monotonic() - started < 2.5
    assert results[f"{tarpit}/slow"].healthy is False
    assert "timed out" in results[f"{tarpit}/slow"].error
    assert results[f"{server}/ok"].healthy is True


async def test_the_audit_deadline_bounds_all_checks(tarpit):
    checker = LinkChecker(allow_private_networks=True)
    started = time.monotonic()
    results = await checker.check_many([f"{tarpit}/a", f"{tarpit}/b"], timeout_s=10, deadline_s=0.5)
    assert time.monotonic() - started < 2
    assert all(r.error == "audit deadline exceeded" for r in results.values())


async def test_results_are_cached_across_audits(server):
    checker = LinkChecker(allow_private_networks=True, cache_ttl_s=60)
    await checker.check(f"{server}/ok")
    await checker.check(f"{server}/ok")
    assert len(Handler.hits) == 1
    expired = LinkChecker(allow_private_networks=True, cache_ttl_s=0)
    await expired.check(f"{server}/ok")
    await expired.check(f"{server}/ok")
    assert len(Handler.hits) == 3


@pytest.mark.parametrize("host", ["cafe.be", "dead.beef", "face.bad", "add.ec"])
async def test_hex_looking_domain_names_are_resolved_not_read_as_numbers(host):
    from analyzers.engine.linkcheck import _LEGACY_IPV4

    assert _LEGACY_IPV4.fullmatch(host) is None


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "0177.0.0.1", "127.1", "0x7f000001"])
async def test_numeric_hosts_are_read_as_ipv4(host):
    checker = LinkChecker()
    assert await checker.resolve(host, 80) == ["127.0.0.1"]


async def test_an_internationalised_domain_is_checked_with_its_ascii_host(server, monkeypatch):
    checker = LinkChecker(allow_private_networks=True)

    async def resolve(host, port):  # DNS is the outside world: the name is ours
        return ["127.0.0.1"]

    monkeypatch.setattr(checker, "resolve", resolve)
    port = server.rsplit(":", 1)[1]
    health = await checker.check(f"http://пример.рф:{port}/ok")
    assert health.healthy is True, health.error
    assert Handler.hits[-1][2] == f"xn--e1afmkfd.xn--p1ai:{port}"
