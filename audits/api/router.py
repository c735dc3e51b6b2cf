"""The audits API router (docs/reference/contract.md section 3), mounted at /api/ by auditor_site.api."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import Field, field_validator

from analyzers.api.errors import DetailError
from analyzers.api.schemas import ErrorOut
from analyzers.auth import (
    admin_auth,
    ingest_auth,
    ingest_auth_async,
    read_auth,
    read_auth_async,
    review_auth,
    staff_export_auth,
)
from analyzers.config_store import option_errors
from audits.api import group_commit, polling
from audits.api.export import export_page
from audits.api.stream_http import buffered_stream
from audits.execution import queueing
from audits.intake import submit as intake
from audits.intake.schemas import (
    AuditAccepted,
    AuditBatchIn,
    AuditBatchOut,
    AuditIn,
    AuditOut,
    AuditPage,
    ReviewIn,
    ReviewOut,
)
from audits.models import AuditRun
from audits.store import erasure, queries
from audits.store.db_threads import run_in_db_thread
from audits.store.verdicts import ReviewError, record_review, review_to_dict

router = Router(tags=["audits"])

ERRORS = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
    429: ErrorOut,
    503: ErrorOut,
}
EXPORT_BATCH = 2000  # rows per query batch and per streamed chunk (~2.5 MB)


class ListFilters(Schema):
    min_score: float | None = Field(None, ge=0, le=1)
    max_score: float | None = Field(None, ge=0, le=1)
    surfaced: bool | None = None
    analyzer: str | None = Field(None, max_length=100)
    type: str | None = Field(None, max_length=100)
    severity: Literal["info", "warning", "critical"] | None = None
    since: datetime | None = None
    until: datetime | None = None
    q: str | None = Field(None, max_length=500)
    status: Literal["pending", "running", "complete", "failed"] | None = None
    reviewed: bool | None = Field(None, description="false: audits with no verdict yet")
    verdict: Literal["confirmed", "false_positive", "unsure"] | None = Field(
        None, description="audits with a current verdict of this kind (on the audit or a finding)"
    )
    top_score_min: float | None = Field(
        None, ge=0, le=1, description="audits whose highest result score is at least this"
    )
    meta: list[str] | None = Field(
        None,
        max_length=10,
        description="metadata `key:value` (repeatable, all must match), e.g. `model:gpt-4o`, "
        "`service_name:checkout`; a top-level metadata key, compared as text or number",
    )

    @field_validator("since", "until")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        return in_utc(value)

    def to_filters(self) -> queries.AuditFilters:
        for name in ("analyzer", "type", "q"):
            value = getattr(self, name)
            if value is not None and "\x00" in value:
                raise HttpError(422, f"{name}: NUL characters are not allowed")
        for pair in self.meta or ():
            try:
                queries.parse_meta_filter(pair)
            except queries.InvalidMetaFilter as exc:
                raise DetailError(422, [{"loc": ["query", "meta"], "msg": str(exc)}]) from None
            if "\x00" in pair or len(pair) > 500:
                raise DetailError(422, [{"loc": ["query", "meta"], "msg": "invalid meta filter"}])
        return queries.AuditFilters(**self.model_dump(exclude={"sort"}))


class ListQuery(ListFilters):
    sort: Literal["-created_at", "created_at", "-top_score", "top_score"] = Field(
        "-created_at",
        description="`-created_at` (newest first), `created_at`, `-top_score` (highest score "
        "first; audits without one last) or `top_score`; a cursor belongs to its sort",
    )


def _validate_options(options: dict[str, dict]) -> None:
    errors = option_errors(options)
    if errors:
        raise DetailError(422, errors)


def _full(run_id) -> dict:
    rows = list(AuditRun.objects.filter(pk=run_id).values(*queries.RUN_FIELDS))
    if not rows:
        raise HttpError(404, "audit not found")
    return queries.serialize_runs(rows)[0]


def _store(request: HttpRequest, body: AuditIn, *, enqueue: bool = True):
    """Validate the options and store one submitted audit (see `intake.submit_audit`)."""
    _validate_options(body.options)
    return intake.submit_audit(
        user_input=body.user_input,
        response=body.response,
        sources=[s.model_dump() for s in body.sources],
        metadata=body.metadata,
        external_id=body.external_id,
        collision_key=body.collision_key,
        options=body.options,
        api_key=request.auth,
        enqueue=enqueue,
    )


def _submit(request: HttpRequest, body: AuditIn, wait: bool):
    """The synchronous body of `submit`: every query of a submission, in one thread.

    With `wait` the audit is queued at once, after its transaction (not on commit of an
    outer one), for `submit` to wait for."""
    try:
        run = _store(request, body, enqueue=not wait)
    except intake.ExternalIdConflict as exc:
        raise _conflict(body, exc) from None
    if not run.was_created:
        return Status(200, _full(run.pk))
    if wait:
        queueing.enqueue_audit(run.pk, large=queueing.is_large(body.response))
    return Status(202, {"id": str(run.pk), "status": run.status})


def _conflict(body: AuditIn, exc: intake.ExternalIdConflict) -> HttpError:
    return HttpError(
        409,
        f"external_id {body.external_id!r} was already used with a different body "
        f"(audit {exc.existing.id})",
    )


async def submit_grouped(request: HttpRequest, body: AuditIn, wait: bool):
    """`_submit` under ASGI: the audit is stored with the others submitted meanwhile, in
    one transaction (audits.api.group_commit), and queued when it commits (so also for
    `wait`: that commit is the audit's own, never an outer one). Also the store of
    `POST /api/audits` answered in front of Django (audits.api.submit_asgi)."""
    if not isinstance(request, ASGIRequest) or not settings.AUDITOR_API_GROUP_COMMIT:
        return await run_in_db_thread(request, _submit, request, body, wait)
    outcome = await group_commit.submit(
        request,
        group_commit.Submission(
            fields=_item_fields(body),
            api_key=request.auth,
            external_id=body.external_id,
            options=body.options,
        ),
    )
    if isinstance(outcome, intake.ExternalIdConflict):
        raise _conflict(body, outcome)
    if not outcome.was_created:
        return Status(200, await run_in_db_thread(request, _full, outcome.pk))
    return Status(202, {"id": str(outcome.pk), "status": outcome.status})


@router.post(
    "/audits",
    auth=ingest_auth_async,
    response={
        200: AuditOut,
        201: AuditOut,
        202: AuditAccepted,
        404: ErrorOut,
        409: ErrorOut,
        **ERRORS,
    },
    summary="Submit an audit",
)
async def submit(request: HttpRequest, body: AuditIn, wait: bool = False):
    """Store the audit and analyse it in the background (`202 {id, status}`), or with
    `?wait=true` wait for the complete Audit (`201`): at most `AUDITOR_WAIT_TIMEOUT_S`
    seconds and `AUDITOR_WAIT_PER_KEY` waiting requests per key, else `202` (the audit
    completes in the background). The same `external_id` again returns the stored audit
    (`200`); with another body, `409`."""
    # An async view: authentication (cached key, in-memory rate limit) and body parsing
    # run on the event loop; the database work is one hop to a thread.
    # `wait=true` never runs the audit on the request's threads: it is queued like any
    # other (large ones on their own lane) and waited for, at most AUDITOR_WAIT_TIMEOUT_S
    # and by at most AUDITOR_WAIT_PER_KEY requests of one key at once; past either bound
    # the answer is 202 and the audit completes in the background.
    if not wait or not _wait_slots.acquire(request.auth):
        return await submit_grouped(request, body, False)
    try:
        outcome = await submit_grouped(request, body, True)
        if outcome.status_code != 202:
            return outcome
        return await _wait_for(request, outcome.value["id"])
    finally:
        _wait_slots.release(request.auth)


_wait_slots = polling.WaitSlots("AUDITOR_WAIT_PER_KEY")


def _finished(run_id: str) -> tuple[str, dict | None]:
    """The run's status, and the Audit once it finished."""
    status = AuditRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status in (AuditRun.Status.COMPLETE, AuditRun.Status.FAILED):
        return status, _full(run_id)
    return status or AuditRun.Status.PENDING, None


async def _wait_for(request: HttpRequest, run_id: str):
    """201 with the Audit once it finished, or 202 when it did not in time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.AUDITOR_WAIT_TIMEOUT_S
    pause, longest = polling.WAIT_PAUSES_S
    while True:
        status, done = await run_in_db_thread(request, _finished, run_id)
        if done is not None:
            return Status(201, done)
        left = deadline - loop.time()
        if left <= 0:
            return Status(202, {"id": run_id, "status": status})
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, longest)


@router.post(
    "/audits/batch",
    auth=ingest_auth,
    response={202: AuditBatchOut, **ERRORS},
    summary="Submit up to 500 audits at once",
)
def submit_batch(request: HttpRequest, body: AuditBatchIn):
    """Like `POST /api/audits` (without `wait`) for many audits in one request. Items are
    independent: each answer says whether it was `created` (false: the stored audit of a
    repeated `external_id`) or why it was refused (`error`, e.g. an external_id conflict).
    Audits without `external_id` are stored together, in one transaction; those with one
    through `intake.submit_audits_once` (one lookup, the new ones stored together)."""
    items: list[dict | None] = [None] * len(body.audits)
    plain: list[
        tuple[int, AuditIn]
    ] = []  # (index, item) of audits without external_id: stored together
    keyed: list[
        tuple[int, AuditIn]
    ] = []  # (index, item) of audits with one: checked and stored together
    for i, item in enumerate(body.audits):
        try:
            _validate_options(item.options)
        except HttpError as exc:
            items[i] = {
                "id": None,
                "status": None,
                "created": False,
                "error": json.dumps(exc.message),
            }
            continue
        (plain if item.external_id is None else keyed).append((i, item))
    if keyed:
        results = intake.submit_audits_once(
            [{**_item_fields(item), "external_id": item.external_id} for _, item in keyed],
            api_key=request.auth,
        )
        for (i, item), run in zip(keyed, results, strict=True):
            if isinstance(run, intake.ExternalIdConflict):
                items[i] = {
                    "id": None,
                    "status": None,
                    "created": False,
                    "error": f"external_id {item.external_id!r} was already used "
                    "with a different body",
                }
            else:
                items[i] = {
                    "id": str(run.pk),
                    "status": run.status,
                    "created": run.was_created,
                    "error": None,
                }
    if plain:
        runs = intake.submit_audits(
            [_item_fields(item) for _, item in plain],
            api_key=request.auth,
        )
        for (i, _), run in zip(plain, runs, strict=True):
            items[i] = {"id": str(run.pk), "status": run.status, "created": True, "error": None}
    return Status(202, {"items": items})


def _item_fields(item: AuditIn) -> dict:
    """The stored fields of one submitted audit (the body of `intake.submit_audits`)."""
    return {
        "user_input": item.user_input,
        "response": item.response,
        "sources": [s.model_dump() for s in item.sources],
        "metadata": item.metadata,
        "collision_key": item.collision_key,
        "options": item.options,
    }


STREAM_DOC = """A response streamed in as it is written, audited paragraph by paragraph.

The body is NDJSON (`application/x-ndjson`): the head object on the first line (the fields
of `POST /api/audits` without `response`: `user_input`, `sources`, `metadata`,
`external_id`, `collision_key`, `options`), then one `{"text": "..."}` (the next piece of the
response) or `{"source": {...}}` object per line; the end of the body ends the response.
The answer is `text/event-stream` with the events `accepted` (`{id, status}`), `chunk`
(audited text), `audit_trace` (`[AUDIT]` lines), `audit` (the final Audit) and `error`
(`{status, detail}`). A body over the size limit gets `413` before anything is stored, or,
mid-stream, an `error` event and an audit stored `failed`. Needs an `ingest` key.

Served by the ASGI server as it arrives (`python -m auditor_site.serve`); under WSGI
(`runserver`) the same endpoint answers once the whole body is read."""

_STREAM_LINE = {
    "type": "object",
    "description": "a line after the head",
    "properties": {
        "text": {"type": "string", "description": "the next piece of the response"},
        "source": {"$ref": "#/components/schemas/SourceIn"},
    },
}


@router.post(
    "/audits/stream",
    auth=None,  # the endpoint checks the key itself, before it reads the body
    response={
        200: None,
        400: ErrorOut,
        401: ErrorOut,
        403: ErrorOut,
        405: ErrorOut,
        413: ErrorOut,
        422: ErrorOut,
        429: ErrorOut,
        503: ErrorOut,
    },
    summary="Stream a response in (NDJSON), get it audited (server-sent events)",
    description=STREAM_DOC,
    openapi_extra={
        "security": [{"ApiKeyAuth": []}],
        "requestBody": {
            "required": True,
            "content": {
                "application/x-ndjson": {
                    "schema": {
                        "description": "the head (an audit without `response`), then lines",
                        "oneOf": [{"$ref": "#/components/schemas/AuditIn"}, _STREAM_LINE],
                    },
                },
            },
        },
        "responses": {
            200: {
                "description": "events `accepted`, `chunk`, `audit_trace`, `audit`, `error`",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }
        },
    },
)
def stream(request: HttpRequest):
    return buffered_stream(request)


@router.get("/audits", auth=read_auth, response={200: AuditPage, **ERRORS}, summary="List audits")
def list_audits(
    request: HttpRequest,
    filters: Query[ListQuery],
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=500),
):
    """Newest first, or in `sort` order. Pass `next` back as `cursor` (with the same
    filters and sort) for the following page."""
    qs = queries.filter_audits(filters.to_filters())
    try:
        items, next_cursor = queries.page(qs, cursor, limit, filters.sort)
    except queries.InvalidCursor:
        raise DetailError(422, [{"loc": ["query", "cursor"], "msg": "invalid cursor"}]) from None
    return {"items": items, "next": next_cursor}


CSV_COLUMNS = [
    "id",
    "external_id",
    "created_at",
    "finished_at",
    "status",
    "threshold",
    "overall_score",
    "has_card",
    "surfaced_analyzers",
    "annotation_types",
    "user_input",
    "response",
    "cleaned_response",
    "metadata",
    "reviewed_at",
    "verdict",
    "top_score",
    "top_analyzer",
]


# A spreadsheet reads a cell as a formula when it starts with one of these (full-width
# forms included), also after leading blanks and after separators it may split cells on.
_FORMULA_START = frozenset("=+-@\uff1d\uff0b\uff0d\uff20")
_LEADING_IGNORED = " \t\r\n\f\v\u00a0\u3000;,|"


def _csv_safe(value) -> str:
    """Neutralise spreadsheet formulas (CSV injection): a leading `'` on any cell that is,
    or after leading blanks/separators becomes, a formula (`=1`, `;=cmd`, ` @SUM()`)."""
    text = "" if value is None else str(value)
    if text[:1] in ("\t", "\r", "\n") or text.lstrip(_LEADING_IGNORED)[:1] in _FORMULA_START:
        return "'" + text
    return text


def _csv_row(item: dict) -> list[str]:
    return [
        _csv_safe(v)
        for v in (
            item["id"],
            item["external_id"],
            item["created_at"],
            item["finished_at"],
            item["status"],
            item["threshold"],
            item["overall_score"],
            item["has_card"],
            " ".join(r["analyzer_id"] for r in item["surfaced_results"]),
            " ".join(sorted({a["type"] for r in item["results"] for a in r["annotations"]})),
            item["user_input"],
            item["response"],
            item["cleaned_response"],
            json.dumps(item["metadata"], ensure_ascii=False),
            item["reviewed_at"],
            _audit_verdict(item),
            item["top_score"],
            item["top_analyzer"],
        )
    ]


def _audit_verdict(item: dict) -> str:
    """The current verdict on the whole audit, or empty."""
    for review in item["reviews"]:
        if review["current"] and review["annotation_id"] is None:
            return review["verdict"]
    return ""


def _encode_batch(items: list[dict], fmt: str) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items).encode()
    buf = io.StringIO()
    writer = csv.writer(buf)
    for item in items:
        writer.writerow(_csv_row(item))
    return buf.getvalue().encode()


def _header(fmt: str) -> bytes:
    if fmt == "jsonl":
        return b""
    buf = io.StringIO()
    csv.writer(buf).writerow(CSV_COLUMNS)
    return buf.getvalue().encode()


def _next_batch(qs, cursor, fmt, sort):
    if fmt == "jsonl":
        text, next_cursor = export_page(qs, cursor, EXPORT_BATCH, sort)
        return text.encode(), next_cursor
    items, next_cursor = queries.page(qs, cursor, EXPORT_BATCH, sort)
    return _encode_batch(items, fmt), next_cursor


def _sync_export(qs, fmt: str, sort: str) -> Iterator[bytes]:
    yield _header(fmt)
    cursor = None
    while True:
        chunk, cursor = _next_batch(qs, cursor, fmt, sort)
        if chunk:
            yield chunk
        if cursor is None:
            return


async def _async_export(qs, fmt: str, sort: str) -> AsyncIterator[bytes]:
    yield _header(fmt)
    cursor = None
    while True:
        chunk, cursor = await sync_to_async(_next_batch, thread_sensitive=True)(
            qs, cursor, fmt, sort
        )
        if chunk:
            yield chunk
        if cursor is None:
            return


@router.get(
    "/audits/export",
    auth=[read_auth, staff_export_auth],  # a key, or the dashboard's Export menu
    response={200: None, **ERRORS},
    summary="Export audits as JSON lines or CSV",
    openapi_extra={
        "responses": {
            200: {
                "description": "a stream of audits, newest first or in `sort` order",
                "content": {"application/x-ndjson": {}, "text/csv": {}},
            }
        }
    },
)
def export(
    request: HttpRequest,
    filters: Query[ListQuery],
    format: Literal["jsonl", "csv"] = "jsonl",
):
    """The filters and `sort` of `GET /api/audits`, streamed in constant memory (one full Audit per
    line for `jsonl`; one summary row per audit for `csv`). A `read` key, or a signed-in staff
    session with the `audits.view_auditrun` permission (the dashboard's Export menu)."""
    qs = queries.filter_audits(filters.to_filters())
    sort = filters.sort
    stream: AsyncIterator[bytes] | Iterator[bytes]
    if isinstance(request, ASGIRequest):
        stream = _async_export(qs, format, sort)
    else:
        stream = _sync_export(qs, format, sort)
    content_type = "application/x-ndjson" if format == "jsonl" else "text/csv; charset=utf-8"
    response = StreamingHttpResponse(stream, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="audits.{format}"'
    return response


def _audit_id(audit_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(audit_id)
    except ValueError:
        raise HttpError(404, "audit not found") from None


@router.post(
    "/audits/{audit_id}/reviews",
    auth=review_auth,
    response={201: ReviewOut, 404: ErrorOut, **ERRORS},
    summary="Record a verdict on an audit or one of its findings",
)
def add_review(request: HttpRequest, audit_id: str, body: ReviewIn):
    """A verdict on the whole audit, or with `annotation_id` on one finding. It replaces
    the current verdict on the same target; the replaced one stays in `reviews` with
    `current: false`. Needs a key with the `review` (or `admin`) scope."""
    try:
        review = record_review(
            audit_id=_audit_id(audit_id),
            verdict=body.verdict,
            annotation_id=body.annotation_id,
            comment=body.comment,
            api_key=request.auth,
        )
    except AuditRun.DoesNotExist:
        raise HttpError(404, "audit not found") from None
    except ReviewError as exc:
        raise DetailError(422, [{"loc": ["body"], "msg": str(exc)}]) from None
    return Status(201, review_to_dict(review))


def in_utc(value: datetime | None) -> datetime | None:
    """An offset the database cannot hold (PostgreSQL: under 16 hours; ISO 8601 allows up
    to 24) compares as the same instant in UTC; a date past the last one in UTC is invalid."""
    if value is None or value.tzinfo is None:
        return value
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the date is out of range") from None


class ErasureIn(Schema):
    """Which audits to erase: all the criteria given at once, at least one."""

    model_config = {"extra": "forbid"}

    external_id: str | None = Field(None, min_length=1, max_length=200)
    metadata: dict[str, str | int | bool] | None = Field(
        None, description='top-level metadata values, e.g. {"user_id": "u-1"}'
    )
    before: datetime | None = Field(None, description="created before this time (ISO 8601)")

    @field_validator("before")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        return in_utc(value)

    @field_validator("metadata")
    @classmethod
    def _plain_keys(cls, metadata: dict | None) -> dict | None:
        for key in metadata or {}:
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", key) or "__" in key:
                raise ValueError(f"metadata key {key[:100]!r}: letters, digits, . - _ only")
        return metadata

    def criteria(self) -> dict:
        return self.model_dump(mode="json", exclude_none=True)


class ErasureOut(Schema):
    deleted: int


@router.post(
    "/audits/delete",
    auth=admin_auth,
    response={200: ErasureOut, **ERRORS},
    summary="Erase the audits a filter names",
)
def delete_audits(request: HttpRequest, body: ErasureIn):
    """Erase the audits with this `external_id`, these metadata values or created `before`
    a time, and every row derived from them (docs/operations/privacy.md); answers the
    count. Needs a key with the `admin` scope; the erasure is logged without content."""
    criteria = body.criteria()
    if not criteria or body.metadata == {}:
        raise DetailError(422, [{"loc": ["body"], "msg": "give external_id, metadata or before"}])
    if body.before is not None and body.before.tzinfo is None:
        raise DetailError(422, [{"loc": ["body", "before"], "msg": "give a time zone"}])
    audits = erasure.filtered(
        external_id=body.external_id, metadata=body.metadata, before=body.before
    )
    count = erasure.erase(
        audits, actor=f"api-key:{request.auth.name}", source="api", filter=criteria
    )
    polling.cache.clear()  # the erased audits' answers leave this process's memory
    return {"deleted": count}


@router.get(
    "/audits/{audit_id}",
    auth=read_auth_async,
    response={200: AuditOut, 304: None, 404: ErrorOut, **ERRORS},
    summary="Get one audit",
)
async def get_audit(
    request: HttpRequest,
    audit_id: str,
    wait: str | None = Query(
        None,
        description="seconds to wait for a pending or running audit to finish (at "
        "most `AUDITOR_WAIT_TIMEOUT_S`; `true`: that long); its state when the time is up",
    ),
):
    """The Audit, with an `ETag`: send it back as `If-None-Match` for a `304` while the
    audit is unchanged. Poll with `?wait=` rather than in a loop (audits.api.polling)."""
    # An async view: a cached key costs no thread hop; the queries run on a pooled
    # database thread (audits.store.db_threads), not on a request thread of their own.
    try:
        seconds = polling.wait_seconds(wait)
    except ValueError:
        raise DetailError(
            422, [{"loc": ["query", "wait"], "msg": "wait: seconds (0 or more), true or false"}]
        ) from None
    return await polling.respond(request, _audit_id(audit_id), seconds)


@router.delete(
    "/audits/{audit_id}",
    auth=admin_auth,
    response={200: ErasureOut, 404: ErrorOut, **ERRORS},
    summary="Erase one audit",
)
def delete_audit(request: HttpRequest, audit_id: str):
    """Erase the audit and every row derived from it; it answers 404 from then on. Needs
    a key with the `admin` scope; the erasure is logged without content."""
    run_id = _audit_id(audit_id)
    count = erasure.erase(
        erasure.filtered(ids=[run_id]),
        actor=f"api-key:{request.auth.name}",
        source="api",
        filter={"id": str(run_id)},
    )
    polling.cache.discard(run_id)
    if not count:
        raise HttpError(404, "audit not found")
    return {"deleted": count}
