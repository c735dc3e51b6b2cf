"""Upstream chat-completion chunks in, what the client receives out.

`CleanRelay` (mode `clean`): each chunk is cut to the allow-list (fields.py). Its text
fields (`content`; `refusal` and reasoning text unless `extra_text: "drop"`) go to the
stream session (the engine's InlineStreamAuditor) and leave only as the audited, cleaned
text of whole paragraphs, in chunks shaped like the upstream's. What carries no text (the
role, tool-call deltas, `finish_reason`, usage) passes in order: at once when no unaudited
text is held, else right after the text before it is audited; at most `max_held_bytes` are
held (past that the held paragraph is ended and audited). A `finish_reason` ends the text:
the last paragraph is audited before it. An upstream error event becomes our own.
`[AUDIT]` trace lines go out as SSE comments when the client asked for them.

`ObserveRelay` (mode `observe`): the upstream bytes pass unchanged; the content is audited
on the side.
"""

from __future__ import annotations

import json
from typing import Any

from audits.api.proxy import fields
from audits.api.proxy.texts import AuditedText, Piece
from audits.api.proxy.upstream import ProxyFailure, error_body
from audits.intake.stream import StreamSession

MAX_LINE_BYTES = 4_000_000  # one SSE line (one chunk); the response size is capped separately
MAX_TOOL_ARGUMENT_CHARS = 20_000  # per tool call, kept for the audit's metadata
UPSTREAM_STREAM_ERROR = error_body(
    "the upstream reported an error mid-stream", "upstream_error", "upstream_error"
)


