"""Candidate configurations: create/list/read/discard, replay, the comparison with
reviewers' verdicts, promotion on that evidence (409, forced with a reason), history and
restore; shadow analysis of new audits leaves the audits' own results alone."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from django.test import Client

from analyzers.config_store import export_config, save_config
from analyzers.models import CandidateConfig, ConfigChange
from audits.intake.submit import submit_audit
from audits.models import (
    AnalyzerRunRecord,
    Annotation,
    AnnotationKind,
    AuditRun,
    CollisionDigest,
    ShadowResult,
)
from audits.shadow import analysis, hooks
from audits.store.verdicts import record_review

pytestmark = pytest.mark.django_db

SAMPLE = json.loads((Path(__file__).parents[2] / "samples" / "config.json").read_text())
EVIL = "See [the offer](https://offers.evil.example/deal) for details."
CLEAN = "Acme ships orders on Tuesdays and Thursdays."


@pytest.fixture
def config() -> dict:
    data = copy.deepcopy(SAMPLE)
    save_config(data, actor="test")
    hooks.invalidate()
    yield export_config()
    hooks.invalidate()


@pytest.fixture
def admin(admin_key):
    return Api(admin_key)


class Api:
    def __init__(self, key: str):
        self.client, self.headers = Client(), {"Authorization": f"Bearer {key}"}

    def call(self, method: str, path: str, body=None):
        kwargs = {"content_type": "application/json"} if body is not None else {}
        data = json.dumps(body) if body is not None else None
        args = (path, data) if data is not None else (path,)
        return getattr(self.client, method)(*args, headers=self.headers, **kwargs)


def audited(response: str, capture, user_input: str = "Where is the offer?") -> AuditRun:
    with capture(execute=True):
        run = submit_audit(user_input=user_input, response=response)
    run.refresh_from_db()
    assert run.status == "complete"
    return run


def replay(admin: Api, cid: int, body: dict, capture):
    """POST .../replay; the replay is queued when the request's transaction commits."""
    with capture(execute=True):
        response = admin.call("post", f"/api/config/candidates/{cid}/replay", body)
    return response


def allowing(config: dict, host: str) -> dict:
    data = copy.deepcopy(config)
    data["allowed_hosts"] = [*data["allowed_hosts"], host]
    return data


def link_findings(run: AuditRun) -> list[Annotation]:
    return list(Annotation.objects.filter(audit=run, analyzer_id="links"))


# --- create, list, read, discard -------------------------------------------------------


