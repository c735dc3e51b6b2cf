"""Structural red flags: empty, too long, broken JSON, missing fields, self-contradiction,
duplicate outputs, token spikes, custom validators.

The semantics follow the redflag gate of the reference (MAKER preset defaults: 3000 chars,
750 tokens, spike at 700). Score: 1.0 when any flag is critical; otherwise flags combine
as independent risks, ``1 - prod(1 - weight)``, with weight 0.4 per warning and 0.1 per info
(one warning alone surfaces at the default threshold of 0.3; infos alone rarely do).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from typing import Any, ClassVar

from pydantic import Field

from analyzers.engine.base import Analyzer, AnalyzerSettings, AuditContext
from analyzers.engine.builtin.heuristics_gate import Probe, may_match, required_literals
from analyzers.engine.contract import AnalyzerResult, Annotation, AuditInput
from analyzers.engine.registry import RegistryError, import_dotted

SEVERITY_WEIGHT = {"info": 0.1, "warning": 0.4}

# The annotation types (`RedflagAnalyzer.annotation_types`).
EMPTY_OUTPUT = "EMPTY_OUTPUT"
TOO_MANY_CHARS = "TOO_MANY_CHARS"
TOO_MANY_TOKENS = "TOO_MANY_TOKENS"
TOKEN_LENGTH_SPIKE = "TOKEN_LENGTH_SPIKE"
JSON_PARSE_FAILED = "JSON_PARSE_FAILED"
REQUIRED_FIELD_MISSING = "REQUIRED_FIELD_MISSING"
SELF_CONTRADICTION = "SELF_CONTRADICTION"
COLLISION_DETECTED = "COLLISION_DETECTED"
VALIDATOR_FAILED = "VALIDATOR_FAILED"
EXCEPTION = "EXCEPTION"
REDFLAG_TYPES = (
    EMPTY_OUTPUT,
    TOO_MANY_CHARS,
    TOO_MANY_TOKENS,
    TOKEN_LENGTH_SPIKE,
    JSON_PARSE_FAILED,
    REQUIRED_FIELD_MISSING,
    SELF_CONTRADICTION,
    COLLISION_DETECTED,
    VALIDATOR_FAILED,
    EXCEPTION,
)

_NOT_CERTAIN = re.compile(
    r"\b(?:not|never)\s+(?:entirely\s+|completely\s+|totally\s+|100%\s+)?(?:certain|sure)\b"
    r"|\buncertain\b",
    re.IGNORECASE,
)
_CERTAIN = re.compile(r"\b(?:certainly|definitely|clearly)\b", re.IGNORECASE)
_THE_ANSWER_IS = re.compile(r"\bthe\s+answer\s+is\s+\S", re.IGNORECASE)
_HEDGE = re.compile(r"\b(?:i\s+think|maybe|perhaps)\b", re.IGNORECASE)
# Words without which the two patterns above cannot match: most answers skip both scans.
_NOT_CERTAIN_WORDS = required_literals(_NOT_CERTAIN)
_THE_ANSWER_IS_WORDS = required_literals(_THE_ANSWER_IS)
_FENCED_JSON = re.compile(r"\A```(?:json)?[ \t]*\n(.*?)\n?```\Z", re.DOTALL | re.IGNORECASE)
_EVIDENCE_SPAN_MAX = 300


class RedflagSettings(AnalyzerSettings):
    max_chars: int | None = Field(
        default=3000, ge=1, description="Longer responses are flagged TOO_MANY_CHARS"
    )
    max_tokens: int | None = Field(
        default=750, ge=1, description="More tokens (estimated) are flagged TOO_MANY_TOKENS"
    )
    token_spike_threshold: int | None = Field(
        default=700, ge=1, description="From this many tokens, an info TOKEN_LENGTH_SPIKE"
    )
    require_json: bool = Field(
        default=False, description="The response must be JSON (JSON_PARSE_FAILED otherwise)"
    )
    required_fields: list[str] = Field(
        default_factory=list,
        description="Dot paths the JSON must have (`next.peg`, `items.0.id`)",
    )
    detect_self_contradiction: bool = Field(
        default=True,
        description="Flag 'not sure' with 'definitely', or 'the answer is' with a hedge",
    )
    track_collisions: bool = Field(
        default=True, description="Flag the same output twice for one collision key"
    )
    validators: list[str] = Field(
        default_factory=list,
        description="Dotted paths of validator callables (configuration only, never per audit).",
    )


# `context.services[VALIDATOR_MODULES_SERVICE]`: the module prefixes the operator allows for
# custom validators (the Django app passes AUDITOR_VALIDATOR_MODULES); absent = no limit
# (the engine used as a library by trusted code).
VALIDATOR_MODULES_SERVICE = "validator_modules"


def validator_allowed(path: str, prefixes: list[str] | tuple[str, ...]) -> bool:
    """True when dotted `path` is inside one of the module `prefixes` (`a.b` allows `a.b.f`
    and `a.b.c.f`, never `a.bc.f`)."""
    for prefix in prefixes:
        prefix = prefix.strip().rstrip(".")
        if prefix and path.startswith(prefix + "."):
            return True
    return False


def count_tokens(text: str) -> int:
    """Whitespace-split tokens, as in the reference."""
    return _count(*_words(text))


def normalise_for_hash(text: str) -> str:
    normal, words = _words(text)
    if normal is not None:
        return normal.decode()  # (in lower case already)
    return " ".join(words or ()).casefold()


def content_digest(text: str, words: list[str] | None = None) -> str:
    """`words`: `text.split()`, when the caller has it already."""
    return _digest(None, words) if words is not None else _digest(*_words(text))


def _words(text: str) -> tuple[bytes | None, list[str] | None]:
    """`text`'s whitespace-split words, once: for an ASCII text as their joined form
    (`_ascii_normal`, no string per word), else as `str.split()`'s list."""
    normal = _ascii_normal(text)
    return (normal, None) if normal is not None else (None, text.split())


