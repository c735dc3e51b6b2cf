"""`POST /api/audits` answered in front of Django, in its common case.

Under a stream of single submissions over half of the server process's CPU per request
went to Django's handler, its middleware and ninja's operation around the view (figures:
docs/contributing/performance.md). This plain ASGI app (routed in auditor_site/asgi.py) takes
the request itself only when it needs nothing of that machinery:

- `POST /api/audits`, without a query string (`?wait=` and anything unexpected go to
  Django), with `AUDITOR_API_FAST_SUBMIT` on;
- nothing Django's middleware would refuse or redirect: the Host is allowed
  (`ALLOWED_HOSTS`, Django's own check), the request is secure or `SECURE_SSL_REDIRECT`
  off, no `DISALLOWED_USER_AGENTS`, no script prefix;
- its Bearer token was verified in this process less than AUTH_CACHE_SECONDS ago and its
  key has the `ingest` scope (`ApiKeyAuth.cached`: what ninja's async auth checks first);
- its body parses (`json.loads`, as ninja) and validates as `AuditIn`.

Every other request goes to Django, with the body replayed, before anything is counted or
stored, so each refusal (401, 403, 413, 422 ...) keeps its one implementation. From the
rate limit on, it runs the view's own code (`count_request`, `router.submit_grouped`), and
its answers are made by the ninja API (`create_response`, its exception handlers for 409,
422, 429 and 503; Django's `response_for_exception` for anything else) and pass through
the `process_response` of Django's header middleware (`RESPONSE_MIDDLEWARE`: security
headers, CSP, X-Frame-Options, Content-Length): the same answers as through Django
(tests/audits/api/test_submit_asgi.py compares them).
"""

from __future__ import annotations

import io
import json
import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIHandler, ASGIRequest
from django.core.handlers.exception import response_for_exception
from django.http import HttpResponse
from django.utils.log import log_response
from django.utils.module_loading import import_string
from ninja import NinjaAPI, Status
from pydantic import BaseModel

from analyzers.auth import count_request, ingest_auth_async
from audits.api import router
from audits.api.asgi_body import Disconnected, Receive, Send, read_body
from audits.intake.schemas import AuditAccepted, AuditIn, AuditOut

logger = logging.getLogger(__name__)

PATH = "/api/audits"
# Django's middleware that only add headers to a response: applied to these answers, in
# the order of settings.MIDDLEWARE (the others act on requests, sessions or pages).
RESPONSE_MIDDLEWARE = (
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
)
ANSWERS: dict[int, type[BaseModel]] = {
    200: AuditOut,
    202: AuditAccepted,
}  # the view's success schemas

Scope = dict[str, Any]


class SubmitEndpoint:
    """The ASGI app for `PATH`: `django` (Django's ASGI handler) answers what this does not."""

    def __init__(self, api: NinjaAPI, django: ASGIHandler) -> None:
        self.api, self.django = api, django
        wanted = set(RESPONSE_MIDDLEWARE)
        self.response_hooks = [
            import_string(path)(_never_called).process_response
            for path in reversed(settings.MIDDLEWARE)
            if path in wanted
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = _plain_request(scope)
        key = ingest_auth_async.cached(request) if request is not None else None
        if request is None or key is None:
            await self.django(scope, receive, send)
            return
        try:  # its size bounded before (auditor_site.edge.body_limit): no 413 here
            raw = await read_body(receive, settings.AUDITOR_MAX_BODY_BYTES)
        except Disconnected:  # the client left: nothing stored, nobody to answer
            return
        body = _valid_body(raw)
        if body is None:
            await self.django(scope, _replaying(raw, receive), send)
            return
        request.auth = key
        response = await self._submit(request, body)
        for process_response in self.response_hooks:
            response = process_response(request, response)
        if response.status_code >= 400:
            log_response(
                "%s: %s", response.reason_phrase, request.path, response=response, request=request
            )
        logger.debug("POST %s answered in front of Django: %d", PATH, response.status_code)
        await self.django.send_response(response, send)

    async def _submit(self, request: ASGIRequest, body: AuditIn) -> HttpResponse:
        try:
            await count_request(request.auth)
            result: Status = await router.submit_grouped(request, body, False)
            data = ANSWERS[result.status_code].model_validate(result.value).model_dump()
            return self.api.create_response(request, data, status=result.status_code)
        except Exception as exc:
            try:
                return self.api.on_exception(request, exc)
            except Exception as unhandled:  # as Django answers an error in a view
                return response_for_exception(request, unhandled)


def _plain_request(scope: Scope) -> ASGIRequest | None:
    """The request as Django would see it, when it is one this endpoint may answer."""
    if (
        scope["method"] != "POST"
        or scope.get("query_string")
        or scope.get("root_path")
        or settings.FORCE_SCRIPT_NAME
        or settings.DISALLOWED_USER_AGENTS
        or not settings.AUDITOR_API_FAST_SUBMIT
    ):
        return None
    try:
        request = ASGIRequest(scope, io.BytesIO())
        request.get_host()  # DisallowedHost outside ALLOWED_HOSTS
    except (DisallowedHost, UnicodeDecodeError, ValueError):
        return None
    if settings.SECURE_SSL_REDIRECT and not request.is_secure():
        return None
    return request


def _valid_body(raw: bytes) -> AuditIn | None:
    """The body as the view would get it; None when ninja would refuse it (Django says how)."""
    try:
        return AuditIn.model_validate(json.loads(raw))
    except Exception:  # bad JSON, a failed check, nesting too deep
        return None


def _replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` for Django: the body already read, then the connection's own messages."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _never_called(request):  # pragma: no cover - the middleware's view, never reached
    raise AssertionError("response middleware only")
