"""The shared sample cases that concern the guardrails, through the engine Auditor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzers.engine.auditor import Auditor
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AuditInput

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples"
GUARDRAIL_CODES = {
    "LINK_HOST_NOT_ALLOWED", "LINK_TECH_DOC_NOT_ALLOWED", "LINK_LABEL_UPGRADED",
    "LINK_LABEL_SUFFIX_NORMALIZED", "HTML_ANCHOR_CONVERTED", "DANGLING_ATTRIBUTION",
    "LINK_UNHEALTHY", "LINK_UNSAFE_SCHEME", "UNGROUNDED_CUSTOMER_CLAIM", "PROMPT_LEAK",
}


def _cases() -> list[dict]:
    path = SAMPLES / "cases.jsonl"
    if not path.exists():
        return []
    cases = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [
        c for c in cases
        if GUARDRAIL_CODES & {*c.get("expect_types", []), *c.get("forbid_types", [])}
    ]


CASES = _cases()


@pytest.mark.skipif(not CASES, reason="no shared samples on this machine")
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
async def test_sample_case_passes(case):
    config = AuditorConfig.model_validate(json.loads((SAMPLES / "config.json").read_text()))
    report = await Auditor(config).audit(
        AuditInput.model_validate(case), options=case.get("options")
    )
    found = {a.type for run in report.results for a in run.annotations}
    assert set(case.get("expect_types", [])) <= found
    assert not set(case.get("forbid_types", [])) & found
    for text in case.get("cleaned_must_contain", []):
        assert text in report.cleaned_response
    for text in case.get("cleaned_must_not_contain", []):
        assert text not in report.cleaned_response
    assert all(r.status == "ok" for r in report.results if r.analyzer_id in
               ("links", "grounding", "prompt_leak"))
