"""`GET /api/audits/{id}` answered in front of Django, in its common case (pollers).

Like `POST /api/audits` (audits/api/submit_asgi.py, whose reasons and rules this follows),
a plain ASGI app, routed in auditor_site/asgi.py, takes the request only when it needs
nothing of Django's machinery:

- `GET /api/audits/<uuid>`, with no query string or only `wait=`, no body, with
  `AUDITOR_API_FAST_GET` on;
- nothing Django's middleware would refuse or redirect (an allowed Host, no SSL redirect
  due, no `DISALLOWED_USER_AGENTS`, no script prefix);
- a Bearer token verified in this process less than AUTH_CACHE_SECONDS ago, of a key with
  the `read` scope (`ApiKeyAuth.cached`);
- a `wait` the view would take (`polling.wait_seconds`).

Every other request goes to Django before anything is counted. From the rate limit on it
runs the view's own code (`count_request`, `polling.respond`); errors are answered by the
ninja API's exception handlers (404, 429, 503), and every answer passes the
`process_response` of Django's header middleware, as in submit_asgi.
"""

from __future__ import annotations

import io
import logging
import re
import uuid
from typing import Any
from urllib.parse import parse_qsl

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIHandler, ASGIRequest
from django.core.handlers.exception import response_for_exception
from django.http import HttpResponse
from django.utils.log import log_response
from ninja import NinjaAPI

from analyzers.auth import count_request, read_auth_async
from audits.api import polling
from audits.api.asgi_body import Receive, Send
from audits.api.submit_asgi import SubmitEndpoint

logger = logging.getLogger(__name__)

PATH = re.compile(r"/api/audits/([0-9a-fA-F-]{32,36})")
BODY_HEADERS = (b"content-length", b"transfer-encoding")

Scope = dict[str, Any]


def is_poll(scope: Scope) -> bool:
    """Whether `scope` is for this endpoint (the router's test: cheap, no parsing)."""
    return scope["method"] == "GET" and PATH.fullmatch(scope["path"]) is not None


class PollEndpoint:
    """The ASGI app for `GET /api/audits/<uuid>`: `django` answers what this does not."""

    def __init__(self, api: NinjaAPI, django: ASGIHandler) -> None:
        self.api, self.django = api, django
        # The same header middleware as POST /api/audits in front of Django.
        self.response_hooks = SubmitEndpoint(api, django).response_hooks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        plain = _plain_request(scope)
        key = read_auth_async.cached(plain[0]) if plain is not None else None
        if plain is None or key is None:
            await self.django(scope, receive, send)
            return
        request, run_id, wait = plain
        request.auth = key
        response = await self._respond(request, run_id, wait)
        for process_response in self.response_hooks:
            response = process_response(request, response)
        if response.status_code >= 400:
            log_response(
                "%s: %s", response.reason_phrase, request.path, response=response, request=request
            )
        logger.debug("GET %s answered in front of Django: %d", request.path, response.status_code)
        await self.django.send_response(response, send)

    async def _respond(self, request: ASGIRequest, run_id: uuid.UUID, wait: float) -> HttpResponse:
        try:
            await count_request(request.auth)
            return await polling.respond(request, run_id, wait)
        except Exception as exc:
            try:
                return self.api.on_exception(request, exc)
            except Exception as unhandled:  # as Django answers an error in a view
                return response_for_exception(request, unhandled)


def _plain_request(scope: Scope) -> tuple[ASGIRequest, uuid.UUID, float] | None:
    """The request as Django would see it, its audit id and wait, when this may answer it."""
    match = PATH.fullmatch(scope["path"])
    if (
        match is None
        or scope["method"] != "GET"
        or scope.get("root_path")
        or settings.FORCE_SCRIPT_NAME
        or settings.DISALLOWED_USER_AGENTS
        or not settings.AUDITOR_API_FAST_GET
        or any(name in BODY_HEADERS for name, _ in scope.get("headers", ()))
    ):
        return None
    try:
        run_id = uuid.UUID(match.group(1))
        query = parse_qsl(
            scope.get("query_string", b"").decode("ascii"),
            keep_blank_values=True,
            strict_parsing=False,
        )
        if any(name != "wait" for name, _ in query) or len(query) > 1:
            return None
        wait = polling.wait_seconds(query[0][1] if query else None)
        request = ASGIRequest(scope, io.BytesIO())
        request.get_host()  # DisallowedHost outside ALLOWED_HOSTS
    except (DisallowedHost, UnicodeDecodeError, ValueError):
        return None
    if settings.SECURE_SSL_REDIRECT and not request.is_secure():
        return None
    return request, run_id, wait
