"""`privacy.store: redacted`: what intake writes, with personal data and secrets replaced by
their placeholders before the first write, so the original never reaches the database.

The user input, the response, every text of the sources and every string nested in the
metadata (the proxy's conversation, OTLP span attributes) are redacted; the metadata's
top-level strings, the `external_id` and the `collision_key` are the caller's identifiers
(erasure selects by them) and are stored as given. Everything else (the cleaned text, the
evidence, the trace lines, the links) is derived from the stored, redacted text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analyzers.engine.config import AuditorConfig
from analyzers.engine.privacy.redaction import redact_text

Redact = Callable[[str], str]


def stored_redaction(config: AuditorConfig) -> Redact | None:
    """The redaction of what is stored under `config`, or None when it keeps the original."""
    if not config.privacy.redacts_stored:
        return None
    types, region = tuple(config.privacy.detect), config.privacy_region()
    return lambda text: redact_text(text, types, region)


def redact_sources(sources: list[dict[str, Any]], redact: Redact) -> list[dict[str, Any]]:
    """Each source with its string fields redacted (a key can sit in a URL's query)."""
    return [
        {k: redact(v) if isinstance(v, str) else v for k, v in source.items()} for source in sources
    ]


def redact_metadata(metadata: dict[str, Any], redact: Redact) -> dict[str, Any]:
    """The metadata with every string inside its objects and lists redacted; its
    top-level strings (identifiers such as `user_id`) as they are."""
    return {k: v if isinstance(v, str) else _redact_json(v, redact) for k, v in metadata.items()}


def _redact_json(value: Any, redact: Redact) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_json(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_json(v, redact) for v in value]
    return value


def redact_item(item: dict[str, Any], redact: Redact) -> dict[str, Any]:
    """One submission (the fields of `submit_audits`) as it is stored."""
    return {
        **item,
        "user_input": redact(item["user_input"]),
        "response": redact(item["response"]),
        "sources": redact_sources(list(item.get("sources") or []), redact),
        "metadata": redact_metadata(dict(item.get("metadata") or {}), redact),
    }


class StreamedText:
    """The redacted form of a streamed response, built a slice at a time: each slice ends
    where a paragraph was audited (after a blank line), so no finding spans two."""

    def __init__(self, redact: Redact) -> None:
        self.redact = redact
        self.parts: list[str] = []
        self.upto = 0  # characters of the original redacted so far

    def through(self, text: str, end: int) -> str:
        """The redacted form of `text[:end]`, the part up to `self.upto` reused."""
        if end > self.upto:
            self.parts.append(self.redact(text[self.upto : end]))
            self.upto = end
        return "".join(self.parts)

    def whole(self, text: str) -> str:
        """The redacted form of all of `text` (the stream is over)."""
        return self.through(text, self.upto) + self.redact(text[self.upto :])
