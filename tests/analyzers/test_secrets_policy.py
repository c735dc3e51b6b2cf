"""The configuration cannot read the server's secrets or reach loopback.

`llm.api_key_env` names only variables the operator allows, `llm.base_url` passes the SSRF
guard unless AUDITOR_LLM_ALLOW_PRIVATE, redflag validators live under the operator's module
prefixes, and per-audit options that only the configuration may hold are a 422.
"""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from analyzers.config_store import export_config
from analyzers.models import AnalyzerConfig, CustomJudge, LLMProvider
from audits.execution.execute import execute_run
from audits.intake.submit import submit_audit
from tests.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.django_db

VALIDATOR_CALLS: list[str] = []


def recording_validator(*, text, parsed, context):
    VALIDATOR_CALLS.append(text)
    return True


def with_llm(**llm) -> dict:
    config = export_config()
    config["llm"] = {**config["llm"], **llm}
    return config


def put(api_client, admin_key, config):
    return api_client.put("/api/config", config, key=admin_key)


def error_paths(response) -> set[str]:
    return {".".join(map(str, e["loc"][1:])) for e in response.json()["detail"]}


# --- llm.api_key_env and llm.base_url through PUT /api/config ---------------------------


def test_the_reported_attack_is_a_422_naming_both_fields(api_client, admin_key):
    r = put(
        api_client,
        admin_key,
        with_llm(base_url="http://127.0.0.1:8999/v1", model="m", api_key_env="DATABASE_URL"),
    )
    assert r.status_code == 422
    assert error_paths(r) == {"llm.base_url", "llm.api_key_env"}
    assert LLMProvider.load().api_key_env == "AUDITOR_LLM_API_KEY"


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL", "AUDITOR_LLM_", "auditor_llm_x"])
def test_key_variables_outside_the_allowed_prefix_are_refused(api_client, admin_key, name):
    r = put(api_client, admin_key, with_llm(api_key_env=name))
    assert r.status_code == 422 and error_paths(r) == {"llm.api_key_env"}
    assert "AUDITOR_LLM_KEY_ENVS" in r.json()["detail"][0]["msg"]


def test_the_operator_decides_which_key_variables_are_allowed(api_client, admin_key, settings):
    assert put(api_client, admin_key, with_llm(api_key_env="AUDITOR_LLM_JUDGE")).status_code == 200
    settings.AUDITOR_LLM_KEY_ENVS = ["OPENAI_API_KEY"]
    assert put(api_client, admin_key, with_llm(api_key_env="OPENAI_API_KEY")).status_code == 200
    assert put(api_client, admin_key, with_llm(api_key_env="AUDITOR_LLM_JUDGE")).status_code == 422


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8999/v1",
        "http://localhost/v1",
        "http://10.0.0.5/v1",
        "http://169.254.169.254/latest",
        "http://[::1]/v1",
        "http://2130706433/v1",
        "https://api.example.com:8443/v1",
        "ftp://api.example.com/v1",
        "https://user:pw@api.example.com/v1",
    ],
)
def test_private_or_odd_model_urls_are_refused(api_client, admin_key, url):
    r = put(api_client, admin_key, with_llm(base_url=url, model="m"))
    assert r.status_code == 422 and error_paths(r) == {"llm.base_url"}


def test_a_local_model_server_is_an_explicit_setting(api_client, admin_key, settings):
    config = with_llm(base_url="http://127.0.0.1:11434/v1", model="llama")
    assert put(api_client, admin_key, config).status_code == 422
    settings.AUDITOR_LLM_ALLOW_PRIVATE = True
    assert put(api_client, admin_key, config).status_code == 200
    assert (
        put(
            api_client, admin_key, with_llm(base_url="https://api.example.com/v1", model="m")
        ).status_code
        == 200
    )


def test_import_config_refuses_a_secret_key_variable(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(with_llm(api_key_env="SECRET_KEY")))
    with pytest.raises(CommandError, match="llm.api_key_env"):
        call_command("import_config", str(path), stdout=StringIO())


def test_the_admin_form_refuses_them_too(staff_user):
    client = Client()
    client.force_login(staff_user)
    page = client.post(
        "/admin/analyzers/llmprovider/add/",
        {
            "base_url": "http://127.0.0.1:8999/v1",
            "model": "m",
            "api_key_env": "DATABASE_URL",
            "timeout_s": "30",
            "max_concurrency": "4",
            "max_retries": "3",
            "extra": "{}",
        },
    )
    assert page.status_code == 200  # the form again, with errors
    errors = page.context["adminform"].form.errors
    assert set(errors) == {"base_url", "api_key_env"}
    assert not LLMProvider.objects.exists()


# --- the running engine enforces the same limits (rows written before them) -------------


