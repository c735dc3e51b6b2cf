"""The auditor's quick builders of `AnalyzerResult` / `AnalyzerRun` make what pydantic makes,
and still refuse what validation refuses."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from analyzers.engine.contract import AnalyzerResult, AnalyzerRun, Annotation, LinkRecord
from analyzers.engine.trusted import (
    _check,
    _validated_report,
    analyzer_result,
    analyzer_run,
    audit_report,
)


def _validated(*args):
    analyzer_id, category, score, surface, annotations, supplementary = args
    return AnalyzerResult(analyzer_id=analyzer_id, category=category, score=score,
                          should_surface=surface, annotations=annotations or [],
                          supplementary=supplementary or {})


def _same(a, b) -> bool:
    return (type(a) is type(b) and list(a.__dict__.items()) == list(b.__dict__.items())
            and a.model_fields_set == b.model_fields_set and a.model_dump() == b.model_dump())


def test_the_self_check_passes_with_this_pydantic():
    assert _check()


_scores = st.one_of(st.floats(allow_nan=True), st.integers(-2, 2), st.booleans())
_notes = st.lists(st.builds(Annotation, type=st.just("X"), label=st.text(max_size=3)), max_size=3)
_supp = st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=3))


@given(score=_scores, surface=st.booleans(), annotations=_notes, supplementary=_supp)
def test_a_result_is_the_validated_one_or_refused_alike(score, surface, annotations,
                                                        supplementary):
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
    expected = AnalyzerRun.model_construct(**dict(result), status="ok", error=None,
                                           duration_ms=2.5, surfaced=True)
    assert _same(run, expected)
    assert run.model_dump(mode="json")["status"] == "ok"


_runs = st.lists(st.just(analyzer_run(analyzer_result("a", "c", 0.5, False, [], {}), 1.0, True)),
                 max_size=2)
_links = st.lists(st.one_of(st.builds(LinkRecord, url=st.just("https://a.example/")),
                            st.just({"url": "https://b.example/"})), max_size=2)
_lines = st.lists(st.one_of(st.text(max_size=3), st.integers()), max_size=3)
_numbers = st.one_of(st.floats(0, 1), st.integers(0, 1), st.just("x"))


@given(threshold=_numbers, score=_numbers, runs=_runs, links=_links, trace=_lines,
       cleaned=st.one_of(st.text(max_size=3), st.none()))
def test_a_report_is_the_validated_one_or_refused_alike(threshold, score, runs, links, trace,
                                                        cleaned):
    args = (threshold, score, runs, cleaned, links, trace)
    try:
        expected = _validated_report(*args)
    except ValidationError:
        with pytest.raises(ValidationError):
            audit_report(*args)
        return
    got = audit_report(*args)
    assert _same(got, expected)
    assert got.results is not runs and got.links is not links and got.trace is not trace
    assert all(a is b for a, b in zip(got.results, expected.results, strict=True))
