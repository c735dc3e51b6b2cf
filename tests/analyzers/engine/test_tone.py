"""The tone analyzer: one model call end to end against the test server, and heuristics."""

from __future__ import annotations

import pytest

from analyzers.engine.auditor import Auditor
from analyzers.engine.base import AuditContext
from analyzers.engine.builtin.tone import ToneAnalyzer
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AuditInput
from analyzers.engine.llm import LLMClient
from analyzers.engine.registry import Registry
from tests.llm_server import Reply, ScriptedLLMServer, by_task

RUDE = "Obviously you should know this already. Just google it."


@pytest.fixture
def server():
    with ScriptedLLMServer() as srv:
        yield srv


def context_for(server: ScriptedLLMServer) -> AuditContext:
    client = LLMClient(base_url=server.base_url, model="judge", backoff_base_s=0.01)
    return AuditContext(config=AuditorConfig(), services={"llm_client": client})


async def judge(response: str, context: AuditContext, **settings):
    analyzer = ToneAnalyzer()
    audit = AuditInput(user_input="How do I reset my password?", response=response)
    return await analyzer.analyze(audit, analyzer.parse_settings(settings), context)


def heuristic(response: str):
    return ToneAnalyzer().heuristic(AuditInput(user_input="Help?", response=response))


# -- with a model ---------------------------------------------------------------------------


async def test_it_judges_tone_with_one_call_and_verified_quotes(server):
    server.responder = by_task(
        {
            "tone_detect.v1": {
                "issues": [
                    {
                        "type": "condescending",
                        "severity": "medium",
                        "confidence": 0.75,
                        "description": "Talks down to the user.",
                        "evidence": "you should know this already",
                    },
                    {
                        "type": "dismissive",
                        "severity": "warning",
                        "confidence": 1.0,
                        "description": "Invented quote.",
                        "evidence": "Read the manual, idiot.",
                    },
                    {
                        "type": "dismissive",
                        "severity": "warning",
                        "confidence": 0.5,
                        "description": "Sends the user away.",
                        "evidence": "just Google it",
                    },
                ],
                "tone": "curt",
                "summary": "Condescending and dismissive.",
            }
        }
    )
    result = await judge(RUDE, context_for(server))

    assert server.tasks() == ["tone_detect.v1"]
    assert result.analyzer_id == "tone" and result.category == "communication"
    assert [(a.type, a.evidence, a.severity) for a in result.annotations] == [
        ("condescending", "you should know this already", "warning"),
        ("dismissive", "Just google it", "warning"),
    ]
    for a in result.annotations:
        assert RUDE[a.start : a.end] == a.evidence
    # 1 - (1 - 0.75 * 0.8) * (1 - 0.5 * 0.8)
    assert result.score == pytest.approx(0.76)
    extra = result.supplementary
    assert extra["method"] == "llm" and extra["tone"] == "curt"
    assert extra["dropped_unverified"] == 1
    assert extra["usage"]["calls"] == 1 and extra["usage"]["prompt_tokens"] == 11
    prompt = server.requests[0].json["messages"][1]["content"]
    assert RUDE in prompt and "How do I reset my password?" in prompt


async def test_a_fine_answer_scores_zero(server):
    server.responder = by_task({"tone_detect.v1": {"issues": [], "tone": "friendly"}})
    result = await judge("Click 'Forgot password' on the sign-in page.", context_for(server))
    assert result.score == 0.0 and result.annotations == []
    assert result.supplementary["summary"] == "No tone problem found."


async def test_a_hung_model_times_out_the_analyzer_run(server):
    server.enqueue(Reply(hang=True), Reply(hang=True))
    client = LLMClient(base_url=server.base_url, model="m", timeout_s=0.2, max_retries=1)
    report = await Auditor(
        AuditorConfig(), Registry([ToneAnalyzer()]), services={"llm_client": client}
    ).audit(AuditInput(user_input="Hi", response=RUDE))
    [run] = report.results
    assert run.status == "failed"
    assert "timed out after 0.2 s" in run.error


# -- without a model ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "tone_type"),
    [
        ("As anyone knows, you restart the router first.", "condescending"),
        ("Let me explain this slowly: the button is blue.", "condescending"),
        ("It's not rocket science, just restart it.", "condescending"),
        ("That's a stupid question. Restart it.", "dismissive"),
        ("Just google it.", "dismissive"),
        ("I don't have time for this. Read the docs.", "dismissive"),
        ("This shit is broken, restart it.", "unprofessional"),
        ("What the hell did you click?", "unprofessional"),
        ("lol, just restart it", "unprofessional"),
        ("NEVER EVER CLICK THAT BUTTON again.", "unprofessional"),
    ],
)
def test_each_tone_problem_has_a_clear_positive(response, tone_type):
    result = heuristic(response)
    assert tone_type in {a.type for a in result.annotations}
    for a in result.annotations:
        assert response[a.start : a.end] == a.evidence


def test_insults_and_profanity_force_the_result_to_surface():
    result = heuristic("That's a stupid question, who cares.")
    assert result.should_surface is True
    assert result.score >= 0.6
    assert result.supplementary == {
        "summary": "Tone problems: dismissive.",
        "label": "high",
        "method": "heuristic",
        "usage": {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "calls": 0,
            "retries": 0,
            "latency_ms": 0.0,
        },
    }


@pytest.mark.parametrize(
    "response",
    [
        "Click 'Forgot password' on the sign-in page and follow the email link.",
        "That is not correct: the limit is 10 requests per second, not 100.",
        "It doesn't matter which order you call them in; both are idempotent.",
        "Whatever plan you choose, you can switch later.",
        "Run `ls -la` in your shell to see hidden files.",
        "The class Assessment handles scrapped items; see the HTTP API docs.",
        "Use the AWS IAM API to create the role.",
    ],
)
def test_neutral_and_firm_answers_are_not_flagged(response):
    result = heuristic(response)
    assert result.annotations == []
    assert result.score == 0.0


def test_a_lone_obviously_stays_below_the_threshold():
    result = heuristic("The limit is obviously per account.")
    assert [a.severity for a in result.annotations] == ["info"]
    assert result.score < 0.3


async def test_without_a_model_the_auditor_runs_the_heuristic():
    report = await Auditor(AuditorConfig(), Registry([ToneAnalyzer()])).audit(
        AuditInput(user_input="Help?", response="Just google it, lol.")
    )
    [run] = report.results
    assert run.status == "ok" and run.surfaced
    assert run.supplementary["method"] == "heuristic"


def test_a_clean_answer_gets_what_the_general_path_gives_for_no_finding():
    from analyzers.engine.builtin import tone
    from analyzers.engine.builtin.heuristics import combine, score_label
    from analyzers.engine.llm import Usage

    first = heuristic("Reset it from the settings page, then sign in again.")
    second = heuristic("Open the account page and choose a new password.")
    assert first.model_dump() | {"supplementary": None} == (
        ToneAnalyzer().result(score=combine([]), annotations=[]).model_dump()
        | {"supplementary": None}
    )
    assert first.supplementary == {
        "summary": tone._summary([]),
        "label": score_label(combine([])),
        "method": "heuristic",
        "usage": Usage().as_dict(),
    }
    # each result has its own usage dict
    assert first.supplementary["usage"] is not second.supplementary["usage"]
