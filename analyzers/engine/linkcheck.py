"""An SSRF-guarded link health checker on httpx.

URLs come from untrusted model output, so every hop is checked before any connection:

- only http/https, only ports 80/443 (any port with `allow_private_networks`);
- the host is resolved once and every address must be globally routable (no loopback,
  private, link-local incl. 169.254.169.254, CGNAT, multicast, reserved, unspecified, nor
  IPv4-mapped / 6to4 / Teredo / NAT64 forms of those; decimal and hex IPs resolve to
  addresses and are judged as such);
- the request goes to the checked address (no second lookup, so no DNS rebinding) with the
  original Host header and TLS server name;
- redirects are followed by hand, at most 3, each hop checked the same way;
- `trust_env=False`: no proxies or netrc from the environment;
- per-link and per-audit deadlines, a global and a per-host concurrency limit, the same URL
  checked once per audit and cached across audits for `cache_ttl_s`.

HEAD first; GET with a small byte cap when HEAD is refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin

import httpx

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
HEAD_REFUSED = frozenset({400, 403, 405, 501})
ALLOWED_PORTS = frozenset({80, 443})
USER_AGENT = "response-auditor-linkcheck/1.0"

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Hosts that inet_aton reads as IPv4: 1 to 4 dot-separated decimal, octal or 0x-hex numbers.
_LEGACY_IPV4 = re.compile(r"(?:0[xX][0-9a-fA-F]*|[0-9]+)(?:\.(?:0[xX][0-9a-fA-F]*|[0-9]+)){0,3}\.?")


class BlockedURL(Exception):
    """The URL or one of its addresses may not be fetched."""


@dataclass(frozen=True, slots=True)
class LinkHealth:
    url: str
    http_status: int | None
    healthy: bool
    error: str | None = None
    final_url: str | None = None


def _embedded_v4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr.teredo is not None:
        return addr.teredo[1]
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def is_public_address(address: str) -> bool:
    """True only for globally routable unicast addresses (and no disguised private ones)."""
    try:
        addr = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address):
        inner = _embedded_v4(addr)
        if inner is not None and not is_public_address(str(inner)):
            return False
    return not (
        not addr.is_global
        or addr.is_multicast
        or addr.is_private
        or addr.is_loopback
        or addr.is_link_local
        or addr.is_reserved
        or addr.is_unspecified
    )


def static_url_problem(url: str, *, allow_private: bool = False) -> str | None:
    """What the guard would refuse in `url` before any DNS lookup; None when it may pass.

    For configuration forms: a literal private address, `localhost`, another port, another
    scheme or userinfo is refused at once; names are only resolved at request time.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        return f"invalid URL ({exc})"
    if parsed.scheme not in ("http", "https"):
        return f"scheme {parsed.scheme!r} is not allowed (http or https)"
    if not parsed.host:
        return "the URL has no host"
    if parsed.userinfo:
        return "credentials in the URL are not allowed"
    if allow_private:
        return None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    if port not in ALLOWED_PORTS:
        return f"port {port} is not allowed (80 or 443)"
    host = parsed.host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return f"{host} is not a public address"
    literal: str | None = None
    try:
        literal = str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        if _LEGACY_IPV4.fullmatch(host):
            try:
                literal = socket.inet_ntoa(socket.inet_aton(host))
            except OSError:
                return f"invalid numeric host {host}"
    if literal is not None and not is_public_address(literal):
        return f"{host} is not a public address"
    return None


