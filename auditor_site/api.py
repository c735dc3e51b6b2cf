"""The ninja API object: routers of the apps, mounted at /api/ (docs at /api/docs)."""

from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, IntegrityError
from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from analyzers.api.router import router as config_router
from analyzers.auth import PayloadTooLarge, RateLimited
from audits.api.candidates import router as candidates_router
from audits.api.router import router as audits_router

logger = logging.getLogger(__name__)

api = NinjaAPI(
    title="Response Auditor API",
    version="1.0.0",
    description=(
        "[← Back to the dashboard](/)\n\n"
        "Submit model responses for audit, read and export audits, edit the configuration. "
        "Authenticate with `Authorization: Bearer <api key>`.\n\n"
        "Served beside these routes, with the same keys (see docs/reference/contract.md):\n\n"
        "- `POST /v1/chat/completions`, `GET /v1/models`: the OpenAI-compatible proxy; "
        "clients receive only audited text.\n"
        "- `POST /v1/traces`: OpenTelemetry traces (OTLP/HTTP, protobuf or JSON); each "
        "model call with its messages becomes an audit.\n"
        "- `POST /api/audits/stream` (NDJSON in, server-sent events out) and the WebSocket "
        "`/ws/ingest/`: a response streamed in, audited paragraph by paragraph.\n"
        "- `GET /healthz`, `GET /readyz`, `GET /metrics`: health and Prometheus metrics."
    ),
    urls_namespace="api",
)
api.add_router("/", audits_router)
api.add_router("/", config_router)
api.add_router("/", candidates_router)


@api.exception_handler(PayloadTooLarge)
def payload_too_large(request: HttpRequest, exc: PayloadTooLarge):
    return api.create_response(
        request,
        {"detail": f"request body too large: the limit is {exc.limit} bytes"},
        status=413,
    )


@api.exception_handler(RequestDataTooBig)
def request_data_too_big(request: HttpRequest, exc: RequestDataTooBig):
    return api.create_response(request, {"detail": "request body too large"}, status=413)


@api.exception_handler(RateLimited)
def rate_limited(request: HttpRequest, exc: RateLimited):
    response = api.create_response(
        request, {"detail": f"rate limit exceeded; retry in {exc.retry_after} s"}, status=429
    )
    response["Retry-After"] = str(exc.retry_after)
    return response


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError):
    if isinstance(exc, AuthenticationError):
        return unauthenticated(request, exc)
    return api.create_response(request, {"detail": exc.message}, status=exc.status_code)


def _tidy_loc(error: dict) -> dict:
    """ninja names a body parameter after the body source: `["body", "body", "user_input"]`
    for `body: AuditIn`. Say `body` once (`["body", "user_input"]`), as query errors do."""
    loc = error.get("loc")
    if isinstance(loc, (list, tuple)) and len(loc) >= 2 and loc[0] == "body" == loc[1]:
        return {**error, "loc": ["body", *loc[2:]]}
    return error


@api.exception_handler(ValidationError)
def validation_error(request: HttpRequest, exc: ValidationError):
    return api.create_response(request, {"detail": [_tidy_loc(e) for e in exc.errors]}, status=422)


@api.exception_handler(AuthenticationError)
def unauthenticated(request: HttpRequest, exc: AuthenticationError):
    response = api.create_response(
        request,
        {"detail": "a valid API key is required (Authorization: Bearer <key>)"},
        status=401,
    )
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(DatabaseError)
def database_unavailable(request: HttpRequest, exc: DatabaseError):
    if isinstance(exc, IntegrityError):
        logger.exception("integrity error in the API")
        return api.create_response(request, {"detail": "conflict"}, status=409)
    logger.exception("database error in the API")
    response = api.create_response(
        request, {"detail": "the database is unavailable; try again later"}, status=503
    )
    response["Retry-After"] = "5"
    return response


__all__ = ["api", "HttpError", "ValidationError"]
