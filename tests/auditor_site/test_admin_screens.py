"""Admin: configuration forms validate with the analyzers' own settings; audits read-only."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages

from analyzers.models import AnalyzerConfig, ApiKey, ConfigChange, GlobalSettings
from audits.models import AuditRun
from tests.factories import annotation, make_audit, result

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, staff_user):
    client.force_login(staff_user)
    return client


def test_every_configuration_screen_renders(admin_client):
    for name in (
        "globalsettings",
        "brand",
        "llmprovider",
        "analyzerconfig",
        "allowedhost",
        "knowncustomer",
        "promptleakpattern",
        "customjudge",
        "configchange",
        "apikey",
    ):
        assert admin_client.get(f"/admin/analyzers/{name}/").status_code == 200, name
        if name != "configchange":
            assert admin_client.get(f"/admin/analyzers/{name}/add/").status_code == 200, name


def test_invalid_analyzer_settings_are_rejected_with_a_message(admin_client):
    r = admin_client.post(
        "/admin/analyzers/analyzerconfig/add/",
        {
            "analyzer_id": "redflag",
            "enabled": "on",
            "settings": '{"max_chars": "lots"}',
            "position": 0,
        },
    )
    assert r.status_code == 200
    assert "max_chars" in r.content.decode()
    assert not AnalyzerConfig.objects.exists()


def test_unknown_setting_keys_are_rejected(admin_client):
    r = admin_client.post(
        "/admin/analyzers/analyzerconfig/add/",
        {"analyzer_id": "redflag", "enabled": "on", "settings": '{"max_charz": 3}', "position": 0},
    )
    assert r.status_code == 200
    assert "max_charz" in r.content.decode()
    assert not AnalyzerConfig.objects.exists()


def test_valid_analyzer_settings_are_saved_and_logged(admin_client, staff_user):
    r = admin_client.post(
        "/admin/analyzers/analyzerconfig/add/",
        {
            "analyzer_id": "redflag",
            "enabled": "on",
            "settings": '{"max_chars": 100}',
            "position": 0,
        },
    )
    assert r.status_code == 302, r.content.decode()[:2000]
    assert AnalyzerConfig.objects.get().settings == {"max_chars": 100}
    change = ConfigChange.objects.get()
    assert change.user == staff_user
    assert change.actor == "user:staff"
    assert change.source == "admin"
    assert "analyzers.redflag" in change.summary


def test_global_settings_form_validates_ranges(admin_client):
    r = admin_client.post(
        "/admin/analyzers/globalsettings/add/",
        {"threshold": "1.5", "max_concurrency": "4", "analyzer_timeout_s": "10", "extra": "{}"},
    )
    assert r.status_code == 200
    assert not GlobalSettings.objects.exists()


def test_llm_provider_has_no_key_field(admin_client):
    body = admin_client.get("/admin/analyzers/llmprovider/add/").content.decode()
    assert 'name="api_key_env"' in body
    assert 'name="api_key"' not in body


def test_a_new_api_key_is_shown_once_and_stored_hashed(admin_client):
    r = admin_client.post(
        "/admin/analyzers/apikey/add/", {"name": "ci", "scope": "read"}, follow=True
    )
    assert r.status_code == 200
    texts = [str(m) for m in get_messages(r.wsgi_request)] or [r.content.decode()]
    key = ApiKey.objects.get(name="ci")
    shown = next(t for t in texts if f"ra_{key.prefix}_" in t)
    raw = shown[shown.index("ra_") :].split()[0]
    assert ApiKey.authenticate(raw) == key
    assert raw.split("_", 2)[2] not in key.secret_hash


def test_revoke_action(admin_client, read_key):
    key = ApiKey.objects.get()
    admin_client.post(
        "/admin/analyzers/apikey/", {"action": "revoke", "_selected_action": [key.pk]}
    )
    assert ApiKey.authenticate(read_key) is None


def test_audit_runs_are_read_only_with_details_inline(admin_client):
    run = make_audit(
        results=[result("grounding", 0.9, [annotation("UNGROUNDED_CUSTOMER_CLAIM")])],
        user_input="<script>alert(1)</script>",
    )
    assert admin_client.get("/admin/audits/auditrun/").status_code == 200
    page = admin_client.get(f"/admin/audits/auditrun/{run.pk}/change/")
    body = page.content.decode()
    assert page.status_code == 200
    assert "UNGROUNDED_CUSTOMER_CLAIM" in body
    assert "[AUDIT] start" in body
    assert "<script>alert(1)</script>" not in body
    r = admin_client.post(f"/admin/audits/auditrun/{run.pk}/change/", {"status": "failed"})
    assert r.status_code == 403
    run.refresh_from_db()
    assert run.status == "complete"


def test_rerun_action_creates_a_new_linked_run(admin_client, django_capture_on_commit_callbacks):
    original = make_audit(results=[result("redflag", 0.9)])
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(
            "/admin/audits/auditrun/", {"action": "rerun", "_selected_action": [original.pk]}
        )
    rerun = AuditRun.objects.get(rerun_of=original)
    assert rerun.status == "complete"  # ran with the current configuration
    assert rerun.user_input == original.user_input
    original.refresh_from_db()
    assert original.results.get().score == 0.9  # the original is kept


def test_non_staff_users_cannot_open_the_admin(client, plain_user):
    client.force_login(plain_user)
    assert client.get("/admin/audits/auditrun/").status_code == 302


def test_the_link_table_shows_model_urls_and_labels_as_text(admin_client):
    import json

    from audits.models import AuditLinks

    run = make_audit()
    evil = '"><img src=x onerror=alert(1)>'
    link = {
        "url": f"https://evil.example/{evil}",
        "label": evil,
        "decision": "stripped",
        "reason": evil,
        "http_status": None,
        "healthy": None,
    }
    AuditLinks.objects.create(audit=run, rows=json.dumps([link]))
    page = admin_client.get(f"/admin/audits/auditrun/{run.pk}/change/").content.decode()
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<img src=x onerror" not in page
