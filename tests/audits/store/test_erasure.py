"""Erasure: `DELETE /api/audits/{id}` and `POST /api/audits/delete` (by external id, metadata
or date) take the audits and every row derived from them: afterwards the audit is 404
(its cached answer too), absent from exports, from every table and from the SQLite files'
bytes; each erasure is logged without content. The admin's delete is the same erasure."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from analyzers.config_store import save_config
from analyzers.models import CandidateConfig
from audits.intake.submit import rerun_audit
from audits.models import (
    AlertDelivery,
    AlertRule,
    AnalyzerRunRecord,
    Annotation,
    AuditRun,
    CollisionDigest,
    DeletionLog,
    Review,
    ShadowResult,
    TraceLine,
)
from tests.conftest import ApiClient
from tests.privacy_support import files_holding, fresh_card, fresh_key, tables_holding

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _config():
    save_config({"allowed_hosts": ["acme.example"]}, actor="test")


@pytest.fixture
def admin(admin_key) -> ApiClient:
    return ApiClient(admin_key)


def submit(key: str, **fields) -> tuple[AuditRun, tuple[str, ...]]:
    """One audit with its own card number and key, analysed, with a verdict, a shadow
    result, an alert delivery and a duplicate-output record: its raw values."""
    card, secret = fresh_card(), fresh_key()
    body = {
        "user_input": f"card {card}",
        "sources": [{"title": "t", "text": secret}],
        "response": f"Card {card}, key {secret}; see [docs](https://evil.example/{secret}).",
        **fields,
    }
    r = ApiClient(key).post("/api/audits", body)
    assert r.status_code == 202, r.content
    run = AuditRun.objects.get(pk=r.json()["id"])
    assert run.status == "complete"
    annotation = Annotation.objects.filter(audit=run).first()
    Review.objects.create(
        audit=run, annotation=annotation, verdict="confirmed", comment=f"yes, {card}"
    )
    candidate = CandidateConfig.objects.create(name="c", config={})
    ShadowResult.objects.create(candidate=candidate, audit=run, findings=[{"evidence": card}])
    rule = AlertRule.objects.create(name="r", webhook_url="https://hooks.acme.example/x")
    AlertDelivery.objects.create(rule=rule, audit=run, payload={"evidence": secret})
    CollisionDigest.objects.create(
        scope_hash="s" * 64, digest=secret[:60], first_family=str(run.pk)
    )
    return run, (card, card.replace(" ", ""), secret)


def assert_erased(run: AuditRun, raw: tuple[str, ...], admin: ApiClient) -> None:
    assert admin.get(f"/api/audits/{run.pk}").status_code == 404
    export = admin.get("/api/audits/export", {"format": "jsonl"})
    assert str(run.pk) not in b"".join(export.streaming_content).decode()
    assert tables_holding(raw) == []
    assert files_holding(raw) == []
    for model in (AnalyzerRunRecord, Annotation, TraceLine, Review, ShadowResult, AlertDelivery):
        assert not model.objects.filter(audit_id=run.pk).exists(), model
    assert not CollisionDigest.objects.filter(first_family=str(run.pk)).exists()


def test_erasure_by_id_takes_every_derived_row_and_the_cached_answer(ingest_key, admin):
    run, raw = submit(ingest_key)
    kept, kept_raw = submit(ingest_key)
    assert admin.get(f"/api/audits/{run.pk}").status_code == 200  # now in the polling cache
    assert TraceLine.objects.filter(audit=run).exists()
    r = admin.client.delete(f"/api/audits/{run.pk}", headers=admin._headers(None))
    assert r.status_code == 200 and r.json() == {"deleted": 1}
    assert_erased(run, raw, admin)
    assert admin.get(f"/api/audits/{kept.pk}").status_code == 200
    assert "audits_auditrun.response" in tables_holding(kept_raw)  # the check can fail
    log = DeletionLog.objects.get()
    assert (log.source, log.count, log.filter) == ("api", 1, {"id": str(run.pk)})
    assert log.actor.startswith("api-key:")
    again = admin.client.delete(f"/api/audits/{run.pk}", headers=admin._headers(None))
    assert again.status_code == 404


def test_erasure_by_external_id(ingest_key, admin):
    run, raw = submit(ingest_key, external_id="conv-42")
    other, _ = submit(ingest_key, external_id="conv-43")
    r = admin.post("/api/audits/delete", {"external_id": "conv-42"})
    assert r.status_code == 200 and r.json() == {"deleted": 1}
    assert_erased(run, raw, admin)
    assert AuditRun.objects.filter(pk=other.pk).exists()
    assert DeletionLog.objects.get().filter == {"external_id": "conv-42"}


def test_erasure_by_metadata_takes_all_of_a_users_audits(ingest_key, admin):
    mine = [submit(ingest_key, metadata={"user_id": "u-1", "n": i}) for i in range(2)]
    other, _ = submit(ingest_key, metadata={"user_id": "u-2"})
    r = admin.post("/api/audits/delete", {"metadata": {"user_id": "u-1"}})
    assert r.status_code == 200 and r.json() == {"deleted": 2}
    for run, raw in mine:
        assert_erased(run, raw, admin)
    assert AuditRun.objects.filter(pk=other.pk).exists()


def test_erasure_by_date(ingest_key, admin):
    old, raw = submit(ingest_key)
    new, _ = submit(ingest_key)
    AuditRun.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=40))
    # an offset ISO 8601 allows and PostgreSQL cannot hold: the same instant in UTC
    month_ago = timezone.now() - timedelta(days=30)
    before = month_ago.astimezone(timezone.get_fixed_timezone(-(22 * 60 + 48))).isoformat()
    r = admin.post("/api/audits/delete", {"before": before})
    assert r.status_code == 200 and r.json() == {"deleted": 1}
    assert_erased(old, raw, admin)
    assert AuditRun.objects.filter(pk=new.pk).exists()
    late = {"before": "9999-12-31T23:59:59-20:00"}  # past the last date once in UTC
    assert admin.post("/api/audits/delete", late).status_code == 422


def test_a_rerun_of_an_erased_audit_stays_unlinked(ingest_key, admin):
    run, _ = submit(ingest_key)
    rerun_id = rerun_audit(run).pk
    assert admin.client.delete(f"/api/audits/{run.pk}", headers=admin._headers(None)).json() == {
        "deleted": 1
    }
    assert AuditRun.objects.get(pk=rerun_id).rerun_of_id is None


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"metadata": {}},
        {"before": "2024-01-01T00:00:00"},
        {"metadata": {"user_id__contains": "u"}},
        {"id": "x"},
    ],
)
def test_a_filter_that_names_nothing_or_too_much_is_refused(admin, body):
    assert admin.post("/api/audits/delete", body).status_code == 422
    assert not DeletionLog.objects.exists()


def test_erasure_needs_the_admin_scope(ingest_key, read_key, make_key):
    run, _ = submit(ingest_key)
    for key in (read_key, make_key("review")):
        client = ApiClient(key)
        assert (
            client.client.delete(f"/api/audits/{run.pk}", headers=client._headers(None)).status_code
            == 403
        )
        assert client.post("/api/audits/delete", {"external_id": "x"}).status_code == 403
    assert AuditRun.objects.filter(pk=run.pk).exists()


def test_the_admin_delete_is_an_erasure_with_a_confirmation_page(
    ingest_key, admin, staff_user, client
):
    run, raw = submit(ingest_key)
    client.force_login(staff_user)
    form = {"action": "delete_selected", "_selected_action": [str(run.pk)]}
    page = client.post("/admin/audits/auditrun/", form)
    assert page.status_code == 200 and b"Are you sure" in page.content
    assert AuditRun.objects.filter(pk=run.pk).exists()
    done = client.post("/admin/audits/auditrun/", {**form, "post": "yes"})
    assert done.status_code == 302
    assert_erased(run, raw, admin)
    log = DeletionLog.objects.get()
    assert (log.source, log.actor, log.count) == ("admin", "admin:staff", 1)