def test_a_candidate_is_created_in_shadow_listed_read_and_discarded(admin, config):
    created = admin.call(
        "post", "/api/config/candidates", {"name": "allow offers", "config": config}
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["status"] == "shadow" and isinstance(body["id"], int)
    listed = admin.call("get", "/api/config/candidates").json()
    assert [(c["id"], c["status"]) for c in listed] == [(body["id"], "shadow")]
    one = admin.call("get", f"/api/config/candidates/{body['id']}").json()
    assert (
        one["name"] == "allow offers" and one["config"]["allowed_hosts"] == config["allowed_hosts"]
    )
    assert one["replay"] == {"status": None, "done": 0, "total": 0, "judged": False, "error": None}
    gone = admin.call("delete", f"/api/config/candidates/{body['id']}")
    assert gone.status_code == 200 and gone.json()["status"] == "discarded"
    assert admin.call("get", f"/api/config/candidates/{body['id']}").json()["status"] == "discarded"
    by_status = {
        status: [
            c["id"] for c in admin.call("get", f"/api/config/candidates?status={status}").json()
        ]
        for status in ("shadow", "discarded")
    }
    assert by_status == {"shadow": [], "discarded": [body["id"]]}
    # (a NUL byte reached PostgreSQL: a 503 there)
    assert admin.call("get", "/api/config/candidates?status=%00").status_code == 422
    assert admin.call("get", "/api/config/candidates/999999").status_code == 404


def test_an_invalid_candidate_is_refused_naming_the_field(admin, config):
    bad = copy.deepcopy(config)
    bad["threshold"] = 3
    response = admin.call("post", "/api/config/candidates", {"name": "bad", "config": bad})
    assert response.status_code == 422
    assert ["body", "config", "threshold"] in [e["loc"] for e in response.json()["detail"]]
    assert (
        admin.call("post", "/api/config/candidates", {"name": "", "config": config}).status_code
        == 422
    )
    assert CandidateConfig.objects.count() == 0


def test_at_most_three_candidates_are_in_shadow_at_once(admin, config):
    for i in range(3):
        assert (
            admin.call(
                "post", "/api/config/candidates", {"name": f"c{i}", "config": config}
            ).status_code
            == 201
        )
    fourth = admin.call("post", "/api/config/candidates", {"name": "c3", "config": config})
    assert fourth.status_code == 409 and "3 candidates" in fourth.json()["detail"]
    first = CandidateConfig.objects.order_by("id").first()
    admin.call("delete", f"/api/config/candidates/{first.pk}")
    assert (
        admin.call("post", "/api/config/candidates", {"name": "c3", "config": config}).status_code
        == 201
    )


def test_candidates_need_an_admin_key(make_key, config):
    reviewer = Api(make_key("review"))
    assert reviewer.call("get", "/api/config/candidates").status_code == 403
    assert (
        reviewer.call("post", "/api/config/candidates", {"name": "x", "config": config}).status_code
        == 403
    )
    assert Api("ra_nope_nope").call("get", "/api/config/candidates").status_code == 401


# --- replay, comparison, promotion --------------------------------------------------------


def test_allowing_a_host_flags_nothing_new_and_promotion_needs_the_confirmed_finding_forced(
    admin, config, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    evil = [audited(EVIL, capture, f"Offer {i}?") for i in range(2)]
    clean = audited(CLEAN, capture, "Shipping?")
    assert all(run.has_card for run in evil) and link_findings(evil[0])
    assert not clean.has_card

    cid = admin.call(
        "post",
        "/api/config/candidates",
        {
            "name": "allow offers",
            "config": allowing(config, "offers.evil.example"),
        },
    ).json()["id"]
    started = replay(admin, cid, {"limit": 10}, capture)
    assert started.status_code == 202, started.content
    progress = admin.call("get", f"/api/config/candidates/{cid}").json()["replay"]
    assert progress["done"] == progress["total"] == 3 and progress["status"] == "done"

    diff = admin.call("get", f"/api/config/candidates/{cid}/diff").json()
    assert diff["compared"] == 3
    assert diff["newly_surfaced"] == [] and diff["findings_gained"] == []
    assert sorted(diff["no_longer_surfaced"]) == sorted(str(r.pk) for r in evil)
    lost = {(f["audit_id"], f["analyzer"], f["type"]) for f in diff["findings_lost"]}
    assert lost == {(str(r.pk), a.analyzer_id, a.type) for r in evil for a in link_findings(r)}
    assert diff["confirmed_findings_lost"] == [] and diff["false_positives_removed"] == []

    confirmed = link_findings(evil[0])[0]
    record_review(audit_id=evil[0].pk, annotation_id=confirmed.pk, verdict="confirmed")
    record_review(
        audit_id=evil[1].pk, annotation_id=link_findings(evil[1])[0].pk, verdict="false_positive"
    )
    diff = admin.call("get", f"/api/config/candidates/{cid}/diff").json()
    assert [f["annotation_id"] for f in diff["confirmed_findings_lost"]] == [confirmed.pk]
    assert [f["audit_id"] for f in diff["false_positives_removed"]] == [str(evil[1].pk)]
    assert diff["precision"]["links"] == {"before": 0.5, "after": None, "verdicts": 2}

    refused = admin.call("post", f"/api/config/candidates/{cid}/promote", {})
    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert [f["annotation_id"] for f in detail["confirmed_findings_lost"]] == [confirmed.pk]
    assert "offers.evil.example" not in export_config()["allowed_hosts"]
    no_reason = admin.call("post", f"/api/config/candidates/{cid}/promote", {"force": True})
    assert no_reason.status_code == 422

    forced = admin.call(
        "post",
        f"/api/config/candidates/{cid}/promote",
        {"force": True, "reason": "the offers site is ours now"},
    )
    assert forced.status_code == 200, forced.content
    assert "offers.evil.example" in export_config()["allowed_hosts"]
    change = ConfigChange.objects.get(pk=forced.json()["version"])
    assert change.reason == "the offers site is ours now" and change.candidate_id == cid
    assert change.source == "candidate" and change.actor.startswith("api-key:")
    assert change.evidence["confirmed_findings_lost"] == 1 and change.evidence["forced"] is True
    assert admin.call("get", f"/api/config/candidates/{cid}").json()["status"] == "promoted"
    history = admin.call("get", "/api/config/history").json()
    assert history[0]["version"] == change.pk and history[0]["reason"] == change.reason
    assert history[0]["candidate"] == cid and history[0]["restorable"]

    previous = history[1]["version"]
    restored = admin.call("post", "/api/config/restore", {"version": previous, "reason": "undo"})
    assert restored.status_code == 200, restored.content
    assert "offers.evil.example" not in export_config()["allowed_hosts"]
    assert export_config()["allowed_hosts"] == config["allowed_hosts"]
    latest = ConfigChange.objects.order_by("-id").first()
    assert latest.source == "restore" and latest.evidence == {"restored_from": previous}


def test_promotion_without_confirmed_losses_needs_no_force(
    admin, config, django_capture_on_commit_callbacks
):
    audited(EVIL, django_capture_on_commit_callbacks)
    cid = admin.call(
        "post",
        "/api/config/candidates",
        {"name": "allow", "config": allowing(config, "offers.evil.example")},
    ).json()["id"]
    replay(admin, cid, {"limit": 5}, django_capture_on_commit_callbacks)
    promoted = admin.call("post", f"/api/config/candidates/{cid}/promote", {})
    assert promoted.status_code == 200
    assert promoted.json()["evidence"]["no_longer_surfaced"] == 1
    assert admin.call("post", f"/api/config/candidates/{cid}/promote", {}).status_code == 409
    assert admin.call("delete", f"/api/config/candidates/{cid}").status_code == 409


def test_restore_refuses_unknown_and_partial_versions(admin, config):
    assert admin.call("post", "/api/config/restore", {"version": 999999}).status_code == 404
    partial = ConfigChange.objects.create(actor="system", source="direct", after={"host": "x"})
    assert admin.call("post", "/api/config/restore", {"version": partial.pk}).status_code == 409


def test_replay_leaves_judged_analyzers_out_unless_asked(
    admin, config, django_capture_on_commit_callbacks
):
    run = audited(EVIL, django_capture_on_commit_callbacks)
    cid = admin.call("post", "/api/config/candidates", {"name": "same", "config": config}).json()[
        "id"
    ]
    replay(admin, cid, {"limit": 1}, django_capture_on_commit_callbacks)
    row = ShadowResult.objects.get(candidate_id=cid, audit=run)
    assert {"bias", "tone"} <= set(row.left_out)
    assert not {"bias", "tone"} & {r["analyzer"] for r in row.results}
    replay(admin, cid, {"limit": 1, "judged": True}, django_capture_on_commit_callbacks)
    row.refresh_from_db()
    assert row.left_out == [] and {"bias", "tone"} <= {r["analyzer"] for r in row.results}
    assert admin.call("get", f"/api/config/candidates/{cid}").json()["replay"]["judged"] is True
    # The same configuration: nothing differs.
    diff = admin.call("get", f"/api/config/candidates/{cid}/diff").json()
    assert diff["counts"] == dict.fromkeys(diff["counts"], 0)


def test_a_replay_is_bounded(admin, config, settings):
    settings.AUDITOR_REPLAY_MAX = 10
    cid = admin.call("post", "/api/config/candidates", {"name": "x", "config": config}).json()["id"]
    assert (
        admin.call("post", f"/api/config/candidates/{cid}/replay", {"limit": 11}).status_code == 422
    )
    assert (
        admin.call("post", f"/api/config/candidates/{cid}/replay", {"limit": 0}).status_code == 422
    )


# --- shadow analysis -----------------------------------------------------------------------


def own_state(run: AuditRun) -> dict:
    run.refresh_from_db()
    return {
        "audit": {f.name: getattr(run, f.attname) for f in AuditRun._meta.concrete_fields},
        "results": list(AnalyzerRunRecord.objects.filter(audit=run).order_by("id").values()),
        "annotations": list(Annotation.objects.filter(audit=run).order_by("id").values()),
        "kinds": list(AnnotationKind.objects.filter(audit=run).order_by("id").values()),
        "digests": list(CollisionDigest.objects.order_by("id").values()),
    }


def test_shadow_analysis_never_changes_an_audits_own_results(
    admin, config, django_capture_on_commit_callbacks
):
    cid = admin.call(
        "post",
        "/api/config/candidates",
        {"name": "allow", "config": allowing(config, "offers.evil.example")},
    ).json()["id"]
    hooks.invalidate()
    run = audited(EVIL, django_capture_on_commit_callbacks)
    shadow = ShadowResult.objects.get(candidate_id=cid, audit=run)  # analysed on its own
    assert shadow.source == "shadow" and not shadow.surfaced
    assert run.has_card and run.cleaned_response != run.response  # the link went, in its own
    # A digest the audit's run left is gone (pruned, or never recorded): the shadow run
    # must not record one either.
    CollisionDigest.objects.all().delete()
    before = own_state(run)
    shadow.delete()
    assert analysis.shadow_audit(str(run.pk), [cid]) == 1
    assert own_state(run) == before
    shadow = ShadowResult.objects.get(candidate_id=cid, audit=run)
    assert not shadow.surfaced and not [f for f in shadow.findings if f["analyzer"] == "links"]
    assert len(shadow.cleaned_digest) == 64


def test_shadow_samples_and_yields_to_waiting_audits(
    admin, config, settings, django_capture_on_commit_callbacks
):
    cid = admin.call(
        "post",
        "/api/config/candidates",
        {"name": "never", "config": config, "shadow_sample_rate": 0.0},
    ).json()["id"]
    hooks.invalidate()
    audited(CLEAN, django_capture_on_commit_callbacks)
    assert not ShadowResult.objects.exists()
    CandidateConfig.objects.filter(pk=cid).update(shadow_sample_rate=1.0)
    hooks.invalidate()
    done = audited(EVIL, django_capture_on_commit_callbacks)
    ShadowResult.objects.all().delete()
    submit_audit(user_input="waiting", response="queued", enqueue=False)  # one audit waits
    assert analysis.shadow_audit(str(done.pk), [cid]) == 0
    assert not ShadowResult.objects.exists()
    assert CandidateConfig.objects.get(pk=cid).shadow_skipped == 1
    settings.AUDITOR_SHADOW_MAX_WAITING = 1
    assert analysis.shadow_audit(str(done.pk), [cid]) == 1
