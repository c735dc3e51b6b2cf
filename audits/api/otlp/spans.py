"""OTLP spans -> audits: which spans are LLM calls and what they said (no Django here).

Recognised conventions:
- OpenTelemetry GenAI: `gen_ai.operation.name` chat / text_completion / generate_content;
  messages in `gen_ai.input.messages` / `gen_ai.output.messages` (on the span or on a
  `gen_ai.client.inference.operation.details` event), or in the older per-message events
  (`gen_ai.user.message`, ..., `gen_ai.choice`; `gen_ai.content.prompt/completion`), or
  OpenLLMetry's indexed `gen_ai.prompt.N.*` / `gen_ai.completion.N.*` attributes;
- OpenInference: `openinference.span.kind` LLM, `llm.input_messages.*`,
  `llm.output_messages.*`, else `input.value` / `output.value`.
Retrieval spans (OpenInference RETRIEVER, GenAI `retrieval`) give the sources of the LLM
spans of the same trace (`traces.py` joins them across requests).
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
# The conversation as flat span attributes (the older convention, and OpenLLMetry's indexed
# form): an LLM span even without gen_ai.operation.name.
FLAT_CONTENT = (
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.prompt.0.content",
    "gen_ai.completion.0.content",
)
STATUS_ERROR = 2  # Status.StatusCode.STATUS_CODE_ERROR

# Attributes that carry the conversation itself: in the audit's text, not its metadata.
_CONTENT_KEYS = re.compile(
    r"^(input\.value|output\.value|llm\.input_messages\..*|llm\.output_messages\..*"
    r"|llm\.prompts?\..*|gen_ai\.(input|output)\.messages|gen_ai\.system_instructions"
    r"|gen_ai\.(prompt|completion)(\..*)?|retrieval\.documents\..*|gen_ai\.retrieval\..*)$"
)
_INDEXED = re.compile(r"^(?P<prefix>.+?)\.(?P<index>\d+)\.(?P<rest>.+)$")


@dataclass(frozen=True)
class Limits:
    max_text_chars: int = 200_000  # input or response of one span; more: the span is rejected
    max_sources: int = 20
    max_source_spans: int = 50  # retrieval spans joined to one LLM span
    max_source_chars: int = 20_000
    max_metadata_attributes: int = 64
    max_attribute_chars: int = 1_000
    max_depth: int = 8


class MalformedSpan(ValueError):
    """A span that claims to be an LLM call but cannot be audited (why in the message)."""


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    status_code: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    resource: dict[str, Any]
    scope: str

    @property
    def service_name(self) -> str | None:
        value = self.resource.get("service.name")
        return str(value) if value is not None else None


@dataclass
class LLMCall:
    """What one LLM span becomes: the arguments of `submit_audit`."""

    external_id: str
    user_input: str
    response: str
    metadata: dict[str, Any]
    sources: list[dict[str, Any]] = field(default_factory=list)


# --- OTLP messages to plain values -------------------------------------------------------


def any_value(value: Any, depth: int = 0) -> Any:
    """An OTLP AnyValue as a plain Python value (bytes as base64, nesting bounded)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    if kind in ("array_value", "kvlist_value") and depth >= Limits.max_depth:
        raise MalformedSpan("attribute values are nested too deeply")
    if kind == "array_value":
        return [any_value(v, depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def attributes(key_values) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in key_values}


def iter_spans(request):
    """(Span | None, error) for every span of an ExportTraceServiceRequest, in order."""
    for resource_spans in request.resource_spans:
        try:
            resource = attributes(resource_spans.resource.attributes)
        except MalformedSpan as exc:
            for scope_spans in resource_spans.scope_spans:
                for _ in scope_spans.spans:
                    yield None, f"resource: {exc}"
            continue
        for scope_spans in resource_spans.scope_spans:
            for raw in scope_spans.spans:
                try:
                    yield _span(raw, resource, scope_spans.scope.name), None
                except MalformedSpan as exc:
                    yield None, str(exc)


def _span(raw, resource: dict[str, Any], scope: str) -> Span:
    if len(raw.trace_id) != 16 or not any(raw.trace_id):
        raise MalformedSpan("invalid trace id (16 bytes, not all zero)")
    if len(raw.span_id) != 8 or not any(raw.span_id):
        raise MalformedSpan("invalid span id (8 bytes, not all zero)")
    return Span(
        trace_id=raw.trace_id.hex(),
        span_id=raw.span_id.hex(),
        parent_span_id=raw.parent_span_id.hex(),
        name=raw.name,
        start_ns=raw.start_time_unix_nano,
        end_ns=raw.end_time_unix_nano,
        status_code=raw.status.code,
        attributes=attributes(raw.attributes),
        events=[(e.name, attributes(e.attributes)) for e in raw.events],
        resource=resource,
        scope=scope,
    )


# --- classification ----------------------------------------------------------------------


def kind_of(span: Span) -> str:
    """ "llm", "retrieval" or "other"."""
    attrs = span.attributes
    oi_kind = str(attrs.get("openinference.span.kind", "")).upper()
    operation = str(attrs.get("gen_ai.operation.name", "")).lower()
    if oi_kind == "LLM" or operation in LLM_OPERATIONS:
        return "llm"
    if oi_kind == "RETRIEVER" or operation == "retrieval":
        return "retrieval"
    if not oi_kind and not operation and any(key in attrs for key in FLAT_CONTENT):
        return "llm"  # OpenLLMetry (Traceloop) and others before gen_ai.operation.name
    return "other"


# --- messages ----------------------------------------------------------------------------


NOT_JSON = object()


def _loads(text: str, what: str) -> Any:
    """json.loads, NOT_JSON for text that is not JSON; MalformedSpan past the interpreter's
    nesting limit (json recurses): a deeply nested payload costs one failed parse."""
    try:
        return json.loads(text)
    except RecursionError:
        raise MalformedSpan(f"{what} is nested too deeply") from None
    except ValueError:
        return NOT_JSON


def _json(value: Any, what: str) -> Any:
    if not isinstance(value, str):
        return value
    data = _loads(value, what)
    if data is NOT_JSON:
        raise MalformedSpan(f"{what} is not valid JSON")
    return data


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, GenAI parts or OpenAI content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") in ("text", "output_text"):
                text = part.get("content", part.get("text"))
                if isinstance(text, str):
                    texts.append(text)
        return "\n".join(texts)
    return str(content)


def _messages(value: Any, what: str) -> list[tuple[str, str]]:
    """[(role, text)] from GenAI messages ({role, parts}) or chat messages ({role, content})."""
    data = _json(value, what)
    if isinstance(data, dict):
        data = data.get("messages", [data])
    if not isinstance(data, list):
        raise MalformedSpan(f"{what} is not a list of messages")
    out = []
    for message in data:
        if isinstance(message, str):
            out.append(("user", message))
        elif isinstance(message, dict):
            if "message" in message and isinstance(message["message"], dict):
                message = message["message"]  # gen_ai.choice: {index, message: {...}}
            content = message.get("parts", message.get("content"))
            out.append((str(message.get("role") or ""), _text_of(content)))
        else:
            raise MalformedSpan(f"{what} holds a message that is not an object")
    return out


def _indexed(attrs: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """`prefix.N.rest` attributes grouped by N (OpenInference and OpenLLMetry lists)."""
    groups: dict[int, dict[str, Any]] = {}
    start = prefix + "."
    for key, value in attrs.items():
        if not key.startswith(start):
            continue
        match = _INDEXED.match(key)
        if match and match["prefix"] == prefix:
            groups.setdefault(int(match["index"]), {})[match["rest"]] = value
    return dict(sorted(groups.items()))


def _openinference_messages(attrs: dict[str, Any], prefix: str) -> list[tuple[str, str]]:
    out = []
    for fields in _indexed(attrs, prefix).values():
        text = fields.get("message.content")
        if text is None:
            parts = _indexed(fields, "message.contents")
            text = "\n".join(
                str(p.get("message_content.text", ""))
                for p in parts.values()
                if p.get("message_content.type", "text") == "text"
            )
        out.append((str(fields.get("message.role", "")), str(text or "")))
    return out


def _value_messages(value: Any, mime: Any, output: bool) -> list[tuple[str, str]]:
    """`input.value` / `output.value`: an OpenAI body when JSON, else the text itself."""
    if value is None:
        return []
    if str(mime or "").lower() == "application/json" and isinstance(value, str):
        data = _loads(value, "output.value" if output else "input.value")
        if isinstance(data, dict):
            if output and isinstance(data.get("choices"), list) and data["choices"]:
                choice = data["choices"][0]
                if isinstance(choice, dict):
                    message = choice.get("message") or {}
                    return [("assistant", _text_of(message.get("content", choice.get("text"))))]
            if not output and isinstance(data.get("messages"), list):
                return _messages(data["messages"], "input.value")
    return [("assistant" if output else "user", str(value))]


def _event_messages(span: Span) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    inputs: list[tuple[str, str]] = []
    outputs: list[tuple[str, str]] = []
    for name, attrs in span.events:
        if name == DETAILS_EVENT:
            if "gen_ai.input.messages" in attrs:
                inputs += _messages(attrs["gen_ai.input.messages"], "gen_ai.input.messages")
            if "gen_ai.output.messages" in attrs:
                outputs += _messages(attrs["gen_ai.output.messages"], "gen_ai.output.messages")
        elif name in MESSAGE_EVENTS:
            content = attrs.get("content", attrs.get("gen_ai.event.content"))
            inputs.append((MESSAGE_EVENTS[name], _text_of(_maybe_json(content, name))))
        elif name == "gen_ai.choice":
            message = attrs.get("message", attrs.get("gen_ai.event.content"))
            if message is not None:
                outputs += _messages([_json(message, "gen_ai.choice message")], "gen_ai.choice")
            else:
                outputs.append(
                    ("assistant", _text_of(attrs.get("message.content", attrs.get("content"))))
                )
        elif name == "gen_ai.content.prompt" and "gen_ai.prompt" in attrs:
            inputs += _flat_messages(attrs, "gen_ai.prompt", "user")
        elif name == "gen_ai.content.completion" and "gen_ai.completion" in attrs:
            outputs += _flat_messages(attrs, "gen_ai.completion", "assistant")
    return inputs, outputs


def _flat_messages(attrs: dict[str, Any], key: str, role: str) -> list[tuple[str, str]]:
    """`gen_ai.prompt` / `gen_ai.completion` (an event's or the span's): the text itself, or
    the messages as JSON."""
    value = _maybe_json(attrs[key], key)
    if isinstance(value, str):
        return [(role, value)]
    return _messages(value, key)


def _maybe_json(value: Any, what: str) -> Any:
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        data = _loads(value, what)
        return value if data is NOT_JSON else data
    return value


def conversation(span: Span) -> tuple[str, list[tuple[str, str]], list[tuple[str, str]]]:
    """(convention, input messages, output messages) of an LLM span."""
    attrs = span.attributes
    if str(attrs.get("openinference.span.kind", "")).upper() == "LLM":
        inputs = _openinference_messages(attrs, "llm.input_messages") or _value_messages(
            attrs.get("input.value"), attrs.get("input.mime_type"), output=False
        )
        outputs = _openinference_messages(attrs, "llm.output_messages") or _value_messages(
            attrs.get("output.value"), attrs.get("output.mime_type"), output=True
        )
        return "openinference", inputs, outputs
    inputs, outputs = [], []
    if "gen_ai.input.messages" in attrs:
        inputs = _messages(attrs["gen_ai.input.messages"], "gen_ai.input.messages")
    if "gen_ai.output.messages" in attrs:
        outputs = _messages(attrs["gen_ai.output.messages"], "gen_ai.output.messages")
    event_inputs, event_outputs = _event_messages(span)
    inputs, outputs = inputs or event_inputs, outputs or event_outputs
    if not inputs and not outputs:
        inputs = [
            (str(f.get("role", "")), _text_of(f.get("content")))
            for f in _indexed(attrs, "gen_ai.prompt").values()
        ]
        outputs = [
            (str(f.get("role", "assistant")), _text_of(f.get("content")))
            for f in _indexed(attrs, "gen_ai.completion").values()
        ]
    if not inputs and "gen_ai.prompt" in attrs:  # the flat attributes of older instrumentations
        inputs = _flat_messages(attrs, "gen_ai.prompt", "user")
    if not outputs and "gen_ai.completion" in attrs:
        outputs = _flat_messages(attrs, "gen_ai.completion", "assistant")
    return "genai", inputs, outputs


# --- retrieval ---------------------------------------------------------------------------


def _http_url(value: Any) -> str | None:
    text = str(value or "")
    return text if re.match(r"^https?://[^\s]+$", text, re.IGNORECASE) else None


def documents(span: Span, limits: Limits) -> list[dict[str, Any]]:
    """Sources (docs/reference/contract.md) from a retrieval span's documents."""
    attrs = span.attributes
    docs: list[dict[str, Any]] = []
    for fields in _indexed(attrs, "retrieval.documents").values():
        meta = _maybe_json(fields.get("document.metadata"), "document.metadata")
        docs.append(
            {
                "id": fields.get("document.id"),
                "content": fields.get("document.content"),
                "metadata": meta if isinstance(meta, dict) else {},
            }
        )
    if "gen_ai.retrieval.documents" in attrs:
        data = _json(attrs["gen_ai.retrieval.documents"], "gen_ai.retrieval.documents")
        if not isinstance(data, list):
            raise MalformedSpan("gen_ai.retrieval.documents is not a list")
        for doc in data:
            if isinstance(doc, dict):
                meta = doc.get("metadata")
                if not isinstance(meta, dict):
                    meta = {}
                docs.append(
                    {
                        "id": doc.get("id"),
                        "metadata": {**doc, **meta},
                        "content": doc.get("content", doc.get("text")),
                    }
                )
    sources = []
    for doc in docs:
        meta = doc["metadata"]
        text = _text_of(doc["content"])[: limits.max_source_chars]
        title = meta.get("title") or meta.get("name") or doc["id"] or span.name
        sources.append(
            {
                "title": str(title)[:500],
                "url": _http_url(meta.get("url") or meta.get("uri") or meta.get("source")),
                "text": text,
                "company": str(meta["company"])[:200] if meta.get("company") else None,
            }
        )
    return sources


# --- LLM spans to audits -----------------------------------------------------------------


def _first(attrs: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if attrs.get(key) not in (None, ""):
            return attrs[key]
    return None


INT64_MAX = 2**63 - 1


def _count(value: Any) -> int | None:
    """A token count: a non-negative int64 from an int, float or numeric string; None for
    anything else (NaN, Infinity, "1e999", negative, larger than int64)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if not isinstance(value, int):
        try:
            number = float(value)
        except ValueError:
            return None
        if not math.isfinite(number):
            return None
        value = int(number)
    return value if 0 <= value <= INT64_MAX else None


def _safe(value: Any) -> Any:
    """A metadata value storable as JSON text anywhere: NaN and Infinity as strings ("NaN",
    "Infinity", "-Infinity"), NUL characters as U+FFFD (the rest of the span is kept)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_safe(k): _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    return value


def _bounded_attributes(attrs: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """Span attributes for the metadata, without the conversation, each value bounded."""
    out: dict[str, Any] = {}
    for key in sorted(attrs):
        if _CONTENT_KEYS.match(key):
            continue
        if len(out) >= limits.max_metadata_attributes:
            out["_truncated"] = True
            break
        value = attrs[key]
        if not isinstance(value, bool | int | float) or value is None:
            value = value if isinstance(value, str) else json.dumps(value, default=str)
            value = value[: limits.max_attribute_chars]
        out[key[:200]] = value
    return out


def llm_call(span: Span, retrieved: list[Retrieved], limits: Limits) -> LLMCall | None:
    """The audit of one LLM span, its sources the documents of `retrieved` (the retrieval
    spans of its trace); None for a failed call with no answer (nothing to audit).

    MalformedSpan when the span cannot be audited (its conversation is unreadable, missing
    or too long)."""
    convention, inputs, outputs = conversation(span)
    if not outputs:
        if span.status_code == STATUS_ERROR:
            return None
        raise MalformedSpan(
            "LLM span without its output messages: capture message content in the "
            "instrumentation (e.g. OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)"
        )
    users = [text for role, text in inputs if role == "user"]
    user_input = users[-1] if users else "\n".join(text for _, text in inputs)
    answers = [text for role, text in outputs if role in ("assistant", "", "model")]
    response = answers[0] if answers else outputs[0][1]
    if len(user_input) > limits.max_text_chars or len(response) > limits.max_text_chars:
        raise MalformedSpan(f"input or output longer than {limits.max_text_chars} characters")
    attrs = span.attributes
    input_tokens = _count(
        _first(
            attrs,
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.prompt_tokens",
            "llm.token_count.prompt",
        )
    )
    output_tokens = _count(
        _first(
            attrs,
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
        )
    )
    total_tokens = _count(_first(attrs, "llm.token_count.total", "llm.usage.total_tokens"))
    if total_tokens is None and input_tokens is not None and output_tokens is not None:
        total_tokens = _count(input_tokens + output_tokens)
    metadata: dict[str, Any] = {
        "source": "otlp",
        "convention": convention,
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id or None,
        "span_name": span.name[:200],
        "service_name": (span.service_name or "")[:200] or None,
        "model": _str(
            _first(attrs, "gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
        ),
        "provider": _str(
            _first(attrs, "gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
        ),
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": total_tokens,
        "attributes": _bounded_attributes(attrs, limits),
    }
    sources, source_spans = joined(retrieved, limits)
    if source_spans:
        metadata["source_spans"] = source_spans  # which retrievals were joined (late ones too)
    return LLMCall(
        external_id=f"{span.trace_id}:{span.span_id}",
        user_input=user_input,
        response=response,
        metadata=_safe(metadata),
        sources=sources,
    )


def _str(value: Any) -> str | None:
    return None if value is None else str(value)[:200]


@dataclass
class Retrieved:
    """The documents of one retrieval span (the contract's Sources), by trace."""

    trace_id: str
    span_id: str
    start_ns: int
    sources: list[dict[str, Any]]


def retrievals(spans: list[Span], limits: Limits) -> tuple[list[Retrieved], list[tuple]]:
    """The documents of each retrieval span, and (span, error) for unreadable ones."""
    found, errors = [], []
    for span in spans:
        try:
            docs = documents(span, limits)
        except MalformedSpan as exc:
            errors.append((span, str(exc)))
            continue
        found.append(
            Retrieved(span.trace_id, span.span_id, span.start_ns, docs[: limits.max_sources])
        )
    return found, errors


def joined(retrieved: list[Retrieved], limits: Limits) -> tuple[list[dict], list[str]]:
    """(sources, retrieval span ids) of one trace: documents in the order the retrievals
    started, one retrieval span counted once; it stops at `max_sources` documents or
    `max_source_spans` retrieval spans (their ids are kept in the audit's metadata)."""
    sources: list[dict[str, Any]] = []
    span_ids: list[str] = []
    for item in sorted(retrieved, key=lambda r: (r.start_ns, r.span_id)):
        if len(sources) >= limits.max_sources or len(span_ids) >= limits.max_source_spans:
            break
        if item.span_id in span_ids:
            continue
        span_ids.append(item.span_id)
        sources.extend(item.sources[: max(0, limits.max_sources - len(sources))])
    return sources, span_ids
