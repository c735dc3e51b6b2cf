"""The live pages' WebSocket same-origin check: scheme, host AND port.

channels' `AllowedHostsOriginValidator` only checks that the Origin's host is in
ALLOWED_HOSTS, so a page on another port of the same host (another app on
`127.0.0.1:9999`) could open the staff feed with the staff session cookie, which browsers
send regardless of port. Here the handshake is accepted only when

- the Host header is an allowed host (ALLOWED_HOSTS, as Django checks it), and
- the Origin is exactly this site: the same scheme (https behind a TLS proxy when
  SECURE_PROXY_SSL_HEADER says so, as `request.is_secure()`), host and port (default ports
  written or not), or one of CSRF_TRUSTED_ORIGINS.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]


def parse_origin(value: str) -> Origin | None:
    """(scheme, host, port) of an http(s) origin, the port made explicit; None if invalid."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _is_secure(scope) -> bool:
    if scope.get("scheme") in ("wss", "https"):
        return True
    proxy = settings.SECURE_PROXY_SSL_HEADER
    if proxy:
        header, secure_value = proxy
        name = header.removeprefix("HTTP_").replace("_", "-").lower().encode()
        value = _header(scope, name)
        return value is not None and value.split(",", 1)[0].strip() == secure_value
    return False


def site_origin(scope) -> Origin | None:
    """This site's origin as the handshake addressed it; None when the host is not allowed."""
    host = _header(scope, b"host")
    if not host:
        return None
    domain, port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    if not domain or not validate_host(domain, allowed):
        return None
    scheme = "https" if _is_secure(scope) else "http"
    try:
        number = int(port) if port else DEFAULT_PORTS[scheme]
    except ValueError:
        return None
    return scheme, domain.strip("[]"), number


def is_same_origin(scope) -> bool:
    origin_header = _header(scope, b"origin")
    if not origin_header:
        return False
    origin = parse_origin(origin_header)
    site = site_origin(scope)
    if origin is None or site is None:
        return False
    if origin == site:
        return True
    trusted = {parse_origin(o) for o in settings.CSRF_TRUSTED_ORIGINS}
    return origin in trusted


class SameOriginValidator:
    """ASGI middleware: refuse a WebSocket handshake that is not same-origin (see above)."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not is_same_origin(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
