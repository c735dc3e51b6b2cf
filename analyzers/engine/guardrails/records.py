"""Contract records (`Annotation`, `LinkRecord`) built from values already checked.

The rules make many of them per audit. Validation (`Annotation(...)`) costs time on
every record and returns the values unchanged: they are plain `str`, `int` and `None` of the
declared types, and the severities, decisions and codes are this package's constants.
These builders make the instance validation would make (the same field values in
declaration order, the same `model_fields_set`) the way pydantic's `model_construct`
does, without its per-field loop. A self-check at import compares them with validation
and falls back to it if the models ever change shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..contract import Annotation, LinkRecord
from ..trusted import same_instance
from ..trusted import trusted_instance as _trusted

_ANNOTATION_FIELDS = ("type", "label", "severity", "description", "evidence", "start", "end")
_LINK_FIELDS = ("url", "label", "decision", "reason", "http_status", "healthy")
_ANNOTATION_SET = frozenset(_ANNOTATION_FIELDS)
_LINK_SET = frozenset(("url", "label", "decision"))
_STRIP_SET = frozenset(("url", "label", "decision", "reason"))


def annotation(
    code: str,
    label: str,
    severity: str,
    description: str,
    evidence: str,
    start: int,
    end: int,
) -> Annotation:
    """`Annotation(type=code, label=..., ..., end=end)`."""
    return _trusted(
        Annotation,
        {
            "type": code,
            "label": label,
            "severity": severity,
            "description": description,
            "evidence": evidence,
            "start": start,
            "end": end,
        },
        _ANNOTATION_SET,
    )


def link_record(url: str, label: str, decision: str, reason: str | None = None) -> LinkRecord:
    """`LinkRecord(url=url, label=label, decision=decision[, reason=reason])`."""
    return _trusted(
        LinkRecord,
        {
            "url": url,
            "label": label,
            "decision": decision,
            "reason": reason,
            "http_status": None,
            "healthy": None,
        },
        _LINK_SET if reason is None else _STRIP_SET,
    )


def _validated_annotation(  # (`Any`: pydantic checks the severity)
    code: str, label: str, severity: Any, description: str, evidence: str, start: int, end: int
) -> Annotation:
    return Annotation(
        type=code,
        label=label,
        severity=severity,
        description=description,
        evidence=evidence,
        start=start,
        end=end,
    )


def _validated_link_record(  # (`Any`: pydantic checks the decision)
    url: str, label: str, decision: Any, reason: str | None = None
) -> LinkRecord:
    if reason is None:
        return LinkRecord(url=url, label=label, decision=decision)
    return LinkRecord(url=url, label=label, decision=decision, reason=reason)


def _check() -> bool:
    """Whether the builders still make what validation makes."""
    try:
        samples: list[tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...]]] = [
            (
                annotation,
                _validated_annotation,
                ("LINK_UNSAFE_SCHEME", "Unsafe", "critical", "why", "[x](y)", 3, 9),
            ),
            (link_record, _validated_link_record, ("https://a.example/", "x", "keep")),
            (
                link_record,
                _validated_link_record,
                ("https://a.example/", "x", "strip", "LINK_HOST_NOT_ALLOWED"),
            ),
        ]
        return (
            tuple(Annotation.model_fields) == _ANNOTATION_FIELDS
            and tuple(LinkRecord.model_fields) == _LINK_FIELDS
            and all(same_instance(fast(*args), slow(*args)) for fast, slow, args in samples)
        )
    except Exception:  # any change in pydantic's internals: validate instead
        return False


if not _check():  # pragma: no cover - only with another pydantic or contract
    annotation = _validated_annotation
    link_record = _validated_link_record
