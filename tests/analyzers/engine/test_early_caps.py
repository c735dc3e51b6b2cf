"""Early capping: the guardrail pipeline builds only the records the audit's limits keep
and counts the rest; the report is the one building them all gives, field by field."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzers.engine.auditor import Auditor
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AuditInput
from analyzers.engine.guardrails import analyzers as guardrail_analyzers
from analyzers.engine.guardrails.settings import settings_from_config
from analyzers.engine.guardrails.stream import InlineStreamAuditor, audit_text
from analyzers.engine.limits import Limits
from analyzers.engine.linkcheck import LinkHealth
from analyzers.engine.registry import build_registry

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "config.json"
HOSTS = ["acme.example", "www.acme.example", "docs.acme.example"]

TAGS = (
    "<b>x</b>",
    "<img src=x onerror=alert(1)>",
    "<script>a</script>",
    "<i>y</i>",
    "<div style='background:url(https://evil.test/)'>",
    "<a href='https://evil.test/'>e</a>",
    "<!-- c -->",
    "<span class=s>z</span>",
)


def bare_urls(n: int) -> str:
    return " ".join(
        (
            f"https://h{i % 7}.example/p?q={i}",
            f"www.acme.example/{i}",
            f"evil{i % 3}.com",
            f"x{i}@evil.com",
            f"javascript:alert({i})",
        )[i % 5]
        for i in range(n)
    )


def tags(n: int) -> str:
    return " ".join(TAGS[i % len(TAGS)] for i in range(n))


def links(n: int) -> str:
    return " ".join(
        (
            f"[docs {i}](https://www.acme.example/d/{i})",
            f"[here](https://evil.example/{i})",
            f"![p](http://evil.example/p{i}.png)",
            f"<https://evil.test/{i}>",
            "[this article](https://www.acme.example/blog/faceting)",
            f"[x | Acme | Acme](https://docs.acme.example/{i})",
        )[i % 6]
        for i in range(n)
    )


def mixed(n: int) -> str:
    paragraphs = []
    for i in range(n):
        paragraphs.append(
            f"Globex grew {i}% with [x](https://evil.test/{i}), according to "
            f"[source](https://evil.example/s). See https://www.acme.example/{i} and "
            f"evil.com/{i} <b onclick=x>b</b> <script>s</script>"
        )
        if i % 4 == 0:
            paragraphs.append(f"Namedrop: customer {i}\nDecathlon grew conversion by 50%.")
        if i % 5 == 0:
            paragraphs.append("`https://evil.example/code` and\n```\n<script>x</script>\n```")
    return "\n\n".join(paragraphs)


def config(limits: dict | None = None, check_health: bool = False) -> AuditorConfig:
    data = json.loads(SAMPLES.read_text()) if SAMPLES.exists() else {"allowed_hosts": HOSTS}
    data.setdefault("analyzers", {}).setdefault("links", {})["check_health"] = check_health
    if limits:
        data["limits"] = limits
    return AuditorConfig.model_validate(data)


class FlakyWeb:
    """The outside world's answer to health checks: every third distinct URL is down."""

    async def check_many(self, urls, *, timeout_s=None, deadline_s=None):
        out = {}
        for i, url in enumerate(dict.fromkeys(urls)):
            healthy = i % 3 != 0
            out[url] = LinkHealth(url, 200 if healthy else 404, healthy)
        return out


def report(text: str, cfg: AuditorConfig, early: bool, monkeypatch) -> dict:
    monkeypatch.setattr(guardrail_analyzers, "EARLY_CAPS", early)
    auditor = Auditor(
        cfg, build_registry(include_entry_points=False), services={"link_checker": FlakyWeb()}
    )
    result = asyncio.run(auditor.audit(AuditInput(user_input="q", response=text)))
    dumped = result.model_dump()
    for run in dumped["results"]:
        run.pop("duration_ms")
    return dumped


SHAPES = {
    "bare URLs": bare_urls(700),
    "tags": tags(600),
    "links": links(900),
    "mixed": mixed(60),
    # the first findings of the type are info, one left out is a warning: it surfaces
    "info first": " ".join(f"evil{i}.com" for i in range(80)) + " https://evil.example/x",
    "one of each": bare_urls(3) + "\n\n" + tags(3) + "\n\n" + links(3),
}
SMALL = {
    "max_annotations_per_type": 3,
    "max_links": 5,
    "max_trace_lines": 7,
    "max_supplementary_items": 4,
}


@pytest.mark.parametrize(
    "limits",
    [None, SMALL, {"max_supplementary_items": 300}],
    ids=["defaults", "small", "long lists"],
)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_early_capping_gives_the_same_report(shape, limits, monkeypatch):
    cfg = config(limits)
    early = report(SHAPES[shape], cfg, True, monkeypatch)
    late = report(SHAPES[shape], cfg, False, monkeypatch)
    assert early["cleaned_response"] == late["cleaned_response"]
    assert early["trace"] == late["trace"]
    assert early["links"] == late["links"]
    for a, b in zip(early["results"], late["results"], strict=True):
        assert a == b, a["analyzer_id"]
    assert early == late