def sse_data(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


class LineSplitter:
    """Bytes in, complete lines out (without the line end), each at most MAX_LINE_BYTES."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        if len(self.buffer) > MAX_LINE_BYTES:
            raise ProxyFailure(502, "the upstream sent an over-long line")
        return [line.rstrip(b"\r") for line in lines]

    def end(self) -> list[bytes]:
        line, self.buffer = self.buffer, b""
        return [line.rstrip(b"\r"), b""] if line else [b""]


class Recorder:
    """What the audit's metadata keeps of the answer: id, model, usage, finish, tool calls."""

    def __init__(self) -> None:
        self.completion_id: str | None = None
        self.model: str | None = None
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.envelope: dict[str, Any] = {}

    def note(self, chunk: dict[str, Any]) -> None:
        if isinstance(chunk.get("id"), str):
            self.completion_id = chunk["id"]
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        self.envelope = {
            k: chunk[k] for k in ("id", "created", "model", "system_fingerprint") if k in chunk
        }
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or choice.get("message") or {}
            for call in (delta.get("tool_calls") or []) if isinstance(delta, dict) else []:
                self._note_call(call)

    def _note_call(self, call: Any) -> None:
        if not isinstance(call, dict):
            return
        index = call.get("index", len(self.tool_calls))
        if not isinstance(index, int) or (
            index not in self.tool_calls and len(self.tool_calls) >= 64
        ):
            return
        kept = self.tool_calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
        if isinstance(call.get("id"), str):
            kept["id"] = call["id"]
        function = call.get("function") or {}
        if isinstance(function.get("name"), str):
            kept["name"] += function["name"]
        if isinstance(function.get("arguments"), str):
            room = MAX_TOOL_ARGUMENT_CHARS - len(kept["arguments"])
            kept["arguments"] += function["arguments"][: max(room, 0)]

    def metadata(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "completion_id": self.completion_id,
            "model": self.model,
            "finish_reason": self.finish_reason,
        }
        if self.usage is not None:
            data["usage"] = self.usage
        if self.tool_calls:
            data["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return data


def content_of(choice: dict[str, Any], key: str) -> str | None:
    value = (choice.get(key) or {}).get("content") if isinstance(choice.get(key), dict) else None
    return value if isinstance(value, str) else None


class SSEEvents:
    """SSE lines in, the `data` of each event out (b"[DONE]" or JSON bytes), each at most
    MAX_LINE_BYTES."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.size = 0

    def line(self, line: bytes) -> bytes | None:
        if not line:
            if not self.data:
                return None
            data, self.data, self.size = b"\n".join(self.data), [], 0
            return data
        if line.startswith(b"data:"):
            value = line[5:]
            self.size += len(value)
            if self.size > MAX_LINE_BYTES:
                raise ProxyFailure(502, "the upstream sent an over-long event")
            self.data.append(value[1:] if value.startswith(b" ") else value)
        return None


class CleanRelay:
    """Mode `clean`: only what the allow-list (fields.py) keeps, the text only audited."""

    def __init__(
        self,
        session: StreamSession,
        *,
        trace: bool,
        fallback_model: str,
        text: AuditedText,
        max_held_bytes: int = 1_000_000,
    ) -> None:
        self.session, self.trace, self.text = session, trace, text
        self.recorder = Recorder()
        self.events = SSEEvents()
        self.held: list[bytes] = []
        self.held_bytes = 0
        self.max_held_bytes = max_held_bytes
        self.envelope: dict[str, Any] = {
            "id": f"chatcmpl-{session.audit_id}",
            "created": 0,
            "model": fallback_model,
        }
        self.done = False
        self.failed = False  # the upstream sent an error event: the rest is ignored

    async def line(self, line: bytes) -> list[bytes]:
        data = self.events.line(line)
        return [] if data is None or self.failed else await self.event(data)

    async def event(self, data: bytes) -> list[bytes]:
        if data.strip() == b"[DONE]":
            tail = await self.end()
            self.done = True
            return [*tail, b"data: [DONE]\n\n"]
        try:
            chunk = json.loads(data)
        except ValueError:
            return []  # nothing we cannot read reaches the client
        if not isinstance(chunk, dict):
            return []
        if "error" in chunk:  # its text is the upstream's: never relayed, never stored
            self.failed = True
            return [*await self.end(), b"data: " + UPSTREAM_STREAM_ERROR + b"\n\n"]
        shaped = fields.envelope(
            chunk,
            fallback_id=self.envelope["id"],
            fallback_model=self.envelope["model"],
            kind="chat.completion.chunk",
        )
        self.envelope = {
            k: shaped[k] for k in ("id", "created", "model", "system_fingerprint") if k in shaped
        }
        choice = fields.first_choice(chunk, "delta")
        out: list[bytes] = []
        delta: dict[str, Any] = {}
        finish = None
        if choice is not None:
            delta, texts = fields.message(choice["delta"], whole=False)
            finish = fields.finish_reason(choice.get("finish_reason"))
            for name, value in texts.items():
                parts = fields.text_parts(value)
                text = "".join(parts) if parts is not None else value
                if isinstance(text, str) and text:
                    out += self.frames(await self.text.feed(name, text))
        kept = [{"index": 0, "delta": delta, "finish_reason": finish}] if delta or finish else []
        self.recorder.note({**shaped, "choices": kept})
        if kept or "usage" in shaped:
            if finish:
                out += self.frames(await self.text.end())
            out += await self.hold_or_pass(sse_data({**shaped, "choices": kept}))
        elif not self.session.pending and self.held:
            out += self.release()
        return out

    async def hold_or_pass(self, frame: bytes) -> list[bytes]:
        """Pass `frame` now, or hold it behind unaudited text; past `max_held_bytes` held,
        that text is audited now (its paragraph ended) and the frames go."""
        if len(frame) > self.max_held_bytes:
            raise ProxyFailure(502, "the upstream sent an over-large chunk", type_="upstream_error")
        if not self.session.pending:
            return [*self.release(), frame]
        self.held.append(frame)
        self.held_bytes += len(frame)
        if self.held_bytes <= self.max_held_bytes:
            return []
        return [*self.frames(await self.text.boundary()), *self.release()]

    def release(self) -> list[bytes]:
        out, self.held, self.held_bytes = self.held, [], 0
        return out

    async def end(self) -> list[bytes]:
        """The upstream is done: audit what is left, then whatever was held behind it."""
        return [*self.frames(await self.text.end()), *self.release()]

    def frames(self, pieces: list[Piece]) -> list[bytes]:
        out = []
        for field, (name, data) in pieces:
            if name == "chunk":
                out.append(sse_data(self.text_chunk(field, data["text"])))
            elif name == "audit_trace" and self.trace:
                out.append(
                    b"".join(
                        b": " + line.encode() + b"\n" for line in data["text"].splitlines() or [""]
                    )
                )
        return out

    def text_chunk(self, field: str, text: str) -> dict[str, Any]:
        return {
            **self.envelope,
            "object": "chat.completion.chunk",
            "choices": [
                {"index": 0, "delta": {field: text}, "logprobs": None, "finish_reason": None}
            ],
        }


class ObserveRelay:
    """The bytes pass as they are; the content is audited on the side."""

    def __init__(self, session: StreamSession) -> None:
        self.session = session
        self.recorder = Recorder()
        self.events = SSEEvents()
        self.done = False

    async def line(self, line: bytes) -> None:
        data = self.events.line(line)
        if data is None:
            return
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            return
        if not isinstance(chunk, dict):
            return
        self.recorder.note(chunk)
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                text = content_of(choice, "delta")
                if text:
                    await self.session.feed(text)
