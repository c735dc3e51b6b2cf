"""Retention: with `retention_days` set, the audits older than that are erased (by the
periodic purge and by `manage.py purge_audits`), a bounded batch per transaction; the
tuning page states the policy in effect."""

from __future__ import annotations

import io
import threading
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from analyzers.config_store import save_config
from audits.models import AuditRun, DeletionLog, TraceLine
from audits.store import erasure
from tests.factories import make_audit

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
LIMIT = timedelta(days=30)


@pytest.fixture
def frozen(monkeypatch):
    """The clock stopped at NOW (django.utils.timezone.now, which the purge reads)."""
    monkeypatch.setattr(timezone, "now", lambda: NOW)


def aged(age: timedelta) -> AuditRun:
    run = make_audit(trace=["[AUDIT] line"])
    AuditRun.objects.filter(pk=run.pk).update(created_at=NOW - age)
    return run


@pytest.mark.django_db(transaction=True)
def test_the_periodic_purge_erases_exactly_what_is_past_the_retention(frozen):
    save_config({"retention_days": 30}, actor="test")
    expired = aged(LIMIT + timedelta(seconds=1))
    boundary = aged(LIMIT)  # exactly 30 days old: kept until the next second
    young = aged(LIMIT - timedelta(seconds=1))
    erasure._retention_stop.set()  # one pass, then the loop returns
    try:
        loop = threading.Thread(target=erasure._purge_forever, args=(3600,))  # its own connection
        loop.start()
        loop.join(30)
    finally:
        erasure._retention_stop.clear()
    assert set(AuditRun.objects.values_list("pk", flat=True)) == {boundary.pk, young.pk}
    assert not TraceLine.objects.filter(audit_id=expired.pk).exists()
    log = DeletionLog.objects.get()
    assert (log.source, log.count, log.filter["older_than_days"]) == ("retention", 1, 30)


def test_nothing_is_purged_or_logged_without_a_retention(frozen):
    aged(timedelta(days=3650))
    assert erasure.purge_expired() == 0
    assert AuditRun.objects.count() == 1 and not DeletionLog.objects.exists()


def test_a_purge_goes_a_bounded_batch_per_transaction(frozen):
    for _ in range(5):
        aged(timedelta(days=40))
    batches = []
    count = erasure.erase(
        erasure.expired(30),
        actor="t",
        source="command",
        filter={},
        batch=2,
        on_batch=batches.append,
    )
    assert count == 5 and len(batches) == 3


def test_the_command_counts_with_dry_run_and_erases_without(frozen):
    for age in (40, 40, 10):
        aged(timedelta(days=age))
    out = io.StringIO()
    call_command("purge_audits", "--older-than-days", "30", "--dry-run", stdout=out)
    assert out.getvalue().startswith("2 audit(s)") and AuditRun.objects.count() == 3
    out = io.StringIO()
    call_command("purge_audits", "--older-than-days", "30", stdout=out)
    assert out.getvalue().startswith("2 audit(s)") and AuditRun.objects.count() == 1
    assert DeletionLog.objects.get().source == "command"
    with pytest.raises(CommandError, match="no retention configured"):
        call_command("purge_audits")
    save_config({"retention_days": 5}, actor="test")
    call_command("purge_audits", stdout=io.StringIO())
    assert AuditRun.objects.count() == 0


def test_the_tuning_page_states_the_policy_in_effect(client, staff_user):
    client.force_login(staff_user)
    page = client.get("/tuning/").content.decode()
    assert "audits are kept until erased" in page and "stored as they arrived" in page
    save_config(
        {"retention_days": 90, "privacy": {"action": "redact", "store": "redacted"}}, actor="test"
    )
    page = client.get("/tuning/").content.decode()
    assert "audits older than 90 days are erased" in page
    assert "redacted in the cleaned response, stored redacted" in page
