"""API keys checked from a request's head, before its body is read.

An endpoint that needs an API key refused a bad one only once it had the body: Django reads
a whole body before its views run, so a client sending `Content-Length: 100000`, no key,
then a byte now and then, held a connection (and its memory) for as long as it liked.

`KeyGate` sits in front of every HTTP app (auditor_site/asgi.py). For a request with a
body to `/api/` or `/v1/`, it finds what the endpoint accepts (the ninja operation's auth,
or `FRONT_SCOPES` for the plain ASGI apps and OTLP) and looks at the head alone: a bearer
key (a recently verified one from the cache, else `ApiKey.authenticate`), the session
cookie. When none of them can pass (no key, an unknown one, a key without the scope, no
session where one would do), the endpoint itself answers from an empty body, so the
401/403 is its own, with `Connection: close`: the body is never waited for. Anything else
passes on untouched, with nothing counted or remembered.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.http.cookie import parse_cookie
from django.urls import Resolver404, resolve
from ninja.operation import PathView
from ninja.security import SessionAuth

from analyzers.auth import ApiKeyAuth, cached_key
from analyzers.models import ApiKey
from audits.api.asgi_body import Receive, Send
from audits.intake.stream import bearer_token

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Receive, Send], Any]

GATED_PREFIXES = ("/api/", "/v1/")
SESSION = "session"  # a check passed by a session cookie (the staff's dashboard)
OTHER = "other"  # a check this gate cannot judge from the head: the endpoint decides
EMPTY_BODY = {"type": "http.request", "body": b"", "more_body": False}
CLOSE = (b"connection", b"close")


def has_body(scope: Scope) -> bool:
    """A request announcing a body: a Content-Length over 0, or a Transfer-Encoding."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.strip() not in (b"0", b""):
            return True
        if name == b"transfer-encoding":
            return True
    return False


def has_session_cookie(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"cookie" and settings.SESSION_COOKIE_NAME in parse_cookie(
            value.decode("latin-1")
        ):
            return True
    return False


def _path_view(func: Callable) -> PathView | None:
    """The ninja PathView behind a resolved view (ninja's view is a closure over it)."""
    code = getattr(func, "__code__", None)
    if code is None or "self" not in code.co_freevars:
        return None
    view = func.__closure__[code.co_freevars.index("self")].cell_contents
    return view if isinstance(view, PathView) else None


def _check(callback: Any) -> str:
    if isinstance(callback, ApiKeyAuth):
        return callback.scope
    return SESSION if isinstance(callback, SessionAuth) else OTHER


@functools.lru_cache(maxsize=1024)
def ninja_checks(path: str, method: str) -> tuple[str, ...]:
    """What the ninja operation for `path` and `method` accepts, in its order (an API key
    scope, SESSION or OTHER); () when nothing is needed or nothing is known here."""
    try:
        view = _path_view(resolve(path).func)
    except Resolver404:
        return ()
    if view is None:
        return ()
    for operation in view.operations:
        if method in operation.methods:
            return tuple(_check(callback) for callback in operation.auth_callbacks)
    return ()


async def key_for(scope: Scope) -> Any:
    """The API key of the request's bearer token, or None: a recently verified one, else
    looked up (and not remembered: the endpoint verifies it as it always did)."""
    token = bearer_token(scope["headers"])
    if not token:
        return None
    return cached_key(token) or await database_sync_to_async(ApiKey.authenticate)(token)


async def refused(scope: Scope, checks: tuple[str, ...]) -> bool:
    """True when no check can pass, as ninja goes through them: a key without the scope
    stops at once (403), a missing or unknown one tries the next."""
    key = None
    if any(check not in (SESSION, OTHER) for check in checks):
        key = await key_for(scope)
    for check in checks:
        if check == OTHER or (check == SESSION and has_session_cookie(scope)):
            return False
        if check != SESSION and key is not None:
            return not key.allows(check)
    return True


class KeyGate:
    """Requests with a body to a key-protected endpoint, refused from their head when no
    key (or session) they carry can pass. `front_scopes`: the scope each path answered in
    front of ninja needs (its own check stays the one that answers)."""

    def __init__(self, app: ASGIApp, front_scopes: dict[str, str]) -> None:
        self.app = app
        self.front_scopes = front_scopes

    def checks(self, scope: Scope) -> tuple[str, ...]:
        path = scope["path"]
        front = self.front_scopes.get(path) or self.front_scopes.get(path.rstrip("/"))
        return (front,) if front else ninja_checks(path, scope["method"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not scope["path"].startswith(GATED_PREFIXES)
            or not has_body(scope)
        ):
            await self.app(scope, receive, send)
            return
        checks = self.checks(scope)
        if not checks or not await refused(scope, checks):
            await self.app(scope, receive, send)
            return
        await self.answer_from_head(scope, receive, send)

    async def answer_from_head(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The endpoint's answer to the head with an empty body, closing the connection."""
        answered = asyncio.Event()
        body_given = False

        async def head_only() -> dict[str, Any]:
            nonlocal body_given
            if not body_given:
                body_given = True
                return EMPTY_BODY
            await answered.wait()  # then the server says the client is gone
            return await receive()

        async def closing(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (name, value)
                    for name, value in message.get("headers", ())
                    if name.lower() != b"connection"
                ]
                message = {**message, "headers": [*headers, CLOSE]}
            elif not message.get("more_body", False):
                answered.set()
            await send(message)

        await self.app(scope, head_only, closing)