def judged_audit(server, *, api_key_env: str):
    """A stored (unvalidated) model configuration and a custom judge that calls it."""
    LLMProvider.objects.update_or_create(
        pk=1, defaults={"base_url": server.base_url, "model": "judge", "api_key_env": api_key_env}
    )
    CustomJudge.objects.create(
        analyzer_id="judge",
        name="Judge",
        category="compliance",
        prompt_template="Rate: $response",
        mapping={"score_field": "risk"},
    )
    for analyzer_id in ("bias", "tone"):  # only the judge calls the model
        AnalyzerConfig.objects.create(analyzer_id=analyzer_id, enabled=False)
    server.enqueue(Reply(content={"risk": 0.1}))
    run = submit_audit(user_input="q", response="an answer", enqueue=False)
    execute_run(run.pk)
    return run.results.get(analyzer_id="judge")


def test_a_stored_secret_variable_is_never_sent(settings, monkeypatch):
    settings.AUDITOR_LLM_ALLOW_PRIVATE = True  # so only the key rule is under test
    monkeypatch.setenv("SERVER_ONLY_SECRET", "s3cret-value")
    with ScriptedLLMServer() as server:
        result = judged_audit(server, api_key_env="SERVER_ONLY_SECRET")
        sent = [r.headers.get("Authorization", "") for r in server.requests]
    assert not any("s3cret-value" in h for h in sent)
    assert result.status == "failed" and "api_key_env" in result.error


def test_a_stored_loopback_model_url_is_never_requested(monkeypatch):
    monkeypatch.setenv("AUDITOR_LLM_API_KEY", "sk-test")
    with ScriptedLLMServer() as server:
        result = judged_audit(server, api_key_env="AUDITOR_LLM_API_KEY")
        assert server.requests == []
    assert result.status == "failed" and "SSRF guard" in result.error


def test_an_allowed_local_model_is_called_with_its_key(settings, monkeypatch):
    settings.AUDITOR_LLM_ALLOW_PRIVATE = True
    monkeypatch.setenv("AUDITOR_LLM_API_KEY", "sk-test")
    with ScriptedLLMServer() as server:
        result = judged_audit(server, api_key_env="AUDITOR_LLM_API_KEY")
        [request] = server.requests
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert result.status == "ok"


# --- redflag validators -------------------------------------------------------------------


def with_validators(paths: list[str]) -> dict:
    config = export_config()
    config["analyzers"]["redflag"] = {**config["analyzers"].get("redflag", {}), "validators": paths}
    return config


def test_any_importable_callable_is_no_longer_a_validator(api_client, admin_key):
    r = put(api_client, admin_key, with_validators(["os.system"]))
    assert r.status_code == 422 and error_paths(r) == {"analyzers.redflag.validators"}


def test_validators_under_the_allowed_modules_are_accepted(api_client, admin_key, settings):
    settings.AUDITOR_VALIDATOR_MODULES = [__name__]
    path = f"{__name__}.recording_validator"
    assert put(api_client, admin_key, with_validators([path])).status_code == 200
    settings.AUDITOR_VALIDATOR_MODULES = [__name__[:-3]]  # a prefix of the name only
    assert put(api_client, admin_key, with_validators([path])).status_code == 422


def test_the_admin_refuses_a_validator_outside_the_allowed_modules(staff_user):
    client = Client()
    client.force_login(staff_user)
    page = client.post(
        "/admin/analyzers/analyzerconfig/add/",
        {
            "analyzer_id": "redflag",
            "enabled": "on",
            "position": "0",
            "settings": json.dumps({"validators": ["os.system"]}),
        },
    )
    assert page.status_code == 200
    assert "AUDITOR_VALIDATOR_MODULES" in str(page.context["adminform"].form.errors)


def test_a_stored_validator_outside_the_allowed_modules_is_never_imported(settings):
    VALIDATOR_CALLS.clear()
    AnalyzerConfig.objects.update_or_create(
        analyzer_id="redflag",
        defaults={"settings": {"validators": [f"{__name__}.recording_validator"]}},
    )
    settings.AUDITOR_VALIDATOR_MODULES = [__name__]
    allowed = submit_audit(user_input="q", response="allowed", enqueue=False)
    execute_run(allowed.pk)
    assert VALIDATOR_CALLS == ["allowed"]  # the control: an allowed validator runs

    settings.AUDITOR_VALIDATOR_MODULES = []
    run = submit_audit(user_input="q", response="refused", enqueue=False)
    execute_run(run.pk)
    assert VALIDATOR_CALLS == ["allowed"]
    [annotation] = run.results.get(analyzer_id="redflag").annotations.all()
    assert annotation.label == "Validator not allowed"


# --- per-audit options that only the configuration may hold ---------------------------


def test_validators_in_per_audit_options_are_a_422(api_client, ingest_key):
    r = api_client.post(
        "/api/audits",
        {"user_input": "q", "response": "a", "options": {"redflag": {"validators": ["os.system"]}}},
        key=ingest_key,
    )
    assert r.status_code == 422
    assert "only be set in the configuration" in r.json()["detail"][0]["msg"]
