"""One streamed response being audited, whatever carries it (WebSocket or HTTP body).

The transport authenticates, parses the head and then hands text over as it arrives::

    session = await StreamSession.open(api_key=key, head=head)
    for name, data in await session.feed("some text\\n\\nmore"):   # ("chunk"|"audit_trace", dict)
        send(name, data)
    for name, data in await session.close(complete=True):         # ... then ("audit", Audit)
        send(name, data)

Paragraphs are audited by the engine's InlineStreamAuditor as soon as they are complete;
only audited text leaves as `chunk` events. Progress (the audited part of the response, its
cleaned text, the trace lines) is written to the run as it goes and announced with a small
`stream_progress` event, so audit pages watch it live from the database. `close()` runs
the full engine Auditor over the assembled response (`execute.execute_run`, the same code
as a batch audit, link health included) and stores its report; `complete=False` (the
client went away) marks the run `incomplete`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone
from pydantic import ValidationError

from analyzers.auth import RateLimited, hit_rate_limit
from analyzers.config_store import option_errors
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import Source
from analyzers.engine.guardrails.analyzers import Seed
from analyzers.engine.guardrails.stream import AuditedParagraph, BoundedStream, InlineStreamAuditor
from analyzers.engine.limits import Limits
from analyzers.models import ApiKey
from audits.events import apublish
from audits.execution import execute
from audits.intake import submit
from audits.intake.redaction import StreamedText, redact_metadata, stored_redaction
from audits.intake.schemas import AuditIn
from audits.models import AuditRun, TraceLine
from audits.store import reports
from audits.store.serializers import audit_queryset, audit_to_dict
from audits.store.trace_rows import storable

logger = logging.getLogger(__name__)

Event = tuple[str, dict[str, Any]]

# While a stream is open its run is `running`; `recovery.recover_stale_runs` takes a
# running run whose `started_at` is older than AUDITOR_RECOVER_RUNNING_AFTER_S (default
# 30 s) for one a dead worker left. A stream can last longer (or wait on a slow model), so
# the session keeps `started_at` fresh. (The claim at the end sets it again: it ends as the
# start of the final audit.)
HEARTBEAT_SECONDS = 5.0
# Progress (response so far, cleaned text, trace lines) is written at most this often, so
# a stream of many small paragraphs costs about what one POST of its text costs; chunks
# are sent as soon as they are audited, whatever this is.
PROGRESS_SECONDS = 0.25


class StreamError(Exception):
    """A request the stream cannot accept: `status` and `detail` as the API would answer."""

    def __init__(self, status: int, detail: Any):
        self.status, self.detail = status, detail
        super().__init__(str(detail))


def parse_head(raw: bytes | str) -> AuditIn:
    """The first JSON object of a stream: the audit without its response."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise StreamError(400, "the first line must be a JSON object") from None
    if not isinstance(data, dict):
        raise StreamError(400, "the first line must be a JSON object")
    if "response" in data:
        raise StreamError(422, "send the response as chunks after the first line, not in it")
    try:
        head = AuditIn.model_validate({**data, "response": ""})
    except ValidationError as exc:
        errors = [{"loc": ["head", *map(str, e["loc"])], "msg": e["msg"]} for e in exc.errors()]
        raise StreamError(422, errors) from None
    return head


@database_sync_to_async
def authenticate(token: str | None, scope: str = "ingest") -> Any:
    """The API key for `token` with `scope`, counted against its rate limit; or StreamError."""
    key = ApiKey.authenticate(token or "")
    if key is None:
        raise StreamError(401, "a valid API key is required (Authorization: Bearer <key>)")
    if not key.allows(scope):
        raise StreamError(
            403, f"this API key has the {key.scope!r} scope; this call needs {scope!r}"
        )
    try:
        hit_rate_limit(key)
    except RateLimited as exc:
        raise StreamError(429, f"rate limit exceeded; retry in {exc.retry_after} s") from None
    return key