class LinkChecker:
    """Check link health safely. One instance may serve many audits (it holds the cache)."""

    def __init__(
        self,
        *,
        allow_private_networks: bool = False,
        timeout_s: float = 4.0,
        audit_deadline_s: float = 8.0,
        max_concurrency: int = 16,
        per_host_concurrency: int = 4,
        max_redirects: int = 3,
        get_byte_cap: int = 8192,
        cache_ttl_s: float = 300.0,
        verify: bool = True,
    ) -> None:
        self.allow_private_networks = allow_private_networks
        self.timeout_s = timeout_s
        self.audit_deadline_s = audit_deadline_s
        self.max_concurrency = max_concurrency
        self.per_host_concurrency = per_host_concurrency
        self.max_redirects = max_redirects
        self.get_byte_cap = get_byte_cap
        self.cache_ttl_s = cache_ttl_s
        self.verify = verify
        self._cache: dict[str, tuple[float, LinkHealth]] = {}
        self._loops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # concurrency state lives per event loop: asyncio primitives are bound to one loop

    def _limits(self) -> tuple[asyncio.Semaphore, dict[str, asyncio.Semaphore]]:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = (asyncio.Semaphore(self.max_concurrency), {})
            self._loops[loop] = state
        return state

    def _host_limit(self, host: str) -> asyncio.Semaphore:
        _, hosts = self._limits()
        sem = hosts.get(host)
        if sem is None:
            sem = hosts[host] = asyncio.Semaphore(self.per_host_concurrency)
        return sem

    def cached(self, url: str) -> LinkHealth | None:
        entry = self._cache.get(url)
        if entry is None:
            return None
        if entry[0] < time.monotonic():
            del self._cache[url]
            return None
        return entry[1]

    async def check_many(
        self,
        urls: Iterable[str],
        *,
        timeout_s: float | None = None,
        deadline_s: float | None = None,
    ) -> dict[str, LinkHealth]:
        """Check each distinct URL once; links unfinished at the deadline are unhealthy."""
        unique = list(dict.fromkeys(urls))
        results: dict[str, LinkHealth] = {}
        todo = []
        for url in unique:
            hit = self.cached(url)
            if hit is not None:
                results[url] = hit
            else:
                todo.append(url)
        if not todo:
            return results
        per_link = timeout_s or self.timeout_s
        deadline = deadline_s or self.audit_deadline_s
        async with httpx.AsyncClient(
            trust_env=False,
            follow_redirects=False,
            verify=self.verify,
            timeout=httpx.Timeout(per_link),
            headers={"User-Agent": USER_AGENT},
        ) as client:
            tasks = {
                url: asyncio.ensure_future(self._check_limited(client, url, per_link))
                for url in todo
            }
            done, pending = await asyncio.wait(tasks.values(), timeout=deadline)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        for url, task in tasks.items():
            if task in done and not task.cancelled() and task.exception() is None:
                health = task.result()
                self._cache[url] = (time.monotonic() + self.cache_ttl_s, health)
            elif task in done and not task.cancelled():
                exc = task.exception()
                health = LinkHealth(url, None, False, f"{type(exc).__name__}: {exc}"[:300])
            else:
                health = LinkHealth(url, None, False, "audit deadline exceeded")
            results[url] = health
        return results

    async def check(self, url: str, *, timeout_s: float | None = None) -> LinkHealth:
        return (await self.check_many([url], timeout_s=timeout_s))[url]

    async def _check_limited(
        self, client: httpx.AsyncClient, url: str, timeout_s: float
    ) -> LinkHealth:
        global_limit, _ = self._limits()
        try:
            async with global_limit, asyncio.timeout(timeout_s):
                return await self._follow(client, url)
        except TimeoutError:
            return LinkHealth(url, None, False, f"timed out after {timeout_s:g} s")
        except BlockedURL as exc:
            return LinkHealth(url, None, False, f"blocked: {exc}")
        except httpx.InvalidURL as exc:
            return LinkHealth(url, None, False, f"blocked: invalid URL ({exc})")
        except (httpx.HTTPError, OSError, ValueError) as exc:
            return LinkHealth(url, None, False, f"{type(exc).__name__}: {exc}"[:300])

    async def _follow(self, client: httpx.AsyncClient, url: str) -> LinkHealth:
        current = url
        for hop in range(self.max_redirects + 1):
            status, location = await self._request(client, current)
            if status in REDIRECT_CODES and location:
                if hop == self.max_redirects:
                    return LinkHealth(url, status, False, "too many redirects", current)
                current = urljoin(current, location)
                continue
            return LinkHealth(url, status, 200 <= status < 400, None, current)
        raise AssertionError("unreachable")

    async def resolve(self, host: str, port: int) -> list[str]:
        """Every address of the host; the check and the connection use these, once."""
        try:
            ip = ipaddress.ip_address(host.strip("[]"))
            return [str(ip)]
        except ValueError:
            pass
        if _LEGACY_IPV4.fullmatch(host):
            # "2130706433", "0x7f.1", "0177.0.0.1": what browsers and inet_aton read as IPv4
            try:
                return [socket.inet_ntoa(socket.inet_aton(host))]
            except OSError as exc:
                raise BlockedURL(f"invalid numeric host {host}") from exc
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise BlockedURL(f"cannot resolve {host}: {exc}") from exc
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    async def pin(self, url: str) -> tuple[httpx.URL, str, str]:
        """The guard alone, for other outbound requests (alert webhooks): raises BlockedURL."""
        return await self._pin(url)

    async def _pin(self, url: str) -> tuple[httpx.URL, str, str]:
        """Validate one hop; return (URL with the checked IP, Host header, TLS server name)."""
        parsed = httpx.URL(url)
        if parsed.scheme not in ("http", "https"):
            raise BlockedURL(f"scheme {parsed.scheme!r} is not allowed")
        host = parsed.host
        if not host:
            raise BlockedURL("no host")
        if parsed.userinfo:
            raise BlockedURL("userinfo in URL")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        if port not in ALLOWED_PORTS and not self.allow_private_networks:
            raise BlockedURL(f"port {port} is not allowed")
        addresses = await self.resolve(host, port)
        if not addresses:
            raise BlockedURL(f"{host} has no address")
        if not self.allow_private_networks:
            for address in addresses:
                if not is_public_address(address):
                    raise BlockedURL(f"{host} resolves to {address}, not globally routable")
        pinned = parsed.copy_with(host=addresses[0])
        # An internationalised name goes out in its ASCII (IDNA) form: header and SNI.
        name = parsed.raw_host.decode("ascii")
        host_header = name if parsed.port is None else f"{name}:{parsed.port}"
        if ":" in name and not name.startswith("["):
            host_header = f"[{name}]" if parsed.port is None else f"[{name}]:{parsed.port}"
        return pinned, host_header, name

    async def _request(self, client: httpx.AsyncClient, url: str) -> tuple[int, str | None]:
        pinned, host_header, server_name = await self._pin(url)
        headers = {"Host": host_header}
        extensions = {"sni_hostname": server_name} if pinned.scheme == "https" else {}
        async with self._host_limit(server_name):
            response = await client.request("HEAD", pinned, headers=headers, extensions=extensions)
            await response.aclose()
            if response.status_code in HEAD_REFUSED:
                request = client.build_request(
                    "GET",
                    pinned,
                    headers={**headers, "Range": f"bytes=0-{self.get_byte_cap - 1}"},
                    extensions=extensions,
                )
                response = await client.send(request, stream=True)
                try:
                    read = 0
                    async for chunk in response.aiter_raw():
                        read += len(chunk)
                        if read >= self.get_byte_cap:
                            break
                finally:
                    await response.aclose()
        return response.status_code, response.headers.get("location")