@pytest.mark.parametrize("shape", ["links", "mixed", "bare URLs"])
def test_the_same_report_with_health_checks_past_the_caps(shape, monkeypatch):
    cfg = config(SMALL, check_health=True)
    early = report(SHAPES[shape], cfg, True, monkeypatch)
    assert early == report(SHAPES[shape], cfg, False, monkeypatch)
    links_run = next(r for r in early["results"] if r["analyzer_id"] == "links")
    assert links_run["supplementary"]["capped"]["annotations"]["LINK_UNHEALTHY"] > 0


def test_the_reports_are_capped_at_all(monkeypatch):
    """The comparison above must compare capped reports (else it proves little)."""
    early = report(SHAPES["mixed"], config(SMALL), True, monkeypatch)
    assert len(early["trace"]) == 7 and "more trace lines not kept" in early["trace"][-1]
    assert "more links not listed" in early["trace"][-2]
    links_run = next(r for r in early["results"] if r["analyzer_id"] == "links")
    capped = links_run["supplementary"]["capped"]
    assert capped["annotations"]["LINK_HOST_NOT_ALLOWED"] > 100
    assert capped["supplementary"]["links"] > 100


def test_the_pipeline_builds_only_what_the_limits_keep():
    limits = Limits(
        max_annotations_per_type=3, max_links=5, max_trace_lines=7, max_supplementary_items=4
    )
    gs = settings_from_config(config())
    text = SHAPES["mixed"]
    capped = audit_text(text, gs, (), limits)
    full = audit_text(text, gs)
    assert capped.cleaned_response == full.cleaned_response  # every URL and tag judged
    per_type: dict[tuple[str, str], int] = {}
    for owner, a in capped.annotations:
        per_type[owner, a.type] = per_type.get((owner, a.type), 0) + 1
    assert max(per_type.values()) == 3
    assert len(capped.links) == 5 and len(capped.trace) == 7
    assert capped.trace == full.trace[:7]
    assert capped.links == full.links[:5]
    caps = capped.caps
    assert caps.links_omitted == len(full.links) - 5
    assert caps.trace_omitted == len(full.trace) - 7
    assert caps.made == len(full.annotations)


def _stream(text: str, cuts: list[int], limits: Limits | None, gs):
    auditor = InlineStreamAuditor(gs, (), limits)
    pieces, prev = [], 0
    for cut in [*sorted({c for c in cuts if c <= len(text)}), len(text)]:
        pieces.extend(auditor.feed(text[prev:cut]))
        prev = cut
    pieces.extend(auditor.finish())
    return pieces, auditor.result()


@settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    n=st.integers(1, 40),
    cuts=st.lists(st.integers(0, 4000), max_size=12),
    max_trace=st.integers(2, 60),
)
def test_a_capped_stream_sends_what_an_uncapped_one_keeps(n, cuts, max_trace):
    """A stream session keeps the first `max_trace_lines` lines of the pieces' traces: with
    early capping the pieces carry exactly those, and the same text, for any chunking."""
    gs = settings_from_config(config())
    text = mixed(n)[:4000]
    limits = Limits(max_annotations_per_type=2, max_links=3, max_trace_lines=max_trace)
    capped, capped_result = _stream(text, cuts, limits, gs)
    full, full_result = _stream(text, [], None, gs)
    assert "".join(p.text for p in capped) == "".join(p.text for p in full)
    capped_lines = [line for p in capped for line in p.trace]
    full_lines = [line for p in full for line in p.trace]
    assert capped_lines == full_lines[:max_trace]
    assert capped_result.caps.trace_omitted == max(0, len(full_lines) - max_trace)
    batch = audit_text(text, gs, (), limits)
    assert capped_result.cleaned_response == batch.cleaned_response
    assert capped_result.trace == batch.trace
    assert capped_result.annotations == batch.annotations
    assert capped_result.links == batch.links


def test_remembered_allowed_tags_get_the_same_verdicts():
    """Allowed tags that stay as they are are remembered (markup._VERBATIM): a warm
    memo gives the cold result, findings included."""
    from analyzers.engine.guardrails import markup

    gs = settings_from_config(config())
    text = (
        "<b>x</b> <<b>b>y</b> <b onclick=x>z</b> <abbr title='t'>a</abbr> <i>\n\n"
        "`<b>` <b\n>w</b> </b x> <B>u</B> <b>"
    ) * 3
    markup._VERBATIM.clear()
    cold = audit_text(text, gs)
    assert markup._VERBATIM  # the memo was used
    warm = audit_text(text, gs)
    assert warm.cleaned_response == cold.cleaned_response
    assert warm.annotations == cold.annotations and warm.trace == cold.trace
