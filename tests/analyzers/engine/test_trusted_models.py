"""The auditor's quick builders of `AnalyzerResult` / `AnalyzerRun` make what pydantic makes,
and still refuse what validation refuses."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from analyzers.engine.contract import AnalyzerResult, AnalyzerRun, Annotation
from analyzers.engine.trusted import _check, analyzer_result, analyzer_run


def _validated(*args):
    analyzer_id, category, score, surface, annotations, supplementary = args
    return AnalyzerResult(
        analyzer_id=analyzer_id,
        category=category,
        score=score,
        should_surface=surface,
        annotations=annotations or [],
        supplementary=supplementary or {},
    )


def _same(a, b) -> bool:
    return (
        type(a) is type(b)
        and list(a.__dict__.items()) == list(b.__dict__.items())
        and a.model_fields_set == b.model_fields_set
        and a.model_dump() == b.model_dump()
    )


def test_the_self_check_passes_with_this_pydantic():
    assert _check()


_scores = st.one_of(st.floats(allow_nan=True), st.integers(-2, 2), st.booleans())
_notes = st.lists(st.builds(Annotation, type=st.just("X"), label=st.text(max_size=3)), max_size=3)
_supp = st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=3))


@given(score=_scores, surface=st.booleans(), annotations=_notes, supplementary=_supp)
def test_a_result_is_the_validated_one_or_refused_alike(score, surface, annotations, supplementary):
    args = ("a", "c", score, surface, annotations, supplementary)
    try:
        expected = _validated(*args)
    except ValidationError:
        with pytest.raises(ValidationError):
            analyzer_result(*args)
        return
    got = analyzer_result(*args)
    assert _same(got, expected)
    assert got.annotations is not annotations  # a copy, as validation makes


def test_a_nan_score_or_a_foreign_annotation_is_still_validated():
    with pytest.raises(ValidationError):
        analyzer_result("a", "c", math.nan, False, None, None)
    with pytest.raises(ValidationError):
        analyzer_result("a", "c", 0.5, False, [{"label": "no type"}], None)


def test_a_run_copies_the_result_and_adds_the_auditor_fields():
    result = analyzer_result("a", "c", 0.5, True, [], {"k": 1})
    run = analyzer_run(result, 2.5, True)
    expected = AnalyzerRun.model_construct(
        **dict(result), status="ok", error=None, duration_ms=2.5, surfaced=True
    )
    assert _same(run, expected)
    assert run.model_dump(mode="json")["status"] == "ok"
