"""`POST /v1/chat/completions` and `GET /v1/models`: the OpenAI-compatible auditing proxy.

A plain ASGI app routed in front of Django (auditor_site/asgi.py), like the HTTP stream
endpoint: it answers while the upstream streams, and it notices a client that leaves (a
task waits for `http.disconnect`) and then cancels the upstream request.

One call: our API key (ingest scope) as the Bearer token; the body is an OpenAI Chat
Completions request plus an optional `auditor` object (`sources`, `external_id`,
`collision_key`, `options`, `metadata`), removed before forwarding. The audit is a stream
session (audits/stream_session.py, the pipeline of `/ws/ingest/`) opened before the
upstream is called, so it is on the Live page while the answer streams, and every answer
carries `X-Auditor-Audit-Id`. Errors are in OpenAI's shape (`{"error": {...}}`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any

import httpx
from channels.db import database_sync_to_async
from django.conf import settings
from pydantic import ValidationError

from analyzers.config_store import load_proxy_config
from analyzers.proxy_config import ProxyConfig
from audits.api.asgi_body import Disconnected, Receive, Send, read_body
from audits.api.proxy import fields
from audits.api.proxy.relay import CleanRelay, LineSplitter, ObserveRelay, Recorder
from audits.api.proxy.texts import AuditedText
from audits.api.proxy.upstream import (
    ProxyFailure,
    Upstream,
    error_body,
    read_capped,
    timed_chunks,
    upstream_error,
    upstream_errors,
)
from audits.intake.schemas import AuditIn
from audits.intake.stream import StreamError, StreamSession, authenticate, bearer_token

logger = logging.getLogger(__name__)


CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
PATHS = (CHAT_PATH, CHAT_PATH + "/", MODELS_PATH, MODELS_PATH + "/")
EXTENSION_KEYS = {"sources", "external_id", "collision_key", "options", "metadata"}


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _answer(
    send: Send,
    status: int,
    body: bytes,
    headers: Sequence[tuple[bytes, bytes]] = (),
    content_type: bytes = b"application/json",
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _failure(
    send: Send, exc: ProxyFailure | StreamError, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    if isinstance(exc, StreamError):
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        kind = "invalid_request_error" if exc.status in (400, 409, 413, 422) else "auditor_error"
        exc = ProxyFailure(exc.status, detail, type_=kind)
        if exc.status == 401:
            headers = [*headers, (b"www-authenticate", b"Bearer")]
    await _answer(send, exc.status, exc.body, [*headers, *exc.headers])


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def parse_request(raw: bytes) -> tuple[dict[str, Any], AuditIn]:
    """(the body to forward, the audit head) or StreamError."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise StreamError(400, "the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise StreamError(400, "the body must be a JSON object")
    messages = body.get("messages")
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) for m in messages)
    ):
        raise StreamError(400, "messages must be a non-empty list of objects")
    extension = body.pop("auditor", None)
    if extension is None:
        extension = {}
    if not isinstance(extension, dict):
        raise StreamError(422, "auditor must be an object")
    unknown = set(extension) - EXTENSION_KEYS
    if unknown:
        raise StreamError(
            422, f"auditor: unknown keys {sorted(unknown)}; allowed: {sorted(EXTENSION_KEYS)}"
        )
    user = [m for m in messages if m.get("role") == "user"]
    metadata = extension.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise StreamError(422, "auditor.metadata must be an object")
    metadata = {
        **metadata,
        "proxy": {
            "model": body.get("model"),
            "messages": messages,
            "stream": bool(body.get("stream")),
        },
    }
    try:
        head = AuditIn.model_validate(
            {
                "user_input": _text(user[-1].get("content")) if user else "",
                "response": "",
                "sources": extension.get("sources") or [],
                "metadata": metadata,
                "external_id": extension.get("external_id"),
                "collision_key": extension.get("collision_key"),
                "options": extension.get("options") or {},
            }
        )
    except ValidationError as exc:
        errors = [{"loc": ["auditor", *map(str, e["loc"])], "msg": e["msg"]} for e in exc.errors()]
        raise StreamError(422, errors) from None
    return body, head