def _count(normal: bytes | None, words: list[str] | None) -> int:
    if words is not None:
        return len(words)
    return normal.count(b" ") + 1 if normal else 0


def _digest(normal: bytes | None, words: list[str] | None) -> str:
    joined = normal if normal is not None else " ".join(words or ()).casefold().encode()
    return hashlib.blake2b(joined, digest_size=16).hexdigest()


# ASCII whitespace as `str.split()` reads it (`str.isspace`: tab to CR, FS to US, space)
# as spaces, capitals as lower case (`casefold()` of ASCII); every other byte as itself.
_ASCII_SPACES = bytes(32 if chr(i).isspace() else ord(chr(i).lower()) for i in range(128)) + bytes(
    range(128, 256)
)


def _ascii_normal(text: str) -> bytes | None:
    """`" ".join(text.split()).casefold()`, encoded, for an ASCII text, without making a
    string per word (a 2 KB answer has 300): whitespace to spaces and capitals to lower
    case in one pass, then runs of spaces halved until single. None for other texts (the
    plain way: their whitespace includes non-ASCII spaces)."""
    if not text.isascii():
        return None
    normal = text.encode("ascii").translate(_ASCII_SPACES)
    while True:  # each pass halves every run: log2(longest run) passes, the last finds none
        shorter = normal.replace(b"  ", b" ")
        if len(shorter) == len(normal):
            return normal.strip(b" ")
        normal = shorter


_NO_JSON = object()


async def seen_before(context: AuditContext, digest: str) -> bool:
    """Whether another audit produced this output under the collision key (an audit's
    own family, it and its re-runs, never counts). Stores without families are asked
    the old way."""
    if context.collision_family is None:
        return await context.collision_store.seen_before(context.collision_key, digest)
    return await context.collision_store.seen_before(
        context.collision_key, digest, family=context.collision_family
    )


def parse_json_output(text: str) -> Any:
    """The parsed value, or `_NO_JSON`. A single fenced ```json block counts as JSON."""
    stripped = text.strip()
    for candidate in (stripped, _fenced_body(stripped)):
        if candidate is None:
            continue
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            continue
    return _NO_JSON


