"""Admin actions need the permission of what they do; a revoked key is refused at once.

Through the real admin (URL routing, middleware, the action form) with staff accounts that
hold only some permissions.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from analyzers.models import ApiKey
from audits.models import AlertDelivery, AlertRule, AuditRun
from tests.conftest import ApiClient
from tests.factories import make_audit, result

pytestmark = pytest.mark.django_db


def staff_with(django_user_model, client, *codenames: str):
    """A logged-in client of a staff user (not superuser) holding exactly `codenames`."""
    user = django_user_model.objects.create_user(
        f"staff-{len(codenames)}-{'-'.join(codenames)}"[:150],
        password="pw-1234567",
        is_staff=True,
    )
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return client


VIEW_ONLY = ("view_auditrun", "view_alertrule", "view_alertdelivery", "view_apikey")


@pytest.fixture
def viewer(client, django_user_model):
    return staff_with(django_user_model, client, *VIEW_ONLY)


@pytest.fixture
def rule():
    return AlertRule.objects.create(
        name="high", enabled=False, webhook_url="https://hooks.example/x", min_overall_score=0.5
    )


def run_action(client, path: str, action: str, pk) -> None:
    r = client.post(path, {"action": action, "_selected_action": [pk]})
    assert r.status_code in (200, 302), r.status_code


def test_a_view_only_staff_user_sees_the_lists_but_no_actions(viewer, rule, read_key):
    make_audit(results=[result("redflag", 0.9)])
    for path, action in [
        ("/admin/audits/auditrun/", "rerun"),
        ("/admin/audits/alertrule/", "send_test_alert"),
        ("/admin/audits/alertrule/", "enable"),
        ("/admin/audits/alertrule/", "disable"),
        ("/admin/analyzers/apikey/", "revoke"),
    ]:
        page = viewer.get(path)
        assert page.status_code == 200, path
        assert f'value="{action}"' not in page.content.decode(), (path, action)


def test_a_view_only_staff_user_cannot_run_any_admin_action(
    viewer, rule, read_key, django_capture_on_commit_callbacks
):
    original = make_audit(results=[result("redflag", 0.9)])
    key = ApiKey.objects.get()
    with django_capture_on_commit_callbacks(execute=True):
        run_action(viewer, "/admin/audits/auditrun/", "rerun", original.pk)
        run_action(viewer, "/admin/audits/alertrule/", "enable", rule.pk)
        run_action(viewer, "/admin/audits/alertrule/", "send_test_alert", rule.pk)
        run_action(viewer, "/admin/analyzers/apikey/", "revoke", key.pk)

    assert not AuditRun.objects.filter(rerun_of=original).exists()
    rule.refresh_from_db()
    assert rule.enabled is False
    assert not AlertDelivery.objects.exists()
    key.refresh_from_db()
    assert key.revoked_at is None
    assert ApiClient(read_key).get("/api/audits").status_code == 200

    AlertRule.objects.filter(pk=rule.pk).update(enabled=True)
    run_action(viewer, "/admin/audits/alertrule/", "disable", rule.pk)
    rule.refresh_from_db()
    assert rule.enabled is True


def test_staff_with_the_right_permissions_run_the_actions(
    client, django_user_model, rule, read_key, django_capture_on_commit_callbacks
):
    editor = staff_with(
        django_user_model, client, *VIEW_ONLY, "add_auditrun", "change_alertrule", "change_apikey"
    )
    original = make_audit(results=[result("redflag", 0.9)])
    with django_capture_on_commit_callbacks(execute=True):
        run_action(editor, "/admin/audits/auditrun/", "rerun", original.pk)
    assert AuditRun.objects.filter(rerun_of=original).exists()
    run_action(editor, "/admin/audits/alertrule/", "enable", rule.pk)
    rule.refresh_from_db()
    assert rule.enabled is True
    run_action(editor, "/admin/audits/alertrule/", "disable", rule.pk)
    rule.refresh_from_db()
    assert rule.enabled is False
    run_action(editor, "/admin/analyzers/apikey/", "revoke", ApiKey.objects.get().pk)
    assert ApiKey.objects.get().revoked_at is not None


def test_a_revoked_key_is_refused_by_the_next_request(admin_client_su, read_key):
    api = ApiClient(read_key)
    assert api.get("/api/audits").status_code == 200  # verified, now in the key cache
    key = ApiKey.objects.get()
    run_action(admin_client_su, "/admin/analyzers/apikey/", "revoke", key.pk)
    assert api.get("/api/audits").status_code == 401


@pytest.fixture
def admin_client_su(client, staff_user):
    client.force_login(staff_user)
    return client
