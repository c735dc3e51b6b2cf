"""`POST /v1/traces`: OTLP/HTTP trace export in, one audit per LLM span.

The OTLP/HTTP answers: 200 with an `ExportTraceServiceResponse` in the request's encoding
(`partial_success` counts the rejected spans and says why); 400 for a body that is not an
export request; 401/403 for a missing, wrong or under-scoped key; 413 over the body,
decompressed-size or span-count limits (OTLP/JSON has its own, lower, size limit); 415 for
another Content-Type or Content-Encoding; 429 with `Retry-After` over the key's rate limit;
503 (retryable) when the database is unavailable. A span that cannot be read or stored is
rejected alone (`partial_success`), the rest of the export stored.
Error bodies are `google.rpc.Status`. Spans that are not LLM calls are accepted and ignored.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from analyzers.auth import RateLimited, authenticate_token, hit_rate_limit
from audits.api.otlp import decode
from audits.api.otlp.decode import JSON, PROTOBUF, OtlpError
from audits.api.otlp.ingest import ingest
from audits.store.db_threads import run_in_db_thread

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 8_000_000
DEFAULT_MAX_DECOMPRESSED_BYTES = 32_000_000
DEFAULT_MAX_SPANS = 2_000
# OTLP/JSON costs several times protobuf's CPU per byte to parse (json_format is Python):
# its own, lower bound, on the body as sent and once decompressed.
DEFAULT_JSON_MAX_BYTES = 4_000_000
JSON_HINT = (
    "; OTLP/JSON is limited by AUDITOR_OTLP_JSON_MAX_BYTES: export protobuf "
    "(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf) or smaller batches "
    "(OTEL_BSP_MAX_EXPORT_BATCH_SIZE)"
)


def _setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _authenticate(request: HttpRequest):
    token = _bearer(request)
    key = authenticate_token(token) if token else None
    if key is None:
        raise OtlpError(401, "a valid ingest key is required (Authorization: Bearer <key>)")
    if not key.allows("ingest"):
        raise OtlpError(403, f"this API key has the {key.scope!r} scope; ingestion needs 'ingest'")
    try:
        hit_rate_limit(key)
    except RateLimited as exc:
        raise OtlpError(429, str(exc), retry_after=exc.retry_after) from None
    return key


def _limits(fmt: str) -> tuple[int, int, str]:
    """(body limit, decompressed limit, what a 413 adds) for this encoding."""
    body = _setting("AUDITOR_OTLP_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)
    decompressed = _setting("AUDITOR_OTLP_MAX_DECOMPRESSED_BYTES", DEFAULT_MAX_DECOMPRESSED_BYTES)
    if fmt != JSON:
        return body, decompressed, ""
    json_limit = _setting("AUDITOR_OTLP_JSON_MAX_BYTES", DEFAULT_JSON_MAX_BYTES)
    return min(body, json_limit), min(decompressed, json_limit), JSON_HINT


def _read_body(request: HttpRequest, limit: int, hint: str) -> bytes:
    """The raw body, refused past the limit (by Content-Length, else by what arrives)."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise OtlpError(413, f"request body is larger than {limit} bytes{hint}")
    body = request.read(limit + 1)
    if len(body) > limit:
        raise OtlpError(413, f"request body is larger than {limit} bytes{hint}")
    return body


def _handle(request: HttpRequest, fmt: str) -> HttpResponse:
    """The export; 503 (retryable) only when the database cannot be reached or used, from
    the key's lookup on: the data of a span never gives a 5xx (a bad span is rejected)."""
    try:
        return _export(request, fmt)
    except (OperationalError, InterfaceError):
        logger.exception("OTLP ingestion: the database is unavailable")
        raise OtlpError(
            503, "the database is unavailable; try again later", retry_after=5
        ) from None


def _export(request: HttpRequest, fmt: str) -> HttpResponse:
    api_key = _authenticate(request)
    body_limit, decompressed_limit, hint = _limits(fmt)
    body = decode.decompress(
        _read_body(request, body_limit, hint),
        request.headers.get("Content-Encoding", ""),
        decompressed_limit,
        hint,
    )
    message, unreadable = decode.parse_request(body, fmt)
    max_spans = _setting("AUDITOR_OTLP_MAX_SPANS", DEFAULT_MAX_SPANS)
    count = len(unreadable) + sum(
        len(ss.spans) for rs in message.resource_spans for ss in rs.scope_spans
    )
    if count > max_spans:
        raise OtlpError(
            413,
            f"{count} spans in one request; the limit is {max_spans} "
            "(lower OTEL_BSP_MAX_EXPORT_BATCH_SIZE)",
        )
    outcome = ingest(message, api_key)
    for reason in unreadable:
        outcome.reject(reason)
    response = HttpResponse(
        decode.export_response(outcome.rejected, outcome.message(), fmt), content_type=fmt
    )
    response["X-Auditor-Spans"] = str(count)
    response["X-Auditor-Audits-Created"] = str(outcome.created)
    response["X-Auditor-Audits-Existing"] = str(outcome.duplicates)
    response["X-Auditor-Spans-Ignored"] = str(outcome.ignored)
    response["X-Auditor-Spans-Rejected"] = str(outcome.rejected)
    response["X-Auditor-Late-Sources-Joined"] = str(outcome.late.joined)
    response["X-Auditor-Late-Sources-Reruns"] = str(outcome.late.reruns)
    response["X-Auditor-Late-Sources-Dropped"] = str(outcome.late.dropped)
    return response


def _error(exc: OtlpError, fmt: str) -> HttpResponse:
    # google.rpc.Code: INVALID_ARGUMENT 3, UNAUTHENTICATED 16, PERMISSION_DENIED 7,
    # RESOURCE_EXHAUSTED 8, UNAVAILABLE 14, UNIMPLEMENTED 12.
    code = {400: 3, 401: 16, 403: 7, 413: 8, 415: 3, 429: 8, 405: 12, 503: 14}.get(exc.status, 2)
    response = HttpResponse(
        decode.status_response(code, exc.message, fmt), status=exc.status, content_type=fmt
    )
    if exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)
    if exc.status == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response


@csrf_exempt
async def traces(request: HttpRequest) -> HttpResponse:
    """OTLP/HTTP `POST /v1/traces` (protobuf or JSON, optionally gzip)."""
    if request.method != "POST":
        response = _error(OtlpError(405, "use POST"), JSON)
        response["Allow"] = "POST"
        return response
    try:
        fmt = decode.media_type(request.headers.get("Content-Type", ""))
    except OtlpError as exc:
        return _error(exc, JSON)
    try:
        return await run_in_db_thread(request, _handle, request, fmt)
    except OtlpError as exc:
        return _error(exc, fmt)


__all__ = ["traces", "ingest", "PROTOBUF", "JSON"]
