"""The auditor: fan-out with a concurrency limit, rescue, aggregate, surfacing, options."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.engine.auditor import Auditor, is_surfaced, overall_score
from analyzers.engine.base import Analyzer, AnalyzerSettings
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AnalyzerRun, AuditInput
from analyzers.engine.registry import Registry


class Fixed(Analyzer):
    """Returns a fixed score; or raises, hangs, or records concurrency when told to."""

    category = "test"

    class Settings(AnalyzerSettings):
        score: float = 0.0
        mode: str = "ok"
        surface: bool = False

    def __init__(self, analyzer_id: str, tracker: dict | None = None) -> None:
        self.id = analyzer_id
        self.tracker = tracker

    async def analyze(self, audit, settings, context):
        if self.tracker is not None:
            self.tracker["now"] += 1
            self.tracker["peak"] = max(self.tracker["peak"], self.tracker["now"])
            await asyncio.sleep(0.02)
            self.tracker["now"] -= 1
        if settings.mode == "raise":
            raise RuntimeError("analyzer exploded")
        if settings.mode == "hang":
            await asyncio.sleep(60)
        return self.result(score=settings.score, should_surface=settings.surface)


def make_auditor(specs: dict[str, dict], **config) -> Auditor:
    registry = Registry(Fixed(name) for name in specs)
    analyzers = {name: {"enabled": True, **spec} for name, spec in specs.items()}
    return Auditor(AuditorConfig(analyzers=analyzers, **config), registry)


def audit(auditor: Auditor, **kwargs):
    return asyncio.run(auditor.audit(AuditInput(user_input="q", response="r"), **kwargs))


def test_overall_score_is_the_mean_of_successful_scores():
    report = audit(make_auditor({"a": {"score": 0.2}, "b": {"score": 0.6}, "c": {"mode": "raise"}}))
    assert report.overall_score == pytest.approx(0.4)
    assert [r.status for r in report.results] == ["ok", "ok", "failed"]


def test_a_raising_analyzer_is_recorded_and_never_fails_the_audit():
    report = audit(make_auditor({"a": {"mode": "raise"}}))
    [run] = report.results
    assert run.status == "failed"
    assert "analyzer exploded" in run.error
    assert run.duration_ms >= 0
    assert report.overall_score == 0.0
    assert not report.has_card


def test_a_hanging_analyzer_times_out_and_the_rest_complete():
    auditor = make_auditor(
        {"slow": {"mode": "hang"}, "fast": {"score": 0.9}}, analyzer_timeout_s=0.1
    )
    report = audit(auditor)
    by_id = {r.analyzer_id: r for r in report.results}
    assert by_id["slow"].status == "timeout"
    assert "timed out" in by_id["slow"].error
    assert by_id["fast"].status == "ok" and by_id["fast"].surfaced
    assert report.overall_score == pytest.approx(0.9)


def test_at_most_max_concurrency_analyzers_run_at_once():
    tracker = {"now": 0, "peak": 0}
    registry = Registry(Fixed(f"a{i}", tracker) for i in range(6))
    auditor = Auditor(AuditorConfig(max_concurrency=2), registry)
    report = audit(auditor)
    assert len(report.results) == 6
    assert tracker["peak"] == 2


def test_surfacing_by_threshold_or_should_surface():
    auditor = make_auditor(
        {"low": {"score": 0.29}, "at": {"score": 0.3}, "forced": {"score": 0.0, "surface": True}}
    )
    report = audit(auditor)
    assert {r.analyzer_id: r.surfaced for r in report.results} == {
        "low": False,
        "at": True,
        "forced": True,
    }
    assert report.has_card


def test_disabled_analyzers_do_not_run():
    registry = Registry([Fixed("on"), Fixed("off")])
    config = AuditorConfig(analyzers={"off": {"enabled": False}})
    report = audit(Auditor(config, registry))
    assert [r.analyzer_id for r in report.results] == ["on"]


def test_options_override_settings_for_one_audit_only():
    auditor = make_auditor({"a": {"score": 0.1}})
    assert audit(auditor, options={"a": {"score": 0.8}}).overall_score == pytest.approx(0.8)
    assert audit(auditor).overall_score == pytest.approx(0.1)


def test_invalid_options_fail_that_analyzer_with_a_clear_error():
    report = audit(make_auditor({"a": {}}), options={"a": {"nope": 1}})
    assert report.results[0].status == "failed"
    assert "nope" in report.results[0].error


def test_config_only_settings_are_refused_in_options():
    from analyzers.engine.builtin.redflag import RedflagAnalyzer

    auditor = Auditor(AuditorConfig(), Registry([RedflagAnalyzer()]))
    report = audit(auditor, options={"redflag": {"validators": ["os.system"]}})
    assert report.results[0].status == "failed"
    assert "only be set in the configuration" in report.results[0].error


def test_progress_reports_each_step_and_a_failing_callback_is_harmless():
    events = []

    async def progress(event):
        events.append(event["type"])
        raise RuntimeError("listener is broken")

    report = audit(make_auditor({"a": {"score": 0.5}}), progress=progress)
    assert events == ["analyzer_started", "analyzer_finished", "audit_finished"]
    assert report.results[0].status == "ok"


def test_finished_event_carries_the_surfaced_run():
    seen = []
    audit(make_auditor({"a": {"score": 0.5}}), progress=seen.append)
    finished = [e for e in seen if e["type"] == "analyzer_finished"][0]
    assert finished["run"].surfaced is True


def test_cleaned_response_defaults_to_the_response():
    assert audit(make_auditor({"a": {}})).cleaned_response == "r"


run_strategy = st.builds(
    AnalyzerRun,
    analyzer_id=st.just("x"),
    category=st.just("c"),
    score=st.floats(0, 1),
    should_surface=st.booleans(),
    status=st.sampled_from(["ok", "failed", "timeout"]),
)


@settings(max_examples=300, deadline=None)
@given(runs=st.lists(run_strategy, max_size=8), threshold=st.floats(0, 1))
def test_aggregate_and_surfacing_rules_hold_for_any_mix(runs, threshold):
    ok = [r.score for r in runs if r.status == "ok"]
    expected = sum(ok) / len(ok) if ok else 0.0
    assert overall_score(runs) == pytest.approx(expected)
    for r in runs:
        assert is_surfaced(r.score, r.should_surface, threshold) == (
            r.score >= threshold or r.should_surface
        )


@settings(max_examples=60, deadline=None)
@given(
    specs=st.lists(
        st.tuples(st.floats(0, 1), st.sampled_from(["ok", "raise", "hang"]), st.booleans()),
        min_size=1,
        max_size=5,
    ),
    threshold=st.floats(0, 1),
)
def test_auditor_end_to_end_for_any_mix_of_scores_failures_and_timeouts(specs, threshold):
    analyzers = {
        f"a{i}": {"score": score, "mode": mode, "surface": surface}
        for i, (score, mode, surface) in enumerate(specs)
    }
    report = audit(make_auditor(analyzers, threshold=threshold, analyzer_timeout_s=0.01))
    ok_scores = [s for s, mode, _ in specs if mode == "ok"]
    expected = sum(ok_scores) / len(ok_scores) if ok_scores else 0.0
    assert report.overall_score == pytest.approx(expected)
    for run, (score, mode, surface) in zip(report.results, specs, strict=True):
        assert run.status == {"ok": "ok", "raise": "failed", "hang": "timeout"}[mode]
        assert run.surfaced == (mode == "ok" and (score >= threshold or surface))


def test_options_can_switch_an_analyzer_off_for_one_audit():
    auditor = make_auditor({"a": {"score": 0.1}, "b": {"score": 0.5}})
    report = audit(auditor, options={"b": {"enabled": False}})
    assert [r.analyzer_id for r in report.results] == ["a"]


def test_a_bad_option_fails_only_its_own_analyzer():
    auditor = make_auditor({"a": {"score": 0.1}, "b": {"score": 0.5}})
    report = audit(auditor, options={"a": "not an object", "b": {"score": 0.7}})
    by_id = {r.analyzer_id: r for r in report.results}
    assert by_id["a"].status == "failed" and "must be an object" in by_id["a"].error
    assert by_id["b"].score == pytest.approx(0.7)


def test_options_reach_analyzers_that_share_configuration():
    """The guardrail rules read the merged configuration, so options apply to them too."""
    from analyzers.engine.registry import build_registry

    auditor = Auditor(AuditorConfig(), build_registry(include_entry_points=False))
    text = "Secret plan:\nDo not show this.\n\nVisible answer."
    plain = asyncio.run(auditor.audit(AuditInput(response=text)))
    assert "Secret plan:" in plain.cleaned_response
    report = asyncio.run(
        auditor.audit(
            AuditInput(response=text), options={"prompt_leak": {"patterns": ["Secret plan:"]}}
        )
    )
    assert "Secret plan:" not in report.cleaned_response
    assert "Visible answer." in report.cleaned_response


def test_an_analyzer_may_have_its_own_threshold():
    auditor = make_auditor(
        {
            "strict": {"score": 0.2, "threshold": 0.1},
            "lenient": {"score": 0.6, "threshold": 0.8},
            "default": {"score": 0.3},
        }
    )
    report = audit(auditor)
    assert {r.analyzer_id: r.surfaced for r in report.results} == {
        "strict": True,
        "lenient": False,
        "default": True,
    }


def test_per_analyzer_thresholds_are_validated_and_never_reach_analyzer_settings():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="a.threshold must be a number from 0 to 1"):
        AuditorConfig(analyzers={"a": {"threshold": 1.5}})
    with pytest.raises(ValidationError):
        AuditorConfig(analyzers={"a": {"threshold": True}})
    config = AuditorConfig(analyzers={"a": {"enabled": True, "threshold": 0.5, "x": 1}})
    assert config.analyzer_section("a") == {"x": 1}
    assert config.threshold_for("a") == 0.5 and config.threshold_for("b") == 0.3
