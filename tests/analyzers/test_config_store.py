"""The configuration: import/export round trip, GET/PUT /api/config, validation, change log."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from analyzers.config_store import ConfigError, export_config, load_config, save_config
from analyzers.models import (
    AllowedHost,
    AnalyzerConfig,
    ApiKey,
    ConfigChange,
    GlobalSettings,
    KnownCustomer,
    PromptLeakPattern,
)

pytestmark = pytest.mark.django_db

SAMPLE = Path("/work/shared/samples/config.json")
if not SAMPLE.exists():
    SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "config.json"


def sample() -> dict:
    return json.loads(SAMPLE.read_text())


def test_import_stores_every_section_in_its_table(tmp_path):
    call_command("import_config", str(SAMPLE), stdout=StringIO())
    assert GlobalSettings.load().threshold == 0.3
    assert list(AllowedHost.objects.values_list("host", flat=True)) == sample()["allowed_hosts"]
    assert KnownCustomer.objects.get(slug="pccomponentes").aliases == ["PC Componentes"]
    assert (
        list(PromptLeakPattern.objects.values_list("pattern", flat=True))
        == (sample()["analyzers"]["prompt_leak"]["patterns"])
    )
    assert AnalyzerConfig.objects.get(analyzer_id="links").settings["check_health"] is False
    assert "patterns" not in AnalyzerConfig.objects.get(analyzer_id="prompt_leak").settings


def _canonical(data: dict) -> str:
    return json.dumps(data, sort_keys=True)


def test_export_then_import_changes_nothing(tmp_path):
    call_command("import_config", str(SAMPLE), stdout=StringIO())
    out = tmp_path / "exported.json"
    call_command("export_config", "-o", str(out))
    first = json.loads(out.read_text())
    changes = ConfigChange.objects.count()
    call_command("import_config", str(out), stdout=StringIO())
    assert ConfigChange.objects.count() == changes  # nothing changed, nothing recorded
    stdout = StringIO()
    call_command("export_config", stdout=stdout)
    assert _canonical(json.loads(stdout.getvalue())) == _canonical(first)


def test_export_keeps_the_sample_values():
    save_config(sample(), actor="test")
    exported = export_config()
    original = sample()
    for key in ("threshold", "max_concurrency", "allowed_hosts", "brand", "known_customers"):
        assert exported[key] == original[key]
    assert exported["analyzers"] == original["analyzers"]
    assert exported["llm"]["api_key_env"] == "AUDITOR_LLM_API_KEY"


def test_import_rejects_an_invalid_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**sample(), "threshold": 7}))
    with pytest.raises(CommandError, match="threshold"):
        call_command("import_config", str(bad))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(CommandError):
        call_command("import_config", str(tmp_path / "broken.json"))


def test_invalid_analyzer_settings_are_rejected_naming_the_setting():
    data = sample()
    data["analyzers"]["redflag"]["max_chars"] = "lots"
    with pytest.raises(ConfigError) as info:
        save_config(data, actor="test")
    assert "analyzers.redflag" in info.value.errors
    assert "max_chars" in " ".join(info.value.errors["analyzers.redflag"])


def test_unknown_settings_keys_are_rejected():
    data = sample()
    data["analyzers"]["redflag"]["max_charz"] = 3
    with pytest.raises(ConfigError):
        save_config(data, actor="test")


def test_every_change_is_logged_with_actor_and_diff():
    save_config(sample(), actor="alice", source="import_config")
    data = sample()
    data["threshold"] = 0.5
    save_config(data, actor="bob", source="api")
    change = ConfigChange.objects.first()
    assert change.actor == "bob"
    assert change.diff == {"threshold": [0.3, 0.5]}
    assert change.before["threshold"] == 0.3 and change.after["threshold"] == 0.5


def test_direct_edits_outside_the_services_are_logged_too():
    save_config(sample(), actor="test")
    before = ConfigChange.objects.count()
    AllowedHost.objects.create(host="new.example")
    assert ConfigChange.objects.count() == before + 1
    assert "new.example" in ConfigChange.objects.first().summary
    assert "new.example" in load_config().allowed_hosts


def test_load_config_sees_changes_immediately():
    save_config(sample(), actor="test")
    assert load_config().threshold == 0.3
    g = GlobalSettings.load()
    g.threshold = 0.7
    g.save()
    assert load_config().threshold == 0.7


def test_defaults_without_any_rows():
    config = load_config()
    assert config.threshold == 0.3
    assert ConfigChange.objects.count() == 0  # reading never writes


def test_llm_never_stores_a_key_only_the_env_var_name():
    data = sample()
    data["llm"]["api_key"] = "sk-secret"
    with pytest.raises(ConfigError, match="llm.api_key"):
        save_config(data, actor="test")


def test_custom_judges_round_trip():
    data = sample()
    data["custom_judges"] = [
        {
            "analyzer_id": "politeness",
            "name": "Politeness",
            "category": "communication",
            "prompt_template": "Is this polite? {response}",
            "mapping": {},
            "enabled": True,
            "settings": {},
        }
    ]
    save_config(data, actor="test")
    assert export_config()["custom_judges"] == data["custom_judges"]


class TestConfigApi:
    def test_get_returns_the_configuration(self, api_client, admin_key):
        save_config(sample(), actor="test")
        r = api_client.get("/api/config", key=admin_key)
        assert r.status_code == 200
        assert r.json() == export_config()

    def test_put_then_get_round_trips(self, api_client, admin_key):
        data = sample()
        data["threshold"] = 0.45
        r = api_client.put("/api/config", data, key=admin_key)
        assert r.status_code == 200, r.content
        assert api_client.get("/api/config", key=admin_key).json()["threshold"] == 0.45
        change = ConfigChange.objects.first()
        assert change.source == "api"
        assert change.actor == f"api-key:{ApiKey.objects.get(scope='admin').name}"

    def test_put_of_the_export_changes_nothing(self, api_client, admin_key):
        save_config(sample(), actor="test")
        exported = api_client.get("/api/config", key=admin_key).json()
        count = ConfigChange.objects.count()
        assert api_client.put("/api/config", exported, key=admin_key).json() == exported
        assert ConfigChange.objects.count() == count

    @pytest.mark.parametrize(
        "patch,field",
        [
            ({"threshold": 2}, "threshold"),
            ({"max_concurrency": 0}, "max_concurrency"),
            ({"surprise": True}, "surprise"),
            ({"analyzers": {"redflag": {"max_chars": "x"}}}, "redflag"),
            ({"known_customers": [{"name": "X"}]}, "slug"),
        ],
    )
    def test_put_invalid_is_422_naming_the_field(self, api_client, admin_key, patch, field):
        r = api_client.put("/api/config", {**sample(), **patch}, key=admin_key)
        assert r.status_code == 422, r.content
        assert field in json.dumps(r.json())
        assert ConfigChange.objects.count() == 0

    def test_put_a_non_object_is_4xx(self, api_client, admin_key):
        r = api_client.put("/api/config", [1, 2], key=admin_key)
        assert 400 <= r.status_code < 500


def test_a_per_analyzer_threshold_is_stored_and_validated():
    config = load_config().model_dump()
    config["analyzers"]["bias"] = {"enabled": True, "threshold": 0.6}
    save_config(config, actor="test")
    assert load_config().threshold_for("bias") == 0.6
    assert export_config()["analyzers"]["bias"]["threshold"] == 0.6
    config["analyzers"]["bias"]["threshold"] = 2
    with pytest.raises(ConfigError, match="threshold"):
        save_config(config, actor="test")


class TestUnknownAnalyzers:
    """Issue 17, finding 7: a configuration naming an unknown analyzer was accepted silently."""

    def test_put_naming_an_unknown_analyzer_is_422(self, api_client, admin_key):
        data = sample()
        data["analyzers"]["redflg"] = {"enabled": True}
        r = api_client.put("/api/config", data, key=admin_key)
        assert r.status_code == 422
        [error] = r.json()["detail"]
        assert error["loc"] == ["body", "analyzers", "redflg"]
        assert "unknown analyzer 'redflg'" in error["msg"]
        assert not AnalyzerConfig.objects.filter(analyzer_id="redflg").exists()

    def test_import_config_refuses_it(self, tmp_path):
        data = sample()
        data["analyzers"]["nope"] = {}
        path = tmp_path / "config.json"
        path.write_text(json.dumps(data))
        with pytest.raises(CommandError, match="unknown analyzer 'nope'"):
            call_command("import_config", str(path), stdout=StringIO())

    def test_a_custom_judge_of_the_same_file_is_known(self, api_client, admin_key):
        data = sample()
        data["analyzers"]["legal"] = {"enabled": False}
        data["custom_judges"] = [
            {"analyzer_id": "legal", "name": "Legal", "prompt_template": "Rate $response"}
        ]
        assert api_client.put("/api/config", data, key=admin_key).status_code == 200

    def test_the_admin_refuses_an_unknown_analyzer(self, staff_user):
        from django.test import Client

        client = Client()
        client.force_login(staff_user)
        page = client.post(
            "/admin/analyzers/analyzerconfig/add/",
            {"analyzer_id": "nope", "enabled": "on", "position": "0", "settings": "{}"},
        )
        assert page.status_code == 200
        assert "unknown analyzer" in str(page.context["adminform"].form.errors["analyzer_id"])
        assert not AnalyzerConfig.objects.filter(analyzer_id="nope").exists()