def bearer_token(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _validate_options(options: dict[str, dict[str, Any]]) -> None:
    errors = option_errors(options)
    if errors:
        raise StreamError(422, errors)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise StreamError(422, "NUL characters are not allowed")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise StreamError(422, "invalid unicode (lone surrogate)") from None


@database_sync_to_async
def _create_run(api_key: Any, head: AuditIn) -> tuple[AuditRun, dict[str, Any]]:
    _validate_options(head.options)
    run = submit.submit_audit(
        user_input=head.user_input,
        response="",
        sources=[s.model_dump() for s in head.sources],
        metadata=head.metadata,
        external_id=head.external_id,
        collision_key=head.collision_key,
        options=head.options,
        api_key=api_key,
        enqueue=False,
    )
    if not run.was_created:
        raise StreamError(
            409, f"external_id {head.external_id!r} was already used (audit {run.pk})"
        )
    AuditRun.objects.filter(pk=run.pk).update(
        status=AuditRun.Status.RUNNING, started_at=timezone.now()
    )
    run.status = AuditRun.Status.RUNNING
    return run, dict(run.config_snapshot or {})


@database_sync_to_async
def _save_progress(run_id: Any, response: str, cleaned: str, trace: list[tuple[int, str]]) -> None:
    AuditRun.objects.filter(pk=run_id).update(response=response, cleaned_response=cleaned)
    if trace:
        TraceLine.objects.bulk_create(
            [TraceLine(audit_id=run_id, position=p, text=storable(t)) for p, t in trace],
            ignore_conflicts=True,
        )


@database_sync_to_async
def _annotate_run(run_id: Any, metadata: dict[str, Any], external_id: str | None) -> None:
    from django.db import IntegrityError, transaction

    run = AuditRun.objects.only("metadata", "external_id", "api_key_id").get(pk=run_id)
    AuditRun.objects.filter(pk=run_id).update(metadata={**(run.metadata or {}), **metadata})
    if external_id and run.external_id is None:
        taken = AuditRun.objects.filter(api_key_id=run.api_key_id, external_id=external_id)
        if not taken.exists():
            try:
                with transaction.atomic():
                    AuditRun.objects.filter(pk=run_id).update(external_id=external_id[:200])
            except IntegrityError:  # taken meanwhile: the id stays in the metadata only
                pass


@database_sync_to_async
def _heartbeat(run_id: Any) -> None:
    AuditRun.objects.filter(pk=run_id, status=AuditRun.Status.RUNNING).update(
        started_at=timezone.now()
    )


async def _beat(run_id: Any) -> None:
    while True:
        await asyncio.sleep(HEARTBEAT_SECONDS)
        try:
            await _heartbeat(run_id)
        except Exception:
            logger.warning("stream %s: heartbeat failed", run_id, exc_info=True)


def _finish_run(
    run_id: Any, response: str, incomplete: bool, memo: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Store the whole response, audit it like a batch audit and return the Audit (a thread).
    `memo`: the stream's own pipeline result, which that audit uses when it fits."""
    close_old_connections()
    try:
        # Back to pending so execute_run claims it the usual way (one winner).
        AuditRun.objects.filter(pk=run_id, status=AuditRun.Status.RUNNING).update(
            response=response, incomplete=incomplete, status=AuditRun.Status.PENDING
        )
        execute.execute_run(run_id, memo)
        return audit_to_dict(audit_queryset().get(pk=run_id))
    finally:
        close_old_connections()


def _refuse_run(run_id: Any, response: str, detail: str) -> dict[str, Any]:
    """A stream stopped by a limit: stored `failed` (not audited, never a clean audit of a
    cut response) with what had arrived; the Audit (a thread)."""
    close_old_connections()
    try:
        AuditRun.objects.filter(pk=run_id).update(response=response, incomplete=True)
        reports.mark_failed(run_id, f"refused: {detail}")
        return audit_to_dict(audit_queryset().get(pk=run_id))
    finally:
        close_old_connections()


@dataclass
class StreamSession:
    run_id: Any
    stream: BoundedStream
    cleaned: list[str] = field(default_factory=list)
    trace_count: int = 0
    max_trace_lines: int = 500  # the configuration's limits.max_trace_lines
    paragraphs: int = 0
    size: int = 0
    closed: bool = False
    heartbeat: asyncio.Task | None = None
    # The configured redflag `max_chars`: with `split_long` (the proxy) a paragraph held
    # longer is ended there (BoundedStream), so a transport holds at most one paragraph +
    # max_chars of unsent text.
    max_chars: int = 3000
    unsaved_trace: list[tuple[int, str]] = field(default_factory=list)
    saved_at: float = 0.0
    save_later: asyncio.Task | None = None
    save_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # `privacy.store: redacted`: the response is stored in this form only
    stored: StreamedText | None = None
    # What the stream's pipeline ran with: its result stands for the final audit's own run
    # of the pipeline unless a source arrived mid-stream (the final audit has not got it).
    limits: Limits | None = None
    sources: tuple[Source, ...] = ()
    sources_added: bool = False

    @classmethod
    async def open(cls, *, api_key: Any, head: AuditIn) -> StreamSession:
        run, snapshot = await _create_run(api_key, head)
        snapshot.pop("custom_judges", None)
        config = AuditorConfig.model_validate(snapshot)
        sources = tuple(Source.model_validate(s.model_dump()) for s in head.sources)
        auditor = InlineStreamAuditor.from_config(config, sources)
        audit_id = str(run.pk)
        await apublish({"type": "audit_submitted", "audit_id": audit_id, "status": "running"})
        await apublish(
            {"type": "audit_started", "audit_id": audit_id, "attempt": 0, "streaming": True}
        )
        session = cls(
            run_id=run.pk,
            stream=BoundedStream(auditor),
            max_trace_lines=config.limits.max_trace_lines,
            limits=config.limits,
            sources=sources,
        )
        max_chars = config.analyzer_section("redflag").get("max_chars")
        if isinstance(max_chars, int) and not isinstance(max_chars, bool) and max_chars > 0:
            session.max_chars = max_chars
        redact = stored_redaction(config)
        if redact is not None:
            session.stored = StreamedText(redact)
        session.heartbeat = asyncio.create_task(_beat(run.pk))
        return session

    @property
    def audit_id(self) -> str:
        return str(self.run_id)

    @property
    def auditor(self) -> InlineStreamAuditor:
        return self.stream.auditor

    @property
    def split_long(self) -> bool:
        return self.stream.max_chars is not None

    @split_long.setter
    def split_long(self, value: bool) -> None:
        self.stream.max_chars = self.max_chars if value else None

    async def add_source(self, source: dict[str, Any]) -> None:
        """A tool result arrived mid-stream: it grounds the paragraphs that follow."""
        self.sources_added = True
        try:
            self.auditor.add_source(source)
        except ValidationError as exc:
            raise StreamError(422, f"invalid source: {exc.errors()[0]['msg']}") from None

    async def feed(self, text: str) -> list[Event]:
        """Audit the paragraphs `text` completes; the events to send, in order."""
        _check_text(text)
        self.size += len(text.encode())
        limit = settings.AUDITOR_MAX_BODY_BYTES
        if self.size > limit:
            raise StreamError(413, f"response too large: the limit is {limit} bytes")
        events = self._events(self.stream.feed(text))
        if events:
            await self._persist(events)
        return events

    @property
    def pending(self) -> bool:
        """True while text has arrived whose paragraph is not audited yet."""
        return self.stream.pending

    async def end_text(self) -> list[Event]:
        """The text is over (the stream goes on, e.g. with tool calls): audit the last
        paragraph now; `close()` later stores the final audit. The events to send."""
        if self.auditor._finished:
            return []
        events = self._events(self.stream.finish())
        await self._persist(events, now=True)
        return events

    async def annotate(self, *, metadata: dict[str, Any], external_id: str | None = None) -> None:
        """Add to the run's metadata (and set its `external_id` when it has none and the
        key has not used it) before `close()`: what a transport learns as the stream ends."""
        if self.stored is not None:
            metadata = redact_metadata(metadata, self.stored.redact)
        await _annotate_run(self.run_id, metadata, external_id)

    async def close(self, *, complete: bool) -> list[Event]:
        """Flush the last paragraph, run the post-stream audit, store it: the last events."""
        if self.closed:
            return []
        self._stop_timers()
        events = await self.end_text()
        await self._persist([], now=True)
        if self.stream.cuts:
            await self.annotate(metadata={"stream_paragraph_breaks": self.stream.cuts})
        text = self.stream.text()
        # the seed is of the text as it arrived: it fits only when nothing was redacted
        audit = await sync_to_async(_finish_run, thread_sensitive=False)(
            self.run_id, self._storable(text), not complete, self._seed(text)
        )
        events.append(("audit", audit))
        return events

    def _seed(self, response: str) -> dict[str, Any] | None:
        if self.sources_added or self.limits is None:
            return None
        return Seed(
            response=response,
            settings=self.auditor.settings,
            sources=self.sources,
            limits=self.limits,
            result=self.auditor.result(),
        ).memo()

    async def refuse(self, detail: str) -> list[Event]:
        """End a stream that went over a limit: no final audit, the run is `failed` with
        `detail` (see `_refuse_run`); the last events."""
        if self.closed:
            return []
        self._stop_timers()
        await self._persist([], now=True)
        response = self._storable(self.stream.text() + self.stream.partial)
        audit = await sync_to_async(_refuse_run, thread_sensitive=False)(
            self.run_id, response, detail
        )
        return [("audit", audit)]

    def _storable(self, response: str) -> str:
        """The whole response as it is stored (redacted under `privacy.store: redacted`)."""
        return response if self.stored is None else self.stored.whole(response)

    def _events(self, paragraphs: list[AuditedParagraph]) -> list[Event]:
        """One `chunk` of the paragraphs' audited text, then their trace lines."""
        events: list[Event] = []
        text = "".join(paragraph.text for paragraph in paragraphs)
        if text:
            events.append(("chunk", {"index": self.paragraphs, "text": text}))
            self.paragraphs += 1
            self.cleaned.append(text)
        for paragraph in paragraphs:
            for line in paragraph.trace:
                if self.trace_count >= self.max_trace_lines:
                    break  # bounded work: the note below was the last line kept
                if self.trace_count == self.max_trace_lines - 1:
                    line = "[AUDIT] limits: further trace lines not kept (limits.max_trace_lines)"
                events.append(("audit_trace", {"position": self.trace_count, "text": line}))
                self.trace_count += 1
        return events

    async def _save_after(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self.save_later = None  # from here on it is no longer cancelled
        try:
            await self._persist([], now=True)
        except Exception:
            logger.warning("stream %s: progress not saved", self.run_id, exc_info=True)

    def _stop_timers(self) -> None:
        self.closed = True
        if self.heartbeat is not None:
            self.heartbeat.cancel()
        if self.save_later is not None:
            self.save_later.cancel()

    async def _persist(self, events: list[Event], *, now: bool = False) -> None:
        """Write the audited part of the response, its cleaned text and trace lines to the
        run, and announce it; at most every PROGRESS_SECONDS unless `now`."""
        self.unsaved_trace += [
            (d["position"], d["text"]) for name, d in events if name == "audit_trace"
        ]
        loop = asyncio.get_running_loop()
        wait = self.saved_at + PROGRESS_SECONDS - loop.time()
        if not now and wait > 0:
            if self.save_later is None and not self.closed:
                self.save_later = asyncio.create_task(self._save_after(wait))
            return
        if self.save_later is not None:
            self.save_later.cancel()
            self.save_later = None
        async with self.save_lock:
            trace, self.unsaved_trace = self.unsaved_trace, []
            self.saved_at = loop.time()
            text, audited = self.stream.text(), self.stream.audited_chars
            stored = self.stored
            response = text[:audited] if stored is None else stored.through(text, audited)
            await _save_progress(self.run_id, response, "".join(self.cleaned), trace)
        await apublish(
            {
                "type": "stream_progress",
                "audit_id": self.audit_id,
                "paragraphs": self.paragraphs,
                "trace": self.trace_count,
            }
        )
