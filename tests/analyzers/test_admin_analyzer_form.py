"""The analyzer admin form is generated from the analyzer's pydantic Settings model."""

from __future__ import annotations

import html
import re

import pytest

from analyzers.models import AnalyzerConfig, ConfigChange, CustomJudge

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, staff_user):
    client.force_login(staff_user)
    return client


def change_url(config: AnalyzerConfig) -> str:
    return f"/admin/analyzers/analyzerconfig/{config.pk}/change/"


def form_data(page: str) -> dict[str, str]:
    """What the browser would post back for the rendered form, untouched."""
    data = {}
    for tag in re.findall(r"<input[^>]*>", page):
        name = re.search(r'name="([^"]+)"', tag)
        if not name or 'type="submit"' in tag:
            continue
        if 'type="checkbox"' in tag:
            if "checked" in tag:
                data[name.group(1)] = "on"
            continue
        value = re.search(r'value="([^"]*)"', tag)
        data[name.group(1)] = html.unescape(value.group(1)) if value else ""
    for name, body in re.findall(r'<textarea[^>]*name="([^"]+)"[^>]*>(.*?)</textarea>', page, re.S):
        data[name] = html.unescape(body.strip("\n"))
    for name, options in re.findall(r'<select[^>]*name="([^"]+)"[^>]*>(.*?)</select>', page, re.S):
        selected = re.search(r'<option value="([^"]*)"[^>]*selected', options)
        data[name] = selected.group(1) if selected else ""
    return data


def test_redflag_shows_one_field_per_setting_with_default_and_help(admin_client):
    config = AnalyzerConfig.objects.create(analyzer_id="redflag", settings={"max_chars": 100})
    page = admin_client.get(change_url(config)).content.decode()
    for key in (
        "max_chars",
        "max_tokens",
        "token_spike_threshold",
        "require_json",
        "required_fields",
        "detect_self_contradiction",
        "track_collisions",
    ):
        assert f'name="setting__{key}"' in page, key
    assert 'name="threshold"' in page
    assert re.search(r'name="setting__max_chars"[^>]*value="100"', page)  # the stored value
    assert re.search(r'name="setting__max_tokens"[^>]*value="750"', page)  # the default
    assert "Default: 750." in page
    assert "— default (on) —" in page  # detect_self_contradiction, not stored


def test_saving_the_form_untouched_keeps_the_settings_as_they_were(admin_client):
    config = AnalyzerConfig.objects.create(analyzer_id="redflag", settings={"max_chars": 100})
    data = form_data(admin_client.get(change_url(config)).content.decode())
    r = admin_client.post(change_url(config), data)
    assert r.status_code == 302, r.content.decode()[:3000]
    config.refresh_from_db()
    assert config.settings == {"max_chars": 100}


def test_changed_fields_are_stored_with_their_types(admin_client):
    config = AnalyzerConfig.objects.create(analyzer_id="redflag", settings={})
    data = form_data(admin_client.get(change_url(config)).content.decode())
    data.update(
        {
            "setting__require_json": "true",
            "setting__required_fields": "move\nnext.peg\n",
            "setting__max_tokens": "",
            "threshold": "0.45",
            "setting__track_collisions": "false",
            "setting__detect_self_contradiction": "true",
        }
    )  # the default: not stored
    r = admin_client.post(change_url(config), data)
    assert r.status_code == 302, r.content.decode()[:3000]
    config.refresh_from_db()
    assert config.settings == {
        "require_json": True,
        "required_fields": ["move", "next.peg"],
        "max_tokens": None,
        "track_collisions": False,
        "threshold": 0.45,
    }
    assert ConfigChange.objects.filter(summary__contains="analyzers.redflag").exists()


def test_invalid_values_are_refused_on_their_field(admin_client):
    config = AnalyzerConfig.objects.create(analyzer_id="bias", settings={})
    data = form_data(admin_client.get(change_url(config)).content.decode())
    data["setting__max_counter_arguments"] = "99"  # le=10 in BiasSettings
    r = admin_client.post(change_url(config), data)
    assert r.status_code == 200
    page = r.content.decode()
    assert re.search(r"errorlist[^<]*<li>[^<]*(less than or equal to 10)", page)
    config.refresh_from_db()
    assert config.settings == {}


def test_pydantic_errors_name_the_field(admin_client):
    config = AnalyzerConfig.objects.create(analyzer_id="links", settings={})
    data = form_data(admin_client.get(change_url(config)).content.decode())
    data["setting__timeout_s"] = "0"  # gt=0: only the model knows
    r = admin_client.post(change_url(config), data)
    assert r.status_code == 200
    errors = r.context["adminform"].form.errors
    assert "setting__timeout_s" in errors and "greater than 0" in errors["setting__timeout_s"][0]


def test_literal_settings_are_a_select(admin_client):
    config = AnalyzerConfig.objects.create(analyzer_id="links", settings={"bare_urls": "defang"})
    page = admin_client.get(change_url(config)).content.decode()
    assert re.search(r'<select name="setting__bare_urls"', page)
    assert re.search(r'<option value="defang" selected>', page)


def test_prompt_leak_patterns_stay_on_their_own_screen(admin_client):
    config = AnalyzerConfig.objects.create(analyzer_id="prompt_leak", settings={})
    page = admin_client.get(change_url(config)).content.decode()
    assert 'name="setting__patterns"' not in page


def test_a_custom_judge_has_the_threshold_field(admin_client):
    CustomJudge.objects.create(
        analyzer_id="politeness", name="Politeness", prompt_template="Rate $response"
    )
    config = AnalyzerConfig.objects.create(analyzer_id="politeness", settings={})
    page = admin_client.get(change_url(config)).content.decode()
    assert 'name="threshold"' in page


def test_a_custom_judge_form_has_one_field_per_mapping_key(admin_client):
    judge = CustomJudge.objects.create(
        analyzer_id="politeness",
        name="Politeness",
        prompt_template="Rate $response",
        mapping={"score_field": "risk", "score_scale": 10},
    )
    url = f"/admin/analyzers/customjudge/{judge.pk}/change/"
    page = admin_client.get(url).content.decode()
    assert re.search(r'name="setting__score_field"[^>]*value="risk"', page)
    assert re.search(r'name="setting__evidence_field"[^>]*value="evidence"', page)
    data = form_data(page)
    data["setting__score_scale"] = "5"
    r = admin_client.post(url, data)
    assert r.status_code == 302, r.content.decode()[:3000]
    judge.refresh_from_db()
    assert judge.mapping == {"score_field": "risk", "score_scale": 5.0}
    data["setting__score_scale"] = "0"  # gt=0
    r = admin_client.post(url, data)
    assert r.status_code == 200
    assert "setting__score_scale" in r.context["adminform"].form.errors