def _fenced_body(text: str) -> str | None:
    if not text.startswith("```"):
        return None
    match = _FENCED_JSON.match(text)
    if match is None or "```" in match.group(1):
        return None
    return match.group(1)


def has_path(value: Any, path: str) -> bool:
    """True when the dot path (`a.b`, `items.0.id`) exists in the parsed JSON value."""
    for part in path.split("."):
        if isinstance(value, dict):
            if part not in value:
                return False
            value = value[part]
        elif isinstance(value, list):
            if not (part.isdigit() and int(part) < len(value)):
                return False
            value = value[int(part)]
        else:
            return False
    return True


def _span_evidence(text: str, a: re.Match[str], b: re.Match[str]) -> tuple[str, int, int]:
    start, end = min(a.start(), b.start()), max(a.end(), b.end())
    if end - start > _EVIDENCE_SPAN_MAX:
        start, end = b.start(), b.end()
    return text[start:end], start, end


def find_self_contradiction(text: str) -> Annotation | None:
    probe = Probe.of(text)
    not_certain = _NOT_CERTAIN.search(text) if may_match(_NOT_CERTAIN_WORDS, probe) else None
    if not_certain:
        certain = _CERTAIN.search(text)
        if certain:
            evidence, start, end = _span_evidence(text, not_certain, certain)
            return Annotation(
                type=SELF_CONTRADICTION,
                label="Confidence contradiction",
                severity="warning",
                description=(f"Says it is {not_certain.group(0)!r} yet also {certain.group(0)!r}."),
                evidence=evidence,
                start=start,
                end=end,
            )
    answer = _THE_ANSWER_IS.search(text) if may_match(_THE_ANSWER_IS_WORDS, probe) else None
    if answer:
        hedge = _HEDGE.search(text)
        if hedge:
            evidence, start, end = _span_evidence(text, answer, hedge)
            return Annotation(
                type=SELF_CONTRADICTION,
                label="Hedged definitive answer",
                severity="warning",
                description=f"Gives a definitive answer, then hedges with {hedge.group(0)!r}.",
                evidence=evidence,
                start=start,
                end=end,
            )
    return None


def score_annotations(annotations: list[Annotation]) -> float:
    if any(a.severity == "critical" for a in annotations):
        return 1.0
    keep = 1.0
    for annotation in annotations:
        keep *= 1.0 - SEVERITY_WEIGHT[annotation.severity]
    return round(1.0 - keep, 6)


