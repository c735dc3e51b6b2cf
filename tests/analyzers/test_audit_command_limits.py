"""`manage.py audit` works within the operator's limits, as the server does: a model on
127.0.0.1 is called when AUDITOR_LLM_ALLOW_PRIVATE allows it; without the flag the command
says why the analyzer failed and exits non-zero."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from tests.live_support import BASE_DIR
from tests.llm_server import ScriptedLLMServer, by_task

FRIENDLY = {"tone_detect.v1": {"issues": [], "tone": "friendly"}}


def judged_config(tmp_path, server) -> str:
    """The shipped example configuration with tone judged by `server`'s model."""
    config = json.loads((BASE_DIR / "examples" / "config.json").read_text())
    config["analyzers"]["bias"] = {"enabled": False}
    config["analyzers"]["tone"] = {"enabled": True}
    config["llm"] = {
        "base_url": server.base_url,
        "model": "judge",
        "api_key_env": "AUDITOR_LLM_API_KEY",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps({"user_input": "Help?", "response": "Happy to help."}) + "\n")
    return str(path), str(cases)


def audit(config: str, cases: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("audit", cases, config=config, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_an_allowed_local_model_is_called(tmp_path, settings, monkeypatch):
    settings.AUDITOR_LLM_ALLOW_PRIVATE = True
    monkeypatch.setenv("AUDITOR_LLM_API_KEY", "sk-test")
    with ScriptedLLMServer(responder=by_task(FRIENDLY)) as server:
        out, err = audit(*judged_config(tmp_path, server))
        assert server.tasks() == ["tone_detect.v1"]
    [tone] = [r for r in json.loads(out)["results"] if r["analyzer_id"] == "tone"]
    assert tone["status"] == "ok" and err == ""


def test_a_refused_model_url_fails_the_command_and_says_why(tmp_path, settings, monkeypatch):
    settings.AUDITOR_LLM_ALLOW_PRIVATE = False
    monkeypatch.setenv("AUDITOR_LLM_API_KEY", "sk-test")
    with ScriptedLLMServer(responder=by_task(FRIENDLY)) as server:
        config, cases = judged_config(tmp_path, server)
        err = io.StringIO()
        with pytest.raises(CommandError, match="an analyzer failed on 1 line") as raised:
            call_command("audit", cases, config=config, stdout=io.StringIO(), stderr=err)
        assert server.requests == []
    assert raised.value.returncode == 1
    assert "line 1: tone failed:" in err.getvalue() and "SSRF guard" in err.getvalue()