async def proxy_endpoint(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    path = scope["path"].rstrip("/")
    headers = scope.get("headers", [])
    method = scope["method"]
    if (path, method) not in ((CHAT_PATH, "POST"), (MODELS_PATH, "GET")):
        allowed = "POST" if path == CHAT_PATH else "GET"
        await _answer(
            send,
            405,
            error_body(f"use {allowed}", "invalid_request_error"),
            [(b"allow", allowed.encode())],
        )
        return
    try:
        api_key = await authenticate(bearer_token(headers))
        config = await database_sync_to_async(load_proxy_config)()
        upstream = Upstream(config)
        if path == MODELS_PATH:
            await _models(upstream, send)
            return
        raw = await read_body(receive, settings.AUDITOR_MAX_BODY_BYTES)
        body, head = parse_request(raw)
        if config.mode == "clean" and body.get("n") not in (None, 1):
            raise StreamError(400, "n > 1 is not supported in clean mode")
        session = await StreamSession.open(api_key=api_key, head=head)
        session.split_long = True  # hold at most one paragraph + max_chars per stream
    except (StreamError, ProxyFailure) as exc:
        await _failure(send, exc)
        return
    except Disconnected:
        return
    call = ChatCall(
        send,
        session,
        upstream,
        body,
        config=config,
        trace=_header(headers, b"x-auditor-trace") == "1",
    )
    await call.run(receive)


async def _models(upstream: Upstream, send: Send) -> None:
    """The model ids the upstream lists (fields.models), or our own error."""
    response = await upstream.send("GET", "/models")
    if not 200 <= response.status_code < 300:
        await response.aclose()
        raise upstream_error(response.status_code, response.headers)
    raw = await read_capped(response, settings.AUDITOR_MAX_BODY_BYTES)
    try:
        data = json.loads(raw)
    except ValueError:
        raise ProxyFailure(502, "the upstream's model list is not JSON") from None
    await _answer(send, 200, json.dumps(fields.models(data)).encode())


class ChatCall:
    """One proxied completion: the upstream call, the answer, the audit stored at the end."""

    def __init__(
        self,
        send: Send,
        session: StreamSession,
        upstream: Upstream,
        body: dict[str, Any],
        *,
        config: ProxyConfig,
        trace: bool,
    ) -> None:
        self.send, self.session, self.upstream, self.body = send, session, upstream, body
        self.mode, self.trace, self.config = config.mode, trace, config
        self.text = AuditedText(session, extra_text=config.extra_text)
        self.deadline = asyncio.get_running_loop().time() + settings.AUDITOR_STREAM_MAX_S
        self.stream = bool(body.get("stream"))
        self.recorder = Recorder()
        self.started = False
        self.delivered = False  # the client was sent the answer's end (`[DONE]`, its body)
        self.complete = False
        self.refused: str | None = None
        self.id_header = (b"x-auditor-audit-id", session.audit_id.encode())

    async def run(self, receive: Receive) -> None:
        work = asyncio.create_task(self.answer())
        gone = asyncio.create_task(_disconnect(receive))
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        # A client that leaves once it was sent the answer's end (the SDKs close at `[DONE]`)
        # cut nothing: the rest is local (the last lines' audit, the final send).
        if not work.done() and not self.delivered:  # it left mid-answer: cancel upstream
            work.cancel()
            self.complete = False
        with contextlib.suppress(asyncio.CancelledError):
            await work
        gone.cancel()
        with contextlib.suppress(Exception):
            await self.session.annotate(
                metadata={
                    "proxy": {
                        **(await self._metadata()),
                        **self.recorder.metadata(),
                        "mode": self.mode,
                    }
                },
                external_id=self.recorder.completion_id,
            )
        if self.refused:
            await self.session.refuse(self.refused)
        else:
            await self.session.close(complete=self.complete)

    async def _metadata(self) -> dict[str, Any]:
        data = {
            "model": self.body.get("model"),
            "messages": self.body.get("messages"),
            "stream": self.stream,
        }
        if self.mode == "clean":
            data["text_fields"] = {"audited": self.text.fields, "dropped": self.text.dropped}
        return data

    async def answer(self) -> None:
        try:
            if self.stream:
                await self.answer_stream()
            else:
                await self.answer_whole()
        except (ProxyFailure, StreamError) as exc:
            # Nothing arrived (upstream error): stored failed with the reason. Over the size
            # limit: failed too, never audited cut. Broken off mid-stream: stored incomplete.
            if not self.started or exc.status == 413:
                self.refused = f"{exc.status}: {getattr(exc, 'detail', exc)}"
            self.complete = False
            if not self.started:
                await _failure(self.send, exc, [self.id_header])
            else:
                await self._error_frame(exc)
        except Exception:
            logger.exception("proxy call %s failed", self.session.audit_id)
            self.refused = "proxy error"
            if not self.started:
                await _failure(self.send, ProxyFailure(502, "the proxy failed"), [self.id_header])

    async def _open(self, accept: str) -> httpx.Response:
        payload = json.dumps(self.body).encode()
        response = await self.upstream.send("POST", "/chat/completions", payload, accept=accept)
        if not 200 <= response.status_code < 300:  # its body is never read nor relayed
            await response.aclose()
            raise upstream_error(response.status_code, response.headers)
        return response

    async def answer_whole(self) -> None:
        response = await self._open("application/json")
        raw = await read_capped(response, settings.AUDITOR_MAX_BODY_BYTES, self.deadline)
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            raise ProxyFailure(502, "the upstream answer is not a chat completion")
        kind = b"application/json"
        if self.mode == "clean":
            raw = json.dumps(await self._cleaned(data), ensure_ascii=False).encode()
        else:  # observe: the bytes as they came, the content audited on the side
            self.recorder.note(data)
            kind = response.headers.get("content-type", "application/json").encode("latin-1")
            choice = fields.first_choice(data, "message")
            content = choice["message"].get("content") if choice else None
            if isinstance(content, str) and content:
                await self.session.feed(content)
                await self.session.end_text()
        self.complete = True
        self.started = self.delivered = True
        await _answer(self.send, 200, raw, [self.id_header], content_type=kind)

    def _fallback_model(self) -> str:
        return fields.identifier(self.body.get("model")) or "unknown"

    async def _cleaned(self, data: dict[str, Any]) -> dict[str, Any]:
        """A whole completion cut to the allow-list, its text fields audited (a list of
        content parts part by part, its other parts dropped)."""
        shaped = fields.envelope(
            data,
            fallback_id=f"chatcmpl-{self.session.audit_id}",
            fallback_model=self._fallback_model(),
            kind="chat.completion",
        )
        choice = fields.first_choice(data, "message")
        if choice is None:
            self.recorder.note({**shaped, "choices": []})
            return {**shaped, "choices": []}
        message, texts = fields.message(choice["message"], whole=True)
        pieces = []
        for name, value in texts.items():
            parts = fields.text_parts(value)
            if parts is None and isinstance(value, str):
                pieces += await self.text.feed(name, value)
            for i, part in enumerate(parts or []):
                pieces += await self.text.feed(f"{name}.{i}", part)
        pieces += await self.text.end()
        cleaned: dict[str, str] = {}
        for key, (event, item) in pieces:
            if event == "chunk":
                cleaned[key] = cleaned.get(key, "") + item["text"]
        for name, value in texts.items():
            if name in self.text.dropped:
                continue
            parts = fields.text_parts(value)
            if parts is not None:
                message[name] = [
                    {"type": "text", "text": cleaned.get(f"{name}.{i}", "")}
                    for i in range(len(parts))
                ]
            elif isinstance(value, str):
                message[name] = cleaned.get(name, "")
        message = {"role": "assistant", "content": None, **message}
        choices = [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": fields.finish_reason(choice.get("finish_reason")) or "stop",
            }
        ]
        self.recorder.note({**shaped, "choices": choices})
        return {**shaped, "choices": choices}

    async def answer_stream(self) -> None:
        response = await self._open("text/event-stream")
        try:
            with upstream_errors("the upstream stopped sending", "the upstream stream broke off"):
                await self.send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-type", b"text/event-stream; charset=utf-8"),
                            (b"cache-control", b"no-cache"),
                            (b"x-accel-buffering", b"no"),
                            self.id_header,
                        ],
                    }
                )
                self.started = True
                if self.mode == "observe":
                    await self._observe(response)
                else:
                    await self._clean(response)
        finally:
            await response.aclose()
        self.delivered = True
        await self.send({"type": "http.response.body", "body": b""})

    async def _clean(self, response: httpx.Response) -> None:
        relay = CleanRelay(
            self.session,
            trace=self.trace,
            fallback_model=self._fallback_model(),
            text=self.text,
            max_held_bytes=self.config.max_held_bytes,
        )
        self.recorder = relay.recorder
        splitter = LineSplitter()
        async for data in timed_chunks(response, self.deadline):
            out: list[bytes] = []
            for line in splitter.feed(data):
                out += await relay.line(line)
            await self._body(out)
            if relay.failed:  # the upstream reported an error: ours was sent, the rest ignored
                self.complete = False
                return
        out = []
        for line in splitter.end():
            out += await relay.line(line)
        if not relay.done:
            out += await relay.end()
        await self._body(out)
        self.complete = relay.done or self.recorder.finish_reason is not None

    async def _observe(self, response: httpx.Response) -> None:
        relay = ObserveRelay(self.session)
        self.recorder = relay.recorder
        splitter = LineSplitter()
        auditing = True
        async for data in timed_chunks(response, self.deadline):
            await self._body([data])
            lines = splitter.feed(data)
            if not auditing:
                continue
            try:
                for line in lines:
                    await relay.line(line)
            except StreamError as exc:  # over the size limit: the client still gets it all
                auditing, self.refused = False, str(exc.detail)
        if auditing:
            for line in splitter.end():
                await relay.line(line)
        self.complete = relay.done or self.recorder.finish_reason is not None

    async def _body(self, frames: list[bytes]) -> None:
        if frames:
            body = b"".join(frames)
            self.delivered = self.delivered or b"data: [DONE]" in body
            await self.send({"type": "http.response.body", "body": body, "more_body": True})

    async def _error_frame(self, exc: ProxyFailure | StreamError) -> None:
        if isinstance(exc, StreamError):
            exc = ProxyFailure(exc.status, str(exc.detail), type_="auditor_error")
        with contextlib.suppress(Exception):
            await self.send(
                {
                    "type": "http.response.body",
                    "body": b"data: " + exc.body + b"\n\n",
                    "more_body": False,
                }
            )


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
