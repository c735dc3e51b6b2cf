"""Bounded work per audit: findings per type, supplementary lists, trace lines and links
are capped with the overflow counted, and the audit has a time budget."""

from __future__ import annotations

import asyncio
import time

import pytest

from analyzers.config_store import ConfigError, parse_config
from analyzers.engine.auditor import Auditor
from analyzers.engine.base import Analyzer, AnalyzerSettings
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import Annotation, AuditInput, LinkRecord
from analyzers.engine.limits import Limits
from analyzers.engine.registry import Registry


class Prolific(Analyzer):
    """Produces as much as it is told to: findings, supplementary items, trace, links."""

    id = "prolific"
    category = "test"

    class Settings(AnalyzerSettings):
        leaks: int = 0
        claims: int = 0
        items: int = 0
        trace: int = 0
        links: int = 0

    async def analyze(self, audit, settings, context):
        annotations = [
            Annotation(type="LEAK", label=f"leak {i}", severity="critical" if i == 90 else "info")
            for i in range(settings.leaks)
        ] + [Annotation(type="CLAIM", label=f"claim {i}") for i in range(settings.claims)]
        context.trace.extend(f"[AUDIT] step {i}" for i in range(settings.trace))
        context.links.extend(
            LinkRecord(url=f"https://x.example/{i}") for i in range(settings.links)
        )
        return self.result(
            score=0.5, annotations=annotations, supplementary={"items": list(range(settings.items))}
        )


class Sleeper(Analyzer):
    category = "test"

    def __init__(self, analyzer_id: str) -> None:
        self.id = analyzer_id

    async def analyze(self, audit, settings, context):
        await asyncio.sleep(30)
        return self.result(score=0.0)


def run(analyzers, sections: dict, **config):
    auditor = Auditor(AuditorConfig(analyzers=sections, **config), Registry(analyzers))
    return asyncio.run(auditor.audit(AuditInput(user_input="q", response="r")))


def test_findings_beyond_the_cap_of_their_type_are_one_summary_finding_with_the_count():
    report = run(
        [Prolific()],
        {"prolific": {"leaks": 120, "claims": 3}},
        limits={"max_annotations_per_type": 50},
    )
    [result] = report.results
    leaks = [a for a in result.annotations if a.type == "LEAK"]
    assert [a.label for a in leaks[:50]] == [f"leak {i}" for i in range(50)]
    assert len(leaks) == 51
    summary = leaks[-1]
    assert summary.label == "70 more LEAK findings not listed"
    assert summary.severity == "critical"  # the worst of those left out
    assert "120 findings" in summary.description
    assert [a.label for a in result.annotations if a.type == "CLAIM"] == [
        "claim 0",
        "claim 1",
        "claim 2",
    ]
    assert result.supplementary["capped"]["annotations"] == {"LEAK": 70}


def test_a_result_within_the_caps_is_unchanged():
    report = run([Prolific()], {"prolific": {"leaks": 5, "items": 5}})
    [result] = report.results
    assert len(result.annotations) == 5 and "capped" not in result.supplementary


def test_long_supplementary_lists_are_cut_and_counted():
    report = run(
        [Prolific()], {"prolific": {"items": 1000}}, limits={"max_supplementary_items": 10}
    )
    [result] = report.results
    assert result.supplementary["items"] == list(range(10))
    assert result.supplementary["capped"]["supplementary"] == {"items": 1000}


def test_trace_lines_and_links_are_capped_with_a_last_line_counting_the_rest():
    report = run(
        [Prolific()],
        {"prolific": {"trace": 1000, "links": 300}},
        limits={"max_trace_lines": 100, "max_links": 20},
    )
    assert len(report.links) == 20
    assert len(report.trace) == 100
    assert report.trace[0] == "[AUDIT] step 0"
    assert "280 more links not listed" in report.trace[-2]
    assert "more trace lines not kept" in report.trace[-1]
    kept_steps = sum(1 for line in report.trace if line.startswith("[AUDIT] step"))
    assert f"{1000 - kept_steps} more trace lines" in report.trace[-1]


def test_the_audit_time_budget_stops_every_analyzer_queued_ones_included():
    started = time.monotonic()
    report = run(
        [Sleeper("a"), Sleeper("b"), Sleeper("c")],
        {"a": {}, "b": {}, "c": {}},
        max_concurrency=1,
        analyzer_timeout_s=10,
        limits={"audit_timeout_s": 0.3},
    )
    assert time.monotonic() - started < 5  # not 3 x 10 s
    assert [r.status for r in report.results] == ["timeout"] * 3
    assert all("time budget of 0.3 s" in r.error for r in report.results)


@pytest.mark.django_db  # parse_config reads the stored custom judges (known analyzers)
def test_limits_come_from_the_environment_and_the_configuration(monkeypatch):
    monkeypatch.setenv("AUDITOR_MAX_LINKS", "7")
    monkeypatch.setenv("AUDITOR_AUDIT_TIMEOUT_S", "2.5")
    assert Limits().max_links == 7 and Limits().audit_timeout_s == 2.5
    config, _ = parse_config({"limits": {"max_annotations_per_type": 3}})
    assert config.limits.max_annotations_per_type == 3 and config.limits.max_links == 7
    assert parse_config({})[0].limits == Limits()  # the section is optional
    monkeypatch.setenv("AUDITOR_MAX_LINKS", "lots")
    with pytest.raises(ValueError, match="AUDITOR_MAX_LINKS"):
        Limits()


@pytest.mark.django_db
@pytest.mark.parametrize("section", [{"max_links": 0}, {"unknown": 1}, {"audit_timeout_s": -1}])
def test_bad_limits_in_the_configuration_are_refused(section):
    with pytest.raises(ConfigError):
        parse_config({"limits": section})
