"""`AnalyzerResult` and `AnalyzerRun` built without pydantic's per-field Python loop.

The auditor makes six or more of each per audit. `AnalyzerResult(...)` validates values
that are nearly always already right (a float score in [0, 1], a list of `Annotation`,
a dict with string keys), and `AnalyzerRun.model_construct(**dict(result), ...)` walks
every field in Python: together about a third of the engine's own cost per analyzer.
These builders make the same instances (the same field values in declaration order, the
same `model_fields_set`) when the values are of the declared types, and otherwise fall
back to validation, so an analyzer's bad score or annotation is still refused exactly as
before. A self-check at import compares them with pydantic and disables them if the
models ever change shape.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .contract import AnalyzerResult, AnalyzerRun, Annotation

_new = object.__new__
_set = object.__setattr__

_RESULT_FIELDS = (
    "analyzer_id",
    "category",
    "score",
    "should_surface",
    "annotations",
    "supplementary",
)
_RUN_FIELDS = (*_RESULT_FIELDS, "status", "error", "duration_ms", "surfaced")
_RESULT_SET = frozenset(_RESULT_FIELDS)
_RUN_SET = frozenset(_RUN_FIELDS)

try:
    _set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
    _set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
    _set_private = BaseModel.__dict__["__pydantic_private__"].__set__
except (KeyError, AttributeError):  # pragma: no cover - another pydantic: by name

    def _set_fields_set(obj: Any, value: Any) -> None:
        _set(obj, "__pydantic_fields_set__", value)

    def _set_extra(obj: Any, value: Any) -> None:
        _set(obj, "__pydantic_extra__", value)

    def _set_private(obj: Any, value: Any) -> None:
        _set(obj, "__pydantic_private__", value)


def trusted_instance(cls: type, values: dict[str, Any], fields_set: frozenset[str]) -> Any:
    """The instance `cls.model_construct(**values)` makes, `values` in declaration order
    and already of their declared types, without pydantic's per-field loop."""
    obj: Any = _new(cls)
    _set(obj, "__dict__", values)
    _set_fields_set(obj, set(fields_set))
    _set_extra(obj, None)
    _set_private(obj, None)
    return obj


def _validated_result(
    analyzer_id: str,
    category: str,
    score: Any,
    should_surface: Any,
    annotations: list[Annotation] | None,
    supplementary: dict[str, Any] | None,
) -> AnalyzerResult:
    return AnalyzerResult(
        analyzer_id=analyzer_id,
        category=category,
        score=score,
        should_surface=should_surface,
        annotations=annotations or [],
        supplementary=supplementary or {},
    )


def analyzer_result(
    analyzer_id: str,
    category: str,
    score: Any,
    should_surface: Any,
    annotations: list[Annotation] | None,
    supplementary: dict[str, Any] | None,
) -> AnalyzerResult:
    """`AnalyzerResult(analyzer_id=..., ..., annotations=annotations or [], supplementary=
    supplementary or {})`: validated unless every value is already of its declared type."""
    if (
        type(score) is not float
        or not 0.0 <= score <= 1.0
        or type(should_surface) is not bool
        or type(analyzer_id) is not str
        or type(category) is not str
    ):
        return _validated_result(
            analyzer_id, category, score, should_surface, annotations, supplementary
        )
    if annotations:
        if type(annotations) is not list:
            return _validated_result(
                analyzer_id, category, score, should_surface, annotations, supplementary
            )
        for a in annotations:  # (a loop: no generator made per result)
            if type(a) is not Annotation:
                return _validated_result(
                    analyzer_id, category, score, should_surface, annotations, supplementary
                )
        annotations = list(annotations)  # validation copies the list too
    else:
        annotations = []
    if supplementary:
        if type(supplementary) is not dict:
            return _validated_result(
                analyzer_id, category, score, should_surface, annotations, supplementary
            )
        for k in supplementary:
            if type(k) is not str:
                return _validated_result(
                    analyzer_id, category, score, should_surface, annotations, supplementary
                )
        supplementary = dict(supplementary)
    else:
        supplementary = {}
    return trusted_instance(
        AnalyzerResult,
        {
            "analyzer_id": analyzer_id,
            "category": category,
            "score": score,
            "should_surface": should_surface,
            "annotations": annotations,
            "supplementary": supplementary,
        },
        _RESULT_SET,
    )


def _constructed_run(result: AnalyzerResult, duration_ms: float, surfaced: bool) -> AnalyzerRun:
    return AnalyzerRun.model_construct(
        **dict(result), status="ok", error=None, duration_ms=duration_ms, surfaced=surfaced
    )


def analyzer_run(result: AnalyzerResult, duration_ms: float, surfaced: bool) -> AnalyzerRun:
    """`AnalyzerRun.model_construct(**dict(result), status="ok", error=None, ...)`."""
    if type(result) is not AnalyzerResult or result.__pydantic_extra__:
        return _constructed_run(result, duration_ms, surfaced)
    values = dict(result.__dict__)
    values["status"] = "ok"
    values["error"] = None
    values["duration_ms"] = duration_ms
    values["surfaced"] = surfaced
    return trusted_instance(AnalyzerRun, values, _RUN_SET)


def same_instance(a: Any, b: Any) -> bool:
    """Whether two models are the same instance in every part pydantic keeps."""
    return (
        type(a) is type(b)
        and list(a.__dict__.items()) == list(b.__dict__.items())
        and a.model_fields_set == b.model_fields_set
        and a.__pydantic_extra__ == b.__pydantic_extra__
        and a.__pydantic_private__ == b.__pydantic_private__
        and a.model_dump() == b.model_dump()
    )


def _check() -> bool:
    """Whether the builders still make what pydantic makes."""
    try:
        note = Annotation(type="X", label="x", severity="info", evidence="e", start=0, end=1)
        args = ("a", "c", 0.25, True, [note], {"k": [1, 2]})
        fast, slow = analyzer_result(*args), _validated_result(*args)
        empty = ("a", "c", 0.0, False, None, None)
        return (
            tuple(AnalyzerResult.model_fields) == _RESULT_FIELDS
            and tuple(AnalyzerRun.model_fields) == _RUN_FIELDS
            and same_instance(fast, slow)
            and same_instance(analyzer_result(*empty), _validated_result(*empty))
            and same_instance(analyzer_run(fast, 1.5, True), _constructed_run(slow, 1.5, True))
        )
    except Exception:  # any change in pydantic's internals: validate instead
        return False


if not _check():  # pragma: no cover - only with another pydantic or contract
    analyzer_result = _validated_result
    analyzer_run = _constructed_run
