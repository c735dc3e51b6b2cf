"""`manage.py setup_demo`: demo configuration, demo audits through the engine, admin login."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from analyzers.config_store import load_config
from audits.models import Annotation, AuditRun


def run(**options) -> str:
    out = StringIO()
    call_command("setup_demo", stdout=out, **options)
    return out.getvalue()


@pytest.mark.django_db
def test_first_run_loads_everything_and_later_runs_change_nothing(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    first = run(audits=40, days=14)
    assert load_config().allowed_hosts == ["acme.example", "www.acme.example", "docs.acme.example"]
    assert AuditRun.objects.count() == 40
    assert AuditRun.objects.filter(status="complete").count() == 40
    assert AuditRun.objects.filter(has_card=True).exists()
    assert AuditRun.objects.filter(has_card=False).exists()
    assert Annotation.objects.values("type").distinct().count() >= 5
    days = {d.date() for d in AuditRun.objects.values_list("created_at", flat=True)}
    assert len(days) > 3  # spread over time, not all now
    password = (tmp_path / "demo-admin.txt").read_text().strip()
    assert f"Password:  {password}" in first
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(password)

    second = run(audits=40, days=14)
    assert AuditRun.objects.count() == 40
    assert f"Password:  {password}" in second
    assert "Loaded" not in second
