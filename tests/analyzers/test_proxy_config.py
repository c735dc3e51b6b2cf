"""The `proxy` configuration section: validated against the operator's limits, and part of
export/import, PUT /api/config and the admin."""

from __future__ import annotations

import json

import pytest

from analyzers.config_store import ConfigError, export_config, load_proxy_config, save_config
from analyzers.proxy_config import ProxyConfig
from tests.live_support import BASE_DIR

SAMPLE = json.loads((BASE_DIR / "tests" / "samples" / "config.json").read_text())


def with_proxy(**proxy):
    return {**SAMPLE, "proxy": proxy}


def test_the_defaults_are_exported(db):
    assert export_config()["proxy"] == {
        "base_url": None,
        "api_key_env": "AUDITOR_UPSTREAM_API_KEY",
        "timeout_s": 60.0,
        "mode": "clean",
        "extra_text": "audit",
        "max_held_bytes": 1_000_000,
    }


def test_a_saved_section_round_trips(db):
    save_config(
        with_proxy(base_url="https://api.openai.com/v1", mode="observe", timeout_s=12), actor="test"
    )
    assert load_proxy_config() == ProxyConfig(
        base_url="https://api.openai.com/v1", mode="observe", timeout_s=12
    )
    exported = export_config()
    save_config(exported, actor="test")
    assert export_config() == exported


@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL", "AUDITOR_LLM_API_KEY"])
def test_a_key_variable_the_operator_does_not_allow_is_refused(db, name):
    with pytest.raises(ConfigError) as caught:
        save_config(with_proxy(api_key_env=name), actor="test")
    assert "AUDITOR_PROXY_KEY_ENVS" in caught.value.errors["proxy.api_key_env"][0]


def test_the_operator_can_allow_other_key_variables(db, settings):
    settings.AUDITOR_PROXY_KEY_ENVS = ["OPENAI_API_KEY"]
    save_config(with_proxy(api_key_env="OPENAI_API_KEY"), actor="test")
    assert load_proxy_config().api_key_env == "OPENAI_API_KEY"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/v1",
        "http://10.0.0.5/v1",
        "http://localhost/v1",
        "http://169.254.169.254/latest",
        "ftp://api.example.com/v1",
        "https://user:pw@api.example.com/v1",
    ],
)
def test_private_or_odd_upstream_urls_are_refused(db, url):
    with pytest.raises(ConfigError) as caught:
        save_config(with_proxy(base_url=url), actor="test")
    assert "proxy.base_url" in caught.value.errors


def test_private_upstreams_need_the_operator_switch(db, settings):
    settings.AUDITOR_PROXY_ALLOW_PRIVATE = True
    save_config(with_proxy(base_url="http://127.0.0.1:8080/v1"), actor="test")
    assert load_proxy_config().base_url == "http://127.0.0.1:8080/v1"


def test_a_bad_mode_is_refused(db):
    with pytest.raises(ConfigError) as caught:
        save_config(with_proxy(mode="leak"), actor="test")
    assert "proxy.mode" in caught.value.errors


@pytest.mark.parametrize(
    ("name", "value"), [("extra_text", "relay"), ("max_held_bytes", 10), ("max_held_bytes", 10**9)]
)
def test_extra_text_and_the_held_bytes_bound_are_validated(db, name, value):
    with pytest.raises(ConfigError) as caught:
        save_config(with_proxy(**{name: value}), actor="test")
    assert f"proxy.{name}" in caught.value.errors


def test_put_api_config_edits_the_section(db, make_key):
    from tests.conftest import ApiClient

    api = ApiClient()
    key = make_key("admin")
    body = with_proxy(base_url="https://api.openai.com/v1", mode="observe")
    response = api.put("/api/config", body, key=key)
    assert response.status_code == 200, response.content
    assert response.json()["proxy"]["mode"] == "observe"
    bad = api.put("/api/config", with_proxy(api_key_env="SECRET_KEY"), key=key)
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "proxy", "api_key_env"]


def test_the_admin_edits_the_section(admin_client):
    from analyzers.models import GlobalSettings

    GlobalSettings.objects.get_or_create(pk=1)
    url = "/admin/analyzers/globalsettings/1/change/"
    page = admin_client.get(url)
    assert b"proxy_base_url" in page.content
    form = {
        "threshold": "0.3",
        "max_concurrency": "4",
        "analyzer_timeout_s": "10",
        "extra": "{}",
        "otel_trace_url_template": "",
        "proxy_base_url": "https://api.openai.com/v1",
        "proxy_api_key_env": "AUDITOR_UPSTREAM_KEY",
        "proxy_timeout_s": "30",
        "proxy_mode": "observe",
        "proxy_extra_text": "drop",
        "proxy_max_held_bytes": "50000",
    }
    response = admin_client.post(url, form)
    assert response.status_code == 302, response.content[:2000]
    config = load_proxy_config()
    assert (config.mode, config.extra_text, config.max_held_bytes) == ("observe", "drop", 50000)
    # a form that leaves them out keeps nothing of them: the defaults
    admin_client.post(url, {k: v for k, v in form.items() if "extra_text" not in k})
    assert load_proxy_config().extra_text == "audit"
    small = admin_client.post(url, {**form, "proxy_max_held_bytes": "5"})
    assert small.status_code == 200 and b"greater than or equal to 10000" in small.content
    assert load_proxy_config().max_held_bytes == 50000
    refused = admin_client.post(url, {**form, "proxy_api_key_env": "SECRET_KEY"})
    assert refused.status_code == 200 and b"AUDITOR_PROXY_KEY_ENVS" in refused.content
