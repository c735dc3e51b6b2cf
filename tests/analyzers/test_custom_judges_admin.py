"""Custom judges defined in the admin run like any other analyzer, through a real model server."""

from __future__ import annotations

import pytest
from django.test import Client

from analyzers.config_store import get_registry, load_config, save_config
from analyzers.models import CustomJudge
from tests.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.django_db

JUDGE_FORM = {
    "analyzer_id": "legal_risk",
    "name": "Legal risk",
    "category": "compliance",
    "prompt_template": "Question: $user_input\nAnswer: $response\nRate the legal risk.",
    "mapping": '{"score_field": "risk", "score_scale": 10, "annotations_field": "issues"}',
    "enabled": "on",
    "settings": "{}",
}


def staff_client(staff_user) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


def test_staff_define_a_judge_in_the_admin_and_it_joins_the_registry(staff_user):
    response = staff_client(staff_user).post("/admin/analyzers/customjudge/add/", JUDGE_FORM)
    assert response.status_code == 302, response.content.decode()[:2000]
    judge = get_registry().get("legal_risk")
    assert judge is not None and judge.category == "compliance"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("prompt_template", "No response variable here", "must include $response"),
        ("prompt_template", "Answer: $response $secret", "unknown variable"),
        ("analyzer_id", "bias", "built-in analyzer"),
        ("mapping", '{"no_such_field": 1}', "no_such_field"),
    ],
)
def test_invalid_judges_are_rejected_with_a_message(staff_user, field, value, message):
    response = staff_client(staff_user).post(
        "/admin/analyzers/customjudge/add/", {**JUDGE_FORM, field: value}
    )
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not CustomJudge.objects.exists()


def test_a_judge_audits_through_the_configured_model(staff_user, monkeypatch, settings):
    from audits.execution.execute import execute_run
    from audits.intake.submit import submit_audit

    settings.AUDITOR_LLM_ALLOW_PRIVATE = True  # the model server runs on 127.0.0.1
    staff_client(staff_user).post("/admin/analyzers/customjudge/add/", JUDGE_FORM)
    with ScriptedLLMServer() as server:
        config = load_config().model_dump()
        config["llm"] = {**config["llm"], "base_url": server.base_url, "model": "judge-model"}
        config["analyzers"] = {"bias": {"enabled": False}, "tone": {"enabled": False}}
        save_config(config, actor="test")
        monkeypatch.setenv("AUDITOR_LLM_API_KEY", "sk-test")
        server.enqueue(
            Reply(
                content={
                    "risk": 8,
                    "summary": "Promises an outcome.",
                    "issues": [
                        {
                            "type": "guarantee",
                            "severity": "critical",
                            "description": "Guarantees a legal result.",
                            "evidence": "you will win",
                        }
                    ],
                }
            )
        )
        run = submit_audit(
            user_input="Will I win my case?", response="Yes, you will win.", enqueue=False
        )
        execute_run(run.pk)
        [request] = server.requests
    run.refresh_from_db()
    result = run.results.get(analyzer_id="legal_risk")
    assert result.status == "ok" and result.score == pytest.approx(0.8) and result.surfaced
    annotation = result.annotations.get()
    assert (annotation.type, annotation.severity, annotation.evidence) == (
        "guarantee",
        "critical",
        "you will win",
    )
    assert "Yes, you will win." in str(request.json["messages"])
    assert request.headers.get("Authorization") == "Bearer sk-test"
