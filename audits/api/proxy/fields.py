"""The allow-list of what an upstream answer may hand our client (mode `clean`).

Only known OpenAI fields leave, each in its expected shape: the envelope (`id`, `object`,
`created`, `model`, `system_fingerprint`, `usage`), choice 0 (`index`, `delta`/`message`
with `role`, the text fields, `tool_calls`, `function_call`; `finish_reason`). Anything
else (unknown keys, a `message` or `text` inside a stream chunk, further choices,
`logprobs`, annotations) is dropped. The text fields (TEXT_FIELDS) are returned apart: they
leave only through the audit (relay.py). Identifiers that look like markup, a URL or a host
are replaced; tool-call arguments pass unchanged (the client's code reads them).
"""

from __future__ import annotations

import re
from typing import Any

# Audited in this order when one delta carries several (reasoning comes before the answer).
TEXT_FIELDS = ("reasoning_content", "reasoning", "content", "refusal")
EXTRA_TEXT_FIELDS = frozenset(TEXT_FIELDS) - {"content"}
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,199}", re.ASCII)
HOST_LIKE = re.compile(r"//|\.[A-Za-z]{2,}", re.ASCII)
TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}", re.ASCII)


def identifier(value: Any) -> str | None:
    """`value` when it is a plain identifier (a model or completion id), else None."""
    if isinstance(value, str) and IDENTIFIER.fullmatch(value) and not HOST_LIKE.search(value):
        return value
    return None


def numbers(value: Any, depth: int = 0) -> dict[str, Any] | None:
    """`usage`: numbers only, with one level of `*_details` objects."""
    if not isinstance(value, dict):
        return None
    kept: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not IDENTIFIER.fullmatch(key):
            continue
        if isinstance(item, int | float) and not isinstance(item, bool):
            kept[key] = item
        elif isinstance(item, dict) and depth == 0:
            kept[key] = numbers(item, 1) or {}
    return kept


def envelope(
    data: dict[str, Any], *, fallback_id: str, fallback_model: str, kind: str
) -> dict[str, Any]:
    created = data.get("created")
    shaped: dict[str, Any] = {
        "id": identifier(data.get("id")) or fallback_id,
        "object": kind,
        "created": created if isinstance(created, int) and not isinstance(created, bool) else 0,
        "model": identifier(data.get("model")) or fallback_model,
    }
    if "system_fingerprint" in data:
        shaped["system_fingerprint"] = identifier(data["system_fingerprint"])
    if (usage := numbers(data.get("usage"))) is not None:
        shaped["usage"] = usage
    return shaped


def first_choice(data: dict[str, Any], key: str) -> dict[str, Any] | None:
    """Choice 0 (the client asked for one: `n > 1` is refused in mode `clean`)."""
    choices = data.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return {**choice, key: choice.get(key) if isinstance(choice.get(key), dict) else {}}
    return None


def finish_reason(value: Any) -> str | None:
    if value is None:
        return None
    return value if value in FINISH_REASONS else "stop"


def _function(value: Any, *, whole: bool) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    function: dict[str, Any] = {}
    name = value.get("name")
    if isinstance(name, str) and TOOL_NAME.fullmatch(name):
        function["name"] = name
    elif whole:
        function["name"] = ""
    if isinstance(value.get("arguments"), str):
        function["arguments"] = value["arguments"]
    elif whole:
        function["arguments"] = ""
    return function


def tool_calls(value: Any, *, whole: bool) -> list[dict[str, Any]] | None:
    """Tool calls with their known keys; `whole`: a message's (every key present)."""
    if not isinstance(value, list):
        return None
    calls = []
    for position, call in enumerate(value[:128]):
        if not isinstance(call, dict):
            continue
        shaped: dict[str, Any] = {}
        index = call.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            shaped["index"] = index
        elif not whole:
            shaped["index"] = position
        if isinstance(call.get("id"), str) and TOOL_NAME.fullmatch(call["id"]):
            shaped["id"] = call["id"]
        if "type" in call or whole:
            shaped["type"] = "function"
        if (function := _function(call.get("function"), whole=whole)) is not None:
            shaped["function"] = function
        calls.append(shaped)
    return calls


def message(value: dict[str, Any], *, whole: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the known non-text keys of a delta or message, its text fields as sent)."""
    kept: dict[str, Any] = {}
    if value.get("role") == "assistant":
        kept["role"] = "assistant"
    if (calls := tool_calls(value.get("tool_calls"), whole=whole)) is not None:
        kept["tool_calls"] = calls
    if (call := _function(value.get("function_call"), whole=whole)) is not None:
        kept["function_call"] = call
    texts = {name: value[name] for name in TEXT_FIELDS if value.get(name) is not None}
    return kept, texts


def text_parts(content: Any) -> list[str] | None:
    """A content list's text parts (other parts are dropped); None when not a list."""
    if not isinstance(content, list):
        return None
    return [
        part["text"]
        for part in content
        if isinstance(part, dict)
        and part.get("type", "text") == "text"
        and isinstance(part.get("text"), str)
    ]


def models(data: Any) -> dict[str, Any]:
    """`GET /v1/models`: the ids the upstream lists, nothing else."""
    listed = data.get("data") if isinstance(data, dict) else None
    kept = []
    for model in listed if isinstance(listed, list) else []:
        if isinstance(model, dict) and (name := identifier(model.get("id"))):
            created = model.get("created")
            kept.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created if isinstance(created, int) else 0,
                    "owned_by": identifier(model.get("owned_by")) or "upstream",
                }
            )
    return {"object": "list", "data": kept}
