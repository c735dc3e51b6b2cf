"""The list page's headline score, sort, and table view (remembered per user)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audits.cards import cards
from audits.models import DashboardPreference
from tests.factories import annotation, fabricated_claim_audit, make_audit, make_audits, result

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(staff_user) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


def _table(client: Client, user) -> None:
    DashboardPreference.objects.update_or_create(user=user, defaults={"audit_view": "table"})


def _row_ids(html: str) -> list[str]:
    return re.findall(r'id="audit-row-([0-9a-f-]{36})"', html)


def test_a_card_shows_the_highest_score_first_and_the_mean_second(staff_client):
    # A fabricated claim (grounding 0.9, critical) among quiet analyzers: mean 0.3.
    run = fabricated_claim_audit(results=[result("bias", 0.0), result("tone", 0.0)])
    html = staff_client.get(reverse("audits:list")).content.decode()
    card = html[html.index(f'id="audit-card-{run.pk}"') :]
    assert '<div class="score score-high"' in card[:400]  # red: surfaced, critical
    assert '<span class="score-value">0.90</span>' in card
    assert "grounding" in card[: card.index("card-body")]
    assert "mean 0.30" in card


def test_colour_follows_surfacing_and_severity_not_the_mean(staff_client):
    info = make_audit(
        results=[
            result("bias", 0.5, [annotation("sycophancy", "info")]),
            result("tone", 0.0),
            result("links", 0.0),
            result("redflag", 0.0),
        ]
    )
    quiet = make_audit(results=[result("bias", 0.2)])
    html = staff_client.get(reverse("audits:list")).content.decode()
    assert re.search(rf'id="audit-card-{info.pk}".{{0,300}}class="score score-info"', html, re.S)
    assert re.search(rf'id="audit-card-{quiet.pk}".{{0,300}}class="score score-low"', html, re.S)


def test_forced_surfacing_shows_the_score_with_a_forced_label(staff_client):
    run = make_audit(results=[result("prompt_leak", 0.1, should_surface=True)])
    html = staff_client.get(reverse("audits:detail", args=[run.pk])).content.decode()
    assert '<span class="big score-value">0.10</span>' in html
    assert ">forced by prompt_leak</span>" in html
    listing = staff_client.get(reverse("audits:list")).content.decode()
    assert '<span class="score-value">0.10</span>' in listing
    assert ">forced by prompt_leak</span>" in listing


def test_a_result_over_its_threshold_is_not_labelled_forced(staff_client):
    """should_surface on a score that reaches the threshold: the score decided, no label."""
    run = make_audit(
        results=[
            result("links", 1.0, should_surface=True),
            result("prompt_leak", 0.9, should_surface=True),
        ]
    )
    for page in (reverse("audits:detail", args=[run.pk]), reverse("audits:list")):
        html = staff_client.get(page).content.decode()
        assert '<span class="' in html and "1.00</span>" in html
        assert "forced" not in html, page


def test_the_detail_page_headline_is_the_highest_score(staff_client):
    run = fabricated_claim_audit(results=[result("bias", 0.0)])
    html = staff_client.get(reverse("audits:detail", args=[run.pk])).content.decode()
    assert '<span class="big score-value">0.90</span>' in html
    assert "highest score (grounding)" in html
    assert "mean of all analyzers 0.45" in html


def test_the_view_choice_is_stored_for_the_user_and_keeps_the_filters(staff_client, staff_user):
    make_audit()
    r = staff_client.post(
        reverse("audits:view_choice"),
        {"view": "table", "query": "surfaced=1&sort=-top_score&cursor=abc&evil=x"},
    )
    assert r.status_code == 302
    assert r["Location"] == "/?surfaced=1&sort=-top_score"
    assert DashboardPreference.objects.get(user=staff_user).audit_view == "table"
    other_browser = Client()
    other_browser.force_login(staff_user)
    html = other_browser.get(reverse("audits:list")).content.decode()
    assert 'id="audit-table"' in html and 'class="card audit-card"' not in html
    staff_client.post(reverse("audits:view_choice"), {"view": "cards"})
    assert 'id="audit-table"' not in staff_client.get(reverse("audits:list")).content.decode()


def test_a_bad_view_choice_is_400(staff_client):
    assert staff_client.post(reverse("audits:view_choice"), {"view": "grid"}).status_code == 400
    assert staff_client.get(reverse("audits:view_choice")).status_code == 405


def test_the_table_sorts_by_highest_score_and_pages_by_keyset(
    staff_client, staff_user, monkeypatch
):
    _table(staff_client, staff_user)
    monkeypatch.setattr(cards, "TABLE_PAGE_SIZE", 4)
    now = timezone.now()
    runs = [
        make_audit(results=[result("bias", s)], created_at=now - timedelta(minutes=i))
        for i, s in enumerate([0.2, 0.9, 0.5, 0.9, 0.1, 0.7, 0.5, 0.3, 0.0, 0.6])
    ]
    expected = [
        str(r.pk) for r in sorted(runs, key=lambda r: (r.top_score, r.created_at), reverse=True)
    ]
    html = staff_client.get(reverse("audits:list"), {"sort": "-top_score"}).content.decode()
    seen = _row_ids(html)
    assert 'aria-sort="descending"><a href="/?sort=top_score"' in html
    while m := re.search(r'hx-get="(/\?[^"]*cursor=[^"]+)"', html):
        url = m.group(1).replace("&amp;", "&")
        assert "sort=-top_score" in url
        html = staff_client.get(url, HTTP_HX_REQUEST="true").content.decode()
        seen += _row_ids(html)
    assert seen == expected


def test_the_table_keeps_the_filters_in_its_sort_links(staff_client, staff_user):
    _table(staff_client, staff_user)
    make_audits(3)
    html = staff_client.get(reverse("audits:list"), {"surfaced": "1", "q": "Acme"}).content.decode()
    assert 'href="/?surfaced=1&amp;q=Acme&amp;sort=-top_score"' in html
    assert 'href="/?surfaced=1&amp;q=Acme&amp;sort=created_at"' in html


def test_a_bad_sort_on_the_list_page_is_a_form_error_not_a_500(staff_client):
    make_audit()
    r = staff_client.get(reverse("audits:list"), {"sort": "-overall_score);--"})
    assert r.status_code == 200
    assert "sort: sort must be one of" in r.content.decode()


def test_the_table_escapes_model_text(staff_client, staff_user):
    _table(staff_client, staff_user)
    make_audit(
        user_input='<script>alert("x")</script>',
        results=[result("bias", 0.8, [annotation("<img src=x onerror=alert(1)>", "critical")])],
    )
    html = staff_client.get(reverse("audits:list")).content.decode()
    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html


def test_the_table_reuses_the_verdict_endpoint(staff_client, staff_user):
    _table(staff_client, staff_user)
    run = fabricated_claim_audit()
    html = staff_client.get(reverse("audits:list")).content.decode()
    assert f'hx-post="{reverse("audits:review", args=[run.pk])}"' in html
    assert 'data-verdict-key="c"' in html and 'data-verdict-key="f"' in html
    r = staff_client.post(
        reverse("audits:review", args=[run.pk]), {"verdict": "confirmed"}, HTTP_HX_REQUEST="true"
    )
    assert 'class="verdict-state' in r.content.decode()  # what the row's hx-select takes


def test_the_table_uses_a_constant_number_of_queries(
    staff_client, staff_user, django_assert_max_num_queries
):
    _table(staff_client, staff_user)
    make_audits(3, seed=1)
    with django_assert_max_num_queries(20) as few:
        staff_client.get(reverse("audits:list"))
    make_audits(60, seed=2)
    with django_assert_max_num_queries(len(few.captured_queries)):
        html = staff_client.get(reverse("audits:list"), {"sort": "-top_score"}).content.decode()
    assert len(_row_ids(html)) == cards.TABLE_PAGE_SIZE
