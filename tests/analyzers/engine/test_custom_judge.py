"""Custom judges: a definition (prompt + JSON mapping) run like any analyzer."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from analyzers.engine.auditor import Auditor
from analyzers.engine.base import AuditContext
from analyzers.engine.builtin.custom_judge import (
    CustomJudgeAnalyzer,
    JudgeDefinition,
    judge_from_dict,
)
from analyzers.engine.config import AuditorConfig, LLMConfig
from analyzers.engine.contract import AuditInput, Source
from analyzers.engine.llm import (
    POLICY_SERVICE,
    LLMClient,
    LLMNotConfigured,
    ModelAccessPolicy,
    clear_client_cache,
)
from analyzers.engine.registry import Registry
from tests.llm_server import ScriptedLLMServer

RESPONSE = "You should sue them; you will certainly win in court."
LEGAL = {
    "analyzer_id": "legal_advice",
    "name": "Legal advice",
    "category": "compliance",
    "prompt_template": "Question: $user_input\nAnswer: $response\nSources: $sources\nCost: $$5",
    "score_field": "result.risk",
    "score_scale": 10,
    "summary_field": "result.why",
    "annotations_field": "result.findings",
    "type_field": "kind",
    "evidence_field": "quote",
    "description_field": "reason",
    "default_severity": "info",
}


@pytest.fixture
def server():
    with ScriptedLLMServer() as srv:
        yield srv


def audit(user_input: str = "Can I sue my landlord for $500?") -> AuditInput:
    return AuditInput(
        user_input=user_input,
        response=RESPONSE,
        sources=[Source(title="Tenancy FAQ", url="https://acme.example/faq", text="Rules.")],
    )


def context_for(server: ScriptedLLMServer) -> AuditContext:
    client = LLMClient(base_url=server.base_url, model="judge", backoff_base_s=0.01)
    return AuditContext(config=AuditorConfig(), services={"llm_client": client})


async def run(judge: CustomJudgeAnalyzer, context: AuditContext):
    return await judge.analyze(audit(), judge.parse_settings({}), context)


async def test_it_maps_the_models_json_to_score_and_annotations(server):
    server.enqueue(
        {
            "result": {
                "risk": 8,
                "why": "Gives individual legal advice.",
                "findings": [
                    {"kind": "LEGAL_ADVICE", "quote": "You should sue them", "reason": "Advice."},
                    {"quote": "you will certainly win", "severity": "high"},
                    {"kind": "LEGAL_ADVICE", "quote": "Hire me as your lawyer."},
                ],
            }
        }
    )
    judge = judge_from_dict(LEGAL)
    result = await run(judge, context_for(server))

    assert result.analyzer_id == "legal_advice" and result.category == "compliance"
    assert result.score == pytest.approx(0.8)
    assert [(a.type, a.label, a.severity, a.evidence) for a in result.annotations] == [
        ("LEGAL_ADVICE", "Legal advice", "info", "You should sue them"),
        ("legal_advice", "Legal advice", "critical", "you will certainly win"),
    ]
    for a in result.annotations:
        assert RESPONSE[a.start : a.end] == a.evidence
    assert result.annotations[0].description == "Advice."
    extra = result.supplementary
    assert extra["summary"] == "Gives individual legal advice."
    assert extra["method"] == "llm" and extra["judge"] == "Legal advice"
    assert extra["dropped_unverified"] == 1
    assert extra["usage"]["calls"] == 1


async def test_the_prompt_is_filled_and_describes_the_expected_json(server):
    server.enqueue({"result": {"risk": 0}})
    await run(judge_from_dict(LEGAL), context_for(server))
    system, user = server.requests[0].json["messages"]
    assert user["content"] == (
        "Question: Can I sue my landlord for $500?\n"
        f"Answer: {RESPONSE}\n"
        "Sources: [1] Tenancy FAQ <https://acme.example/faq>: Rules.\n"
        "Cost: $5"
    )
    assert "JSON" in system["content"]
    assert '"result.risk": "a number from 0 (fine) to 10 (worst)"' in system["content"]


async def test_a_reply_without_the_score_is_repaired_then_fails_clearly(server):
    server.enqueue({"risk": 3}, {"result": {"risk": "high"}})
    report = await Auditor(
        AuditorConfig(),
        Registry([judge_from_dict(LEGAL)]),
        services=context_for(server).services,
    ).audit(audit())
    [run_] = report.results
    assert run_.status == "failed"
    assert "needs a number at 'result.risk'" in run_.error
    assert len(server.requests) == 2
    assert "result.risk" in server.requests[1].json["messages"][-1]["content"]


async def test_evidence_can_be_optional(server):
    server.enqueue(
        {"score": 0.5, "annotations": [{"type": "vague", "description": "No quote given."}]}
    )
    judge = judge_from_dict(
        {
            "analyzer_id": "vagueness",
            "name": "Vagueness",
            "prompt_template": "$response",
            "require_evidence": False,
        }
    )
    result = await run(judge, context_for(server))
    [annotation] = result.annotations
    assert annotation.evidence is None and annotation.start is None
    assert annotation.type == "vague" and annotation.severity == "warning"
    assert result.category == "custom"


async def test_without_a_model_it_fails_clearly():
    judge = judge_from_dict(LEGAL)
    with pytest.raises(LLMNotConfigured, match="no model is configured"):
        await run(judge, AuditContext(config=AuditorConfig()))
    report = await Auditor(AuditorConfig(), Registry([judge])).audit(audit())
    [run_] = report.results
    assert run_.status == "failed" and "no model is configured" in run_.error


async def test_it_runs_in_the_auditor_next_to_the_built_ins(server):
    clear_client_cache()
    server.responder = lambda request: {"result": {"risk": 9, "findings": []}}
    config = AuditorConfig(
        llm=LLMConfig(base_url=server.base_url, model="m"),
        analyzers={"legal_advice": {"enabled": True}},
    )
    services = {POLICY_SERVICE: ModelAccessPolicy(allow_private=True)}  # server on 127.0.0.1
    report = await Auditor(config, Registry([judge_from_dict(LEGAL)]), services=services).audit(
        audit()
    )
    [run_] = report.results
    assert run_.status == "ok" and run_.surfaced and run_.score == pytest.approx(0.9)
    disabled = config.model_copy(update={"analyzers": {"legal_advice": {"enabled": False}}})
    report = await Auditor(disabled, Registry([judge_from_dict(LEGAL)])).audit(audit())
    assert report.results == []
    clear_client_cache()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prompt_template": "Judge $answer"}, "unknown variable"),
        ({"prompt_template": "Judge $user_input only"}, r"must include \$response"),
        ({"prompt_template": "Costs $ 5 $response"}, "invalid placeholder"),
        ({"analyzer_id": "bias"}, "built-in analyzer"),
        ({"analyzer_id": "Legal Advice"}, "pattern"),
        ({"default_severity": "fatal"}, "default_severity"),
        ({"score_scale": 0}, "score_scale"),
        ({"unknown_option": 1}, "unknown_option"),
    ],
)
def test_bad_definitions_are_rejected(change, message):
    with pytest.raises(ValidationError, match=message):
        JudgeDefinition.model_validate(LEGAL | change)


def test_the_constructor_takes_a_definition():
    judge = CustomJudgeAnalyzer(JudgeDefinition(**LEGAL))
    assert (judge.id, judge.category, judge.description) == (
        "legal_advice",
        "compliance",
        "Legal advice",
    )
    assert Registry([judge]).get("legal_advice") is judge