class RedflagAnalyzer(Analyzer):
    id = "redflag"
    category = "structure"
    description = (
        "Structural red flags: empty output, too many characters or tokens, token spikes, "
        "invalid JSON, missing required fields, self-contradiction, duplicate outputs "
        "(collisions) and custom validators."
    )
    Settings = RedflagSettings
    config_only_settings: ClassVar[frozenset[str]] = frozenset({"validators"})
    annotation_types = REDFLAG_TYPES

    def never_waits(self, settings: RedflagSettings, context: AuditContext) -> bool:
        """No custom validator (they may wait), and duplicates either not tracked or
        tracked by a store that answers without waiting (the in-memory one)."""
        return not settings.validators and (
            not settings.track_collisions
            or getattr(context.collision_store, "never_waits", False) is True
        )

    async def analyze(
        self, audit: AuditInput, settings: RedflagSettings, context: AuditContext
    ) -> AnalyzerResult:
        text = audit.response
        words = _words(text)  # whitespace-split (`count_tokens`), hashed below too
        tokens = _count(*words)
        is_spike = (
            settings.token_spike_threshold is not None and tokens > settings.token_spike_threshold
        )
        flags: list[Annotation] = []

        if not text.strip():
            flags.append(
                Annotation(
                    type=EMPTY_OUTPUT,
                    label="Empty output",
                    severity="critical",
                    description="The response is empty after trimming whitespace.",
                )
            )
        if settings.max_chars is not None and len(text) > settings.max_chars:
            flags.append(
                Annotation(
                    type=TOO_MANY_CHARS,
                    label="Too many characters",
                    severity="warning",
                    description=f"{len(text)} characters, more than the limit of {settings.max_chars}.",
                )
            )
        if settings.max_tokens is not None and tokens > settings.max_tokens:
            flags.append(
                Annotation(
                    type=TOO_MANY_TOKENS,
                    label="Too many tokens",
                    severity="warning",
                    description=f"{tokens} tokens, more than the limit of {settings.max_tokens}.",
                )
            )
        if is_spike:
            flags.append(
                Annotation(
                    type=TOKEN_LENGTH_SPIKE,
                    label="Token length spike",
                    severity="info",
                    description=(
                        f"{tokens} tokens, above the spike threshold of "
                        f"{settings.token_spike_threshold}."
                    ),
                )
            )

        parsed: Any = None
        if settings.require_json or settings.required_fields:
            parsed = parse_json_output(text)
            if parsed is _NO_JSON:
                parsed = None
                flags.append(
                    Annotation(
                        type=JSON_PARSE_FAILED,
                        label="Not valid JSON",
                        severity="critical",
                        description="The response was required to be JSON and could not be parsed.",
                        evidence=text[:200] or None,
                        start=0 if text else None,
                        end=min(len(text), 200) if text else None,
                    )
                )
            else:
                for path in settings.required_fields:
                    if not has_path(parsed, path):
                        flags.append(
                            Annotation(
                                type=REQUIRED_FIELD_MISSING,
                                label="Required field missing",
                                severity="critical",
                                description=f"The JSON has no field {path!r}.",
                            )
                        )

        if settings.detect_self_contradiction:
            contradiction = find_self_contradiction(text)
            if contradiction is not None:
                flags.append(contradiction)

        if settings.track_collisions and tokens and await seen_before(context, _digest(*words)):
            flags.append(
                Annotation(
                    type=COLLISION_DETECTED,
                    label="Duplicate output",
                    severity="warning",
                    description="The same content was already produced for this collision key.",
                )
            )

        allowed = context.services.get(VALIDATOR_MODULES_SERVICE)
        for path in settings.validators:
            if allowed is not None and not validator_allowed(path, allowed):
                flags.append(
                    Annotation(
                        type=EXCEPTION,
                        label="Validator not allowed",
                        severity="warning",
                        description=f"Validator {path} is outside the modules the operator "
                        "allows (AUDITOR_VALIDATOR_MODULES); it was not imported.",
                    )
                )
                continue
            flags.extend(await run_validator(path, text, parsed, audit))

        return self.result(
            score=score_annotations(flags),
            annotations=flags,
            supplementary={"stats": {"chars": len(text), "tokens": tokens, "is_spike": is_spike}},
        )


async def run_validator(path: str, text: str, parsed: Any, audit: AuditInput) -> list[Annotation]:
    """Run one custom validator; its failure is a flag, never a crash.

    A validator is called as ``validator(text=..., parsed=..., context=...)`` and returns
    True / None / ``{"ok": True}`` to pass, False or ``{"ok": False, "message": ...,
    "details": ...}`` to fail. It may be async.
    """
    try:
        validator = import_dotted(path)
        if not callable(validator):
            raise RegistryError(f"{path!r} is not callable")
        outcome = validator(text=text, parsed=parsed, context=dict(audit.metadata))
        if inspect.isawaitable(outcome):
            outcome = await outcome
    except Exception as exc:
        return [
            Annotation(
                type=EXCEPTION,
                label="Validator raised",
                severity="warning",
                description=f"Validator {path} raised {type(exc).__name__}: {exc}",
            )
        ]
    if outcome is False or (isinstance(outcome, dict) and outcome.get("ok") is False):
        message = outcome.get("message") if isinstance(outcome, dict) else None
        return [
            Annotation(
                type=VALIDATOR_FAILED,
                label="Validator failed",
                severity="warning",
                description=f"Validator {path} failed" + (f": {message}" if message else "."),
            )
        ]
    return []
