"""Verdicts: recording and history, the reviews API, `reviews` in the Audit, the filters,
and the verdict forms on the dashboard."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audits.models import Annotation, AuditRun, Review
from audits.store.verdicts import ReviewError, record_review
from tests.factories import annotation, make_audit, result


@pytest.fixture
def flagged(db) -> AuditRun:
    return make_audit(
        results=[
            result("grounding", 0.8, [annotation("UNGROUNDED_CUSTOMER_CLAIM", "critical")]),
            result("tone", 0.6, [annotation("dismissive", "warning", evidence="just read")]),
        ]
    )


@pytest.fixture
def staff_client(staff_user) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


def _ann(audit: AuditRun, type_: str) -> Annotation:
    return audit.annotations.get(type=type_)


# --- recording ---------------------------------------------------------------------------


def test_a_new_verdict_replaces_the_current_one_and_keeps_the_history(flagged, staff_user):
    first = record_review(audit_id=flagged.pk, verdict="confirmed", user=staff_user)
    second = record_review(
        audit_id=flagged.pk, verdict="false_positive", comment="known customer", user=staff_user
    )
    first.refresh_from_db()
    assert not first.is_current and second.is_current
    history = list(flagged.reviews.values_list("verdict", "is_current", "reviewer_name"))
    assert history == [("confirmed", False, "staff"), ("false_positive", True, "staff")]
    assert Review.objects.get(is_current=True, audit=flagged).comment == "known customer"


def test_verdicts_on_findings_are_separate_from_the_audit_verdict(flagged, staff_user):
    claim = _ann(flagged, "UNGROUNDED_CUSTOMER_CLAIM")
    tone = _ann(flagged, "dismissive")
    record_review(audit_id=flagged.pk, verdict="confirmed", user=staff_user)
    record_review(
        audit_id=flagged.pk, verdict="false_positive", annotation_id=tone.pk, user=staff_user
    )
    record_review(audit_id=flagged.pk, verdict="unsure", annotation_id=claim.pk, user=staff_user)
    record_review(audit_id=flagged.pk, verdict="confirmed", annotation_id=claim.pk, user=staff_user)
    current = {
        r.annotation_id: r.verdict for r in Review.objects.filter(audit=flagged, is_current=True)
    }
    assert current == {None: "confirmed", tone.pk: "false_positive", claim.pk: "confirmed"}
    assert Review.objects.filter(audit=flagged).count() == 4


def test_recording_stamps_reviewed_at_and_releases_the_claim(flagged, staff_user):
    AuditRun.objects.filter(pk=flagged.pk).update(
        claimed_by=staff_user, claimed_until=timezone.now() + timedelta(minutes=5)
    )
    before = timezone.now()
    record_review(audit_id=flagged.pk, verdict="confirmed", user=staff_user)
    flagged.refresh_from_db()
    assert flagged.reviewed_at >= before
    assert flagged.claimed_by is None and flagged.claimed_until is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"verdict": "maybe"}, "verdict must be one of"),
        ({"verdict": "confirmed", "comment": "x" * 5001}, "longer than"),
        ({"verdict": "confirmed", "comment": "a\x00b"}, "NUL"),
    ],
)
def test_bad_verdicts_are_refused(flagged, kwargs, message):
    with pytest.raises(ReviewError, match=message):
        record_review(audit_id=flagged.pk, **kwargs)
    assert not Review.objects.exists()


def test_an_annotation_of_another_audit_is_refused(flagged):
    other = make_audit(results=[result("tone", 0.9, [annotation("dismissive")])])
    with pytest.raises(ReviewError, match="not part of audit"):
        record_review(
            audit_id=flagged.pk, verdict="confirmed", annotation_id=_ann(other, "dismissive").pk
        )


# --- the API -----------------------------------------------------------------------------


def _reviews_url(audit) -> str:
    return f"/api/audits/{audit.pk}/reviews"


@pytest.mark.parametrize("scope", ["ingest", "read"])
def test_keys_without_the_review_scope_may_not_write_reviews(api_client, make_key, flagged, scope):
    response = api_client.post(_reviews_url(flagged), {"verdict": "confirmed"}, key=make_key(scope))
    assert response.status_code == 403
    assert "review" in response.json()["detail"]
    assert not Review.objects.exists()


@pytest.mark.parametrize("scope", ["review", "admin"])
def test_review_and_admin_keys_record_verdicts(api_client, make_key, flagged, scope):
    tone = _ann(flagged, "dismissive")
    key = make_key(scope, name=f"{scope} bot")
    response = api_client.post(
        _reviews_url(flagged),
        {"verdict": "false_positive", "annotation_id": tone.pk, "comment": "tone is fine"},
        key=key,
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["verdict"] == "false_positive" and body["annotation_id"] == tone.pk
    assert body["reviewer"] == f"API key {scope} bot" and body["current"] is True
    stored = Review.objects.get(pk=body["id"])
    assert stored.api_key.name == f"{scope} bot" and stored.comment == "tone is fine"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"verdict": "maybe"}, 422),
        ({"verdict": "confirmed", "annotation_id": 999999}, 422),
        ({"verdict": "confirmed", "extra": 1}, 422),
        ({"verdict": "confirmed", "comment": "nul\x00"}, 422),
        ({}, 422),
    ],
)
def test_bad_review_bodies_get_a_4xx(api_client, make_key, flagged, body, status):
    response = api_client.post(_reviews_url(flagged), body, key=make_key("review"))
    assert response.status_code == status
    assert "detail" in response.json()


def test_a_review_of_an_unknown_audit_is_404(api_client, make_key):
    key = make_key("review")
    assert (
        api_client.post(
            "/api/audits/not-a-uuid/reviews", {"verdict": "unsure"}, key=key
        ).status_code
        == 404
    )
    missing = "/api/audits/00000000-0000-0000-0000-000000000000/reviews"
    assert api_client.post(missing, {"verdict": "unsure"}, key=key).status_code == 404


def test_the_audit_carries_its_reviews_and_annotation_ids(
    api_client, make_key, flagged, staff_user
):
    claim = _ann(flagged, "UNGROUNDED_CUSTOMER_CLAIM")
    record_review(audit_id=flagged.pk, verdict="unsure", user=staff_user)
    record_review(audit_id=flagged.pk, verdict="confirmed", annotation_id=claim.pk, user=staff_user)
    record_review(audit_id=flagged.pk, verdict="confirmed", user=staff_user)
    detail = api_client.get(f"/api/audits/{flagged.pk}").json()
    assert [(r["verdict"], r["annotation_id"], r["current"]) for r in detail["reviews"]] == [
        ("unsure", None, False),
        ("confirmed", claim.pk, True),
        ("confirmed", None, True),
    ]
    assert detail["reviewed_at"] is not None
    ids = {a["type"]: a["id"] for r in detail["results"] for a in r["annotations"]}
    assert ids["UNGROUNDED_CUSTOMER_CLAIM"] == claim.pk
    # The list page and the JSONL export serialise the same Audit.
    listed = api_client.get("/api/audits").json()["items"][0]
    exported = json.loads(
        b"".join(api_client.get("/api/audits/export", {"format": "jsonl"}).streaming_content)
    )
    assert _same_times(listed) == _same_times(detail)
    assert _same_times(exported) == _same_times(detail)


def _same_times(value):
    """The API writes datetimes to the millisecond with a Z, the export in full: compare ms."""
    if isinstance(value, dict):
        return {
            k: (_ms(v) if k.endswith("_at") and v else _same_times(v)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_same_times(v) for v in value]
    return value


def _ms(text: str) -> str:
    from datetime import datetime

    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return when.replace(microsecond=when.microsecond // 1000 * 1000).isoformat()


def test_reviewed_and_verdict_filters(api_client, flagged, staff_user):
    fp = make_audit(results=[result("tone", 0.9, [annotation("dismissive")])])
    untouched = make_audit(results=[result("tone", 0.9, [annotation("dismissive")])])
    record_review(audit_id=flagged.pk, verdict="confirmed", user=staff_user)
    # A false positive on one finding counts for `verdict=false_positive`.
    record_review(audit_id=fp.pk, verdict="false_positive", annotation_id=_ann(fp, "dismissive").pk)
    # A verdict replaced later no longer matches.
    record_review(
        audit_id=flagged.pk, verdict="false_positive", annotation_id=_ann(flagged, "dismissive").pk
    )
    record_review(
        audit_id=flagged.pk, verdict="confirmed", annotation_id=_ann(flagged, "dismissive").pk
    )

    def ids(**params):
        response = api_client.get("/api/audits", params)
        assert response.status_code == 200
        return {item["id"] for item in response.json()["items"]}

    assert ids(reviewed="false") == {str(untouched.pk)}
    assert ids(reviewed="true") == {str(flagged.pk), str(fp.pk)}
    assert ids(verdict="false_positive") == {str(fp.pk)}
    assert ids(verdict="confirmed") == {str(flagged.pk)}
    assert api_client.get("/api/audits", {"verdict": "wrong"}).status_code == 422


# --- the dashboard -----------------------------------------------------------------------


def test_a_verdict_from_the_dashboard_swaps_in_the_updated_form(staff_client, flagged):
    tone = _ann(flagged, "dismissive")
    response = staff_client.post(
        reverse("audits:review", args=[flagged.pk]),
        {"verdict": "false_positive", "annotation_id": tone.pk, "comment": "<b>fine</b>"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    assert response["HX-Trigger"] == "verdict-recorded"
    html = response.content.decode()
    assert f'id="verdict-{flagged.pk}-{tone.pk}"' in html
    assert 'value="false_positive" class="verdict-button verdict-fp" aria-pressed="true"' in html
    assert "&lt;b&gt;fine&lt;/b&gt;" in html and "<b>fine</b>" not in html
    review = Review.objects.get()
    assert (review.annotation_id, review.reviewer_name) == (tone.pk, "staff")


def test_without_htmx_a_verdict_redirects_to_the_audit(staff_client, flagged):
    response = staff_client.post(
        reverse("audits:review", args=[flagged.pk]), {"verdict": "confirmed"}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("audits:detail", args=[flagged.pk])
    assert Review.objects.get().verdict == "confirmed"


def test_a_bad_dashboard_verdict_is_a_400(staff_client, flagged):
    url = reverse("audits:review", args=[flagged.pk])
    assert staff_client.post(url, {"verdict": "nope"}).status_code == 400
    assert staff_client.post(url, {"verdict": "confirmed", "annotation_id": "x"}).status_code == 400
    other = make_audit(results=[result("tone", 0.9, [annotation("dismissive")])])
    foreign = _ann(other, "dismissive").pk
    assert (
        staff_client.post(url, {"verdict": "confirmed", "annotation_id": foreign}).status_code
        == 400
    )
    assert not Review.objects.exists()


def test_staff_without_the_review_permission_cannot_record(django_user_model, flagged):
    user = django_user_model.objects.create_user("viewer", password="pw-123456789", is_staff=True)
    client = Client()
    client.force_login(user)
    url = reverse("audits:review", args=[flagged.pk])
    assert client.post(url, {"verdict": "confirmed"}).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="add_review"))
    client.force_login(django_user_model.objects.get(pk=user.pk))
    assert client.post(url, {"verdict": "confirmed"}).status_code == 302


def test_anonymous_verdicts_go_to_the_login_page(flagged):
    response = Client().post(reverse("audits:review", args=[flagged.pk]), {"verdict": "confirmed"})
    assert response.status_code == 302 and "/login" in response["Location"]
    assert not Review.objects.exists()


def test_the_detail_page_shows_forms_and_the_history(staff_client, flagged, staff_user):
    claim = _ann(flagged, "UNGROUNDED_CUSTOMER_CLAIM")
    record_review(audit_id=flagged.pk, verdict="unsure", annotation_id=claim.pk, user=staff_user)
    record_review(
        audit_id=flagged.pk,
        verdict="confirmed",
        annotation_id=claim.pk,
        comment="<script>x</script>",
        user=staff_user,
    )
    html = staff_client.get(reverse("audits:detail", args=[flagged.pk])).content.decode()
    assert f'id="verdict-{flagged.pk}"' in html  # the whole audit
    assert f'id="verdict-{flagged.pk}-{claim.pk}"' in html
    assert f'id="verdict-{flagged.pk}-{_ann(flagged, "dismissive").pk}"' in html
    assert html.count('class="superseded"') == 1
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script>x</script>" not in html
    # The history section refreshes what it holds as an htmx partial.
    assert (
        'hx-get="' + reverse("audits:detail", args=[flagged.pk]) + '?section=review_history"'
        in html
    )
    history = staff_client.get(
        reverse("audits:detail", args=[flagged.pk]),
        {"section": "review_history"},
        headers={"HX-Request": "true"},
    ).content.decode()
    assert history.lstrip().startswith(f'<h2 id="reviews-title-{flagged.pk}"')
    assert "<section" not in history
    assert history.count("<li") == 2


def test_list_cards_show_the_audit_verdict_and_filter_by_review(staff_client, flagged, staff_user):
    quiet = make_audit(results=[result("tone", 0.9, [annotation("dismissive")])])
    record_review(audit_id=flagged.pk, verdict="false_positive", user=staff_user)
    html = staff_client.get(reverse("audits:list")).content.decode()
    assert 'value="false_positive" class="verdict-button verdict-fp" aria-pressed="true"' in html
    assert f'id="verdict-{quiet.pk}"' in html
    unreviewed = staff_client.get(reverse("audits:list"), {"reviewed": "false"}).content.decode()
    assert f'id="audit-card-{quiet.pk}"' in unreviewed
    assert f'id="audit-card-{flagged.pk}"' not in unreviewed
    fps = staff_client.get(reverse("audits:list"), {"verdict": "false_positive"}).content.decode()
    assert f'id="audit-card-{flagged.pk}"' in fps and f'id="audit-card-{quiet.pk}"' not in fps


# --- the admin ---------------------------------------------------------------------------


def test_the_admin_lists_verdicts_read_only(staff_client, flagged, staff_user):
    record_review(audit_id=flagged.pk, verdict="confirmed", comment="<i>x</i>", user=staff_user)
    listing = staff_client.get("/admin/audits/review/", {"verdict": "confirmed"})
    assert listing.status_code == 200 and "staff" in listing.content.decode()
    review = Review.objects.get()
    page = staff_client.get(f"/admin/audits/review/{review.pk}/change/").content.decode()
    assert "&lt;i&gt;x&lt;/i&gt;" in page and "<i>x</i>" not in page
    staff_client.post(f"/admin/audits/review/{review.pk}/change/", {"verdict": "unsure"})
    review.refresh_from_db()
    assert review.verdict == "confirmed"
    audit_page = staff_client.get(f"/admin/audits/auditrun/{flagged.pk}/change/").content.decode()
    assert "&lt;i&gt;x&lt;/i&gt;" in audit_page  # the review inline
    assert (
        staff_client.get("/admin/audits/auditrun/", {"reviewed_at__isnull": "True"}).status_code
        == 200
    )


def test_the_csv_export_carries_the_audit_verdict(api_client, flagged, staff_user):
    import csv
    import io

    record_review(audit_id=flagged.pk, verdict="unsure", user=staff_user)
    record_review(audit_id=flagged.pk, verdict="false_positive", user=staff_user)
    response = api_client.get("/api/audits/export", {"format": "csv"})
    header, row = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    values = dict(zip(header, row, strict=True))
    assert values["verdict"] == "false_positive"
    assert values["reviewed_at"].startswith(str(flagged.created_at.year))


@pytest.mark.parametrize("raw", ["²", "¹²", "٣", "1_0"])
def test_an_annotation_id_that_is_no_plain_number_is_a_400_not_a_500(staff_client, flagged, raw):
    # str.isdigit() accepts superscripts, which int() refuses.
    url = reverse("audits:review", args=[flagged.pk])
    response = staff_client.post(url, {"verdict": "confirmed", "annotation_id": raw})
    assert response.status_code == 400
    assert not Review.objects.exists()


def test_staff_who_may_not_review_see_verdicts_without_buttons(
    django_user_model, flagged, staff_user
):
    record_review(audit_id=flagged.pk, verdict="confirmed", comment="seen <it>", user=staff_user)
    viewer = django_user_model.objects.create_user("viewer", password="pw-123456789", is_staff=True)
    client = Client()
    client.force_login(viewer)
    for url in (reverse("audits:detail", args=[flagged.pk]), reverse("audits:list")):
        html = client.get(url).content.decode()
        assert f'id="verdict-{flagged.pk}"' in html and "Confirmed" in html
        assert "verdict-button" not in html
        assert "seen &lt;it&gt;" in html
