"""The dashboard pages: permissions, filters, pagination, partials, escaping, query counts."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from analyzers.config_store import load_config
from analyzers.models import ConfigChange
from audits.models import AuditRun
from tests.factories import annotation, fabricated_claim_audit, make_audit, make_audits, result

PAGES = ["audits:list", "audits:trends", "audits:tuning"]


@pytest.fixture
def staff_client(staff_user) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


@pytest.fixture
def plain_client(plain_user) -> Client:
    client = Client()
    client.force_login(plain_user)
    return client


@pytest.fixture
def flagged(db) -> AuditRun:
    return fabricated_claim_audit(
        results=[result("tone", 0.1, [annotation("dismissive", "info", evidence="easy")])],
        links=[
            {
                "url": "https://docs.acme.example/api",
                "label": "docs",
                "decision": "keep",
                "reason": None,
                "http_status": 200,
                "healthy": True,
            },
            {
                "url": "javascript:alert(1)",
                "label": "x",
                "decision": "strip",
                "reason": "unsafe scheme",
                "http_status": None,
                "healthy": None,
            },
        ],
    )


@pytest.fixture
def clean(db) -> AuditRun:
    return make_audit(
        user_input="How do I set up faceting?",
        response="Facets narrow results.",
        results=[result("redflag", 0.0), result("tone", 0.05)],
        created_at=timezone.now() - timedelta(days=3),
    )


# --- permissions ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", PAGES)
def test_it_redirects_anonymous_users_to_login(client, db, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("name", PAGES)
def test_it_refuses_non_staff_users(plain_client, name):
    assert plain_client.get(reverse(name)).status_code == 403


def test_detail_json_and_rerun_refuse_non_staff(plain_client, flagged):
    assert plain_client.get(reverse("audits:detail", args=[flagged.pk])).status_code == 403
    assert plain_client.get(reverse("audits:json", args=[flagged.pk])).status_code == 403
    assert plain_client.post(reverse("audits:rerun", args=[flagged.pk])).status_code == 403
    assert AuditRun.objects.count() == 1


def test_detail_redirects_anonymous_users(client, flagged):
    response = client.get(reverse("audits:detail", args=[flagged.pk]))
    assert response.status_code == 302


@pytest.mark.parametrize("name", PAGES)
def test_pages_render_for_staff(staff_client, flagged, name):
    response = staff_client.get(reverse(name))
    assert response.status_code == 200
    assert b"<!doctype html>" in response.content


def test_login_page_renders(client, db):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b'name="username"' in response.content


# --- list -----------------------------------------------------------------------------------


def test_list_shows_cards_newest_first_with_badges(staff_client, flagged, clean):
    response = staff_client.get(reverse("audits:list"))
    html = response.content.decode()
    assert html.index(f"audit-card-{flagged.pk}") < html.index(f"audit-card-{clean.pk}")
    assert "UNGROUNDED_CUSTOMER_CLAIM" in html
    assert "0.50" in html  # flagged overall score (0.9 + 0.1) / 2
    # The tone annotation is not surfaced, so it is not a badge.
    card = html[html.index(f"audit-card-{flagged.pk}") : html.index(f"audit-card-{clean.pk}")]
    assert "dismissive" not in card


def test_list_shows_an_empty_state_without_audits(staff_client):
    response = staff_client.get(reverse("audits:list"))
    assert b"No audits yet" in response.content


def test_list_empty_state_with_filters_says_to_widen_them(staff_client, flagged):
    response = staff_client.get(reverse("audits:list"), {"q": "nothing matches this"})
    assert b"No audit matches these filters" in response.content


@pytest.mark.parametrize(
    ("params", "expect_flagged", "expect_clean"),
    [
        ({"surfaced": "1"}, True, False),
        ({"min_score": "0.4"}, True, False),
        ({"max_score": "0.2"}, False, True),
        ({"analyzer": "grounding"}, True, False),
        ({"analyzer": "tone"}, False, False),  # tone never surfaced
        ({"type": "UNGROUNDED_CUSTOMER_CLAIM"}, True, False),
        ({"type": "dismissive"}, True, False),
        ({"severity": "critical"}, True, False),
        ({"severity": "warning"}, False, False),
        ({"q": "faceting"}, False, True),
        ({"q": "al-futtaim"}, True, False),
        ({"status": "complete"}, True, True),
        ({"status": "failed"}, False, False),
    ],
)
def test_list_filters(staff_client, flagged, clean, params, expect_flagged, expect_clean):
    html = staff_client.get(reverse("audits:list"), params).content.decode()
    assert (f"audit-card-{flagged.pk}" in html) is expect_flagged
    assert (f"audit-card-{clean.pk}" in html) is expect_clean


def test_list_date_filters_are_inclusive_days(staff_client, flagged, clean):
    today = timezone.localdate()
    old = (today - timedelta(days=3)).isoformat()
    html = staff_client.get(reverse("audits:list"), {"since": old, "until": old}).content.decode()
    assert f"audit-card-{clean.pk}" in html
    assert f"audit-card-{flagged.pk}" not in html
    html = staff_client.get(reverse("audits:list"), {"since": today.isoformat()}).content.decode()
    assert f"audit-card-{flagged.pk}" in html
    assert f"audit-card-{clean.pk}" not in html


def test_list_reports_bad_filter_values_instead_of_failing(staff_client, flagged):
    response = staff_client.get(
        reverse("audits:list"), {"min_score": "abc", "since": "yesterday", "severity": "x"}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "Enter a number between 0 and 1." in html
    assert "Enter a date as YYYY-MM-DD." in html
    assert f"audit-card-{flagged.pk}" in html


def test_filters_are_kept_in_the_form(staff_client, flagged):
    html = staff_client.get(
        reverse("audits:list"), {"q": "Acme", "severity": "critical", "surfaced": "1"}
    ).content.decode()
    assert 'value="Acme"' in html
    assert '<option value="critical" selected>' in html
    assert 'name="surfaced" value="1" checked' in html


def test_htmx_filter_request_returns_the_results_partial_and_a_clean_url(staff_client, flagged):
    response = staff_client.get(
        reverse("audits:list"),
        {"q": "", "severity": "critical", "min_score": ""},
        headers={"HX-Request": "true"},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "<!doctype html>" not in html
    assert html.strip().startswith('<section id="audit-results"')
    assert response["HX-Push-Url"] == "/?severity=critical"


def test_keyset_pagination_loads_more_without_duplicates(staff_client, db):
    now = timezone.now()
    runs = [
        make_audit(created_at=now - timedelta(minutes=i), results=[result("redflag", 0.5)])
        for i in range(30)
    ]
    first = staff_client.get(reverse("audits:list")).content.decode()
    seen_first = [r.pk for r in runs if f"audit-card-{r.pk}" in first]
    assert len(seen_first) == 25
    assert seen_first == [r.pk for r in runs[:25]]
    assert 'id="load-more"' in first
    start = first.index("cursor=") + len("cursor=")
    cursor = first[start : first.index('"', start)]
    more = staff_client.get(
        reverse("audits:list"), {"cursor": cursor}, headers={"HX-Request": "true"}
    ).content.decode()
    seen_more = [r.pk for r in runs if f"audit-card-{r.pk}" in more]
    assert seen_more == [r.pk for r in runs[25:]]
    assert "Load more" not in more
    assert "<!doctype html>" not in more


def test_list_uses_a_constant_number_of_queries(staff_client, django_assert_max_num_queries):
    make_audits(3, seed=1)
    with django_assert_max_num_queries(20) as few:
        staff_client.get(reverse("audits:list"))
    make_audits(40, seed=2)
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = staff_client.get(reverse("audits:list"))
    assert response.content.count(b'class="card audit-card"') == 25


# --- detail ---------------------------------------------------------------------------------


def test_detail_shows_everything(staff_client, flagged):
    response = staff_client.get(reverse("audits:detail", args=[flagged.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    ann = flagged.annotations.get(type="UNGROUNDED_CUSTOMER_CLAIM")
    # The header: score against threshold.
    assert "0.50" in html and "threshold 0.30" in html
    # The surfaced card, open; the other result inside <details>.
    surfaced = html.index(f'id="result-{flagged.results.get(analyzer_id="grounding").pk}"')
    other = html.index(f'id="result-{flagged.results.get(analyzer_id="tone").pk}"')
    assert surfaced < html.index('<details class="collapsible section card"') < other
    assert "Al-Futtaim is not a known customer." in html
    # The evidence highlighted at its offsets and tied to the annotation.
    assert (
        f'data-ann="ann-{ann.pk}" tabindex="0" title="Critical finding">'
        "Al-Futtaim achieved +206% revenue.</mark>"
    ) in html
    assert f'data-ann-id="ann-{ann.pk}"' in html
    # Original vs cleaned: the removed sentence is marked.
    assert '<del title="removed">Al-Futtaim achieved +206% revenue. </del>' in html
    # Link table: http(s) links are links, others are text.
    assert (
        '<a href="https://docs.acme.example/api" rel="noopener noreferrer nofollow" '
        'target="_blank">'
    ) in html
    assert "<code>javascript:alert(1)</code>" in html
    assert 'href="javascript:' not in html
    # Trace lines in order, metadata, actions.
    assert html.index("[AUDIT] grounding: UNKNOWN_COMPANY") < html.index("[AUDIT] done")
    assert f'id="trace-{flagged.pk}"' in html
    assert reverse("audits:json", args=[flagged.pk]) in html
    assert "Re-run with current configuration" in html


def test_detail_of_a_missing_audit_is_404(staff_client, db):
    url = reverse("audits:detail", args=["00000000-0000-0000-0000-000000000000"])
    assert staff_client.get(url).status_code == 404


def test_detail_sections_are_served_as_partials_to_htmx(staff_client, flagged):
    url = reverse("audits:detail", args=[flagged.pk])
    html = staff_client.get(url, {"section": "trace"}, headers={"HX-Request": "true"}).content
    assert html.strip().startswith(b'<section class="card"')
    assert b"[AUDIT] done" in html and b"<!doctype html>" not in html


def test_detail_uses_a_constant_number_of_queries(staff_client, db, django_assert_max_num_queries):
    small = make_audit(results=[result("redflag", 0.5, [annotation()])])
    with django_assert_max_num_queries(20) as few:
        staff_client.get(reverse("audits:detail", args=[small.pk]))
    big = make_audit(
        results=[
            result(a, 0.6, [annotation(evidence="Acme", start=0, end=4) for _ in range(5)])
            for a in ("redflag", "links", "grounding", "bias", "tone", "prompt_leak")
        ],
        trace=[f"[AUDIT] line {i}" for i in range(50)],
        links=[
            {
                "url": f"https://acme.example/{i}",
                "label": "x",
                "decision": "keep",
                "reason": None,
                "http_status": 200,
                "healthy": True,
            }
            for i in range(10)
        ],
    )
    with django_assert_max_num_queries(len(few.captured_queries)):
        staff_client.get(reverse("audits:detail", args=[big.pk]))


def test_json_download_is_the_contract_audit(staff_client, flagged):
    response = staff_client.get(reverse("audits:json", args=[flagged.pk]))
    assert response.status_code == 200
    assert "attachment" in response["Content-Disposition"]
    data = json.loads(response.content)
    assert data["id"] == str(flagged.pk)
    assert [r["analyzer_id"] for r in data["surfaced_results"]] == ["grounding"]
    assert data["trace"][-1] == "[AUDIT] done"


def test_rerun_creates_a_linked_run_and_redirects(staff_client, flagged):
    with_before = AuditRun.objects.count()
    response = staff_client.post(reverse("audits:rerun", args=[flagged.pk]))
    assert AuditRun.objects.count() == with_before + 1
    new = AuditRun.objects.get(rerun_of=flagged)
    assert response.status_code == 302
    assert response["Location"] == reverse("audits:detail", args=[new.pk])
    assert new.response == flagged.response


def test_rerun_needs_the_add_permission(client, django_user_model, flagged):
    user = django_user_model.objects.create_user("viewer", password="x-password-1", is_staff=True)
    client.force_login(user)
    html = client.get(reverse("audits:detail", args=[flagged.pk])).content
    assert b"Re-run with current configuration" not in html
    assert client.post(reverse("audits:rerun", args=[flagged.pk])).status_code == 403


def test_rerun_is_post_only(staff_client, flagged):
    assert staff_client.get(reverse("audits:rerun", args=[flagged.pk])).status_code == 405


# --- escaping -------------------------------------------------------------------------------

HOSTILE = (
    '<script>alert(1)</script> <img src=x onerror="alert(2)"> <svg onload=alert(3)> '
    '[x](javascript:alert(4)) <div hx-get="https://evil.example/x" hx-trigger="load">hi</div>'
)


def test_model_text_is_escaped_on_list_and_detail(staff_client, db):
    run = make_audit(
        user_input=HOSTILE,
        response=HOSTILE,
        cleaned_response="cleaned " + HOSTILE,
        results=[
            result(
                "redflag",
                0.9,
                [
                    annotation(
                        "EXCEPTION",
                        "critical",
                        label=HOSTILE,
                        description=HOSTILE,
                        evidence='<img src=x onerror="alert(2)">',
                        start=30,
                        end=60,
                    )
                ],
            )
        ],
        sources=[
            {"title": HOSTILE, "url": "javascript:alert(5)", "text": HOSTILE, "company": None}
        ],
        metadata={"note": HOSTILE},
        trace=[HOSTILE],
    )
    for url in (reverse("audits:list"), reverse("audits:detail", args=[run.pk])):
        html = staff_client.get(url).content.decode()
        assert "<script>alert" not in html
        assert "<img src=x" not in html
        assert "<svg onload" not in html
        assert '<div hx-get="https://evil.example' not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert 'href="javascript:' not in html


def test_pages_send_a_strict_csp(staff_client, flagged):
    response = staff_client.get(reverse("audits:detail", args=[flagged.pk]))
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert b"<script>" not in response.content  # no inline scripts at all
    assert b" style=" not in response.content  # no inline style attributes


# --- trends ---------------------------------------------------------------------------------


def test_trends_counts_and_chart_data(staff_client, flagged, clean):
    make_audit(
        results=[result("links", 0.0, status="failed", error="boom")],
        created_at=timezone.now() - timedelta(days=100),
    )
    response = staff_client.get(reverse("audits:trends"), {"days": "30"})
    html = response.content.decode()
    start = html.index('<script id="trends-data" type="application/json">') + len(
        '<script id="trends-data" type="application/json">'
    )
    data = json.loads(html[start : html.index("</script>", start)])
    assert sum(data["per_day"]["total"]) == 2  # the 100-day-old audit is outside the window
    assert sum(data["per_day"]["cards"]) == 1
    assert sum(data["histogram"]["counts"]) == 2
    # The highest score (grounding 0.90), not the mean (0.50); the audit has a card.
    assert data["histogram"]["counts"][18] == 1
    assert data["histogram"]["cards"][18] == 1
    assert data["threshold"] == pytest.approx(0.3)
    assert {t["type"] for t in data["top_types"]} == {"UNGROUNDED_CUSTOMER_CLAIM", "dismissive"}
    grounding = next(a for a in data["analyzers"] if a["analyzer_id"] == "grounding")
    assert grounding["surfaced_pct"] == 100.0
    assert 'id="stat-total">2<' in html


def test_trends_window_falls_back_to_default_for_unknown_values(staff_client, flagged):
    response = staff_client.get(reverse("audits:trends"), {"days": "13"})
    assert response.status_code == 200
    assert b'<option value="60" selected>' in response.content


def test_trends_empty_state(staff_client):
    assert b"No audits in this window" in staff_client.get(reverse("audits:trends")).content


# --- tuning ---------------------------------------------------------------------------------


def _surfacing(html: str) -> int:
    start = html.index('id="surfacing-count">') + len('id="surfacing-count">')
    return int(html[start : html.index("<", start)])


def test_tuning_preview_counts_follow_the_threshold(staff_client, db):
    for score in (0.1, 0.35, 0.55, 0.75, 0.95):
        make_audit(results=[result("redflag", score), result("tone", 0.0)])
    make_audit(results=[result("bias", 0.05, should_surface=True)])  # forced: always surfaces
    make_audit(results=[result("links", 0.99, status="failed", error="x")])  # failed: never
    url = reverse("audits:tuning")
    counts = {
        t: _surfacing(
            staff_client.get(url, {"threshold": t}, headers={"HX-Request": "true"}).content.decode()
        )
        for t in ("0.0", "0.3", "0.5", "0.9", "1.0")
    }
    assert counts == {"0.0": 6, "0.3": 5, "0.5": 4, "0.9": 2, "1.0": 1}


def _preview(client, **params) -> str:
    return client.get(
        reverse("audits:tuning"), params, headers={"HX-Request": "true"}
    ).content.decode()


def test_tuning_preview_per_analyzer(staff_client, db):
    make_audit(results=[result("redflag", 0.8), result("tone", 0.2)])  # redflag surfaces it
    make_audit(results=[result("redflag", 0.1), result("tone", 0.6)])
    make_audit(results=[result("redflag", 0.1), result("tone", 0.4)])
    html = _preview(staff_client, threshold="0.5", analyzer="tone")
    assert html.strip().startswith('<section id="tuning-preview"')
    # The slider moves tone's threshold; redflag stays at the saved global 0.3.
    assert _surfacing(html) == 2
    assert _surfacing(_preview(staff_client, threshold="0.3", analyzer="tone")) == 3
    assert _surfacing(_preview(staff_client, threshold="0.9", analyzer="tone")) == 1


def test_the_global_slider_leaves_analyzers_with_their_own_threshold_alone(staff_client, db):
    from analyzers.config_store import save_config

    config = load_config()
    analyzers = {**config.analyzers, "bias": {**config.analyzers.get("bias", {}), "threshold": 0.7}}
    save_config(config.model_copy(update={"analyzers": analyzers}), actor="test", source="test")
    make_audit(results=[result("bias", 0.8), result("tone", 0.1)])  # bias: 0.8 >= its 0.7
    make_audit(results=[result("bias", 0.5), result("tone", 0.1)])  # bias: below its 0.7
    make_audit(results=[result("bias", 0.0), result("tone", 0.6)])
    counts = [_surfacing(_preview(staff_client, threshold=t)) for t in ("0.0", "0.4", "0.9")]
    assert counts == [3, 2, 1]  # at 0.4, bias 0.5 does not surface the second audit
    html = _preview(staff_client, threshold="0.4")
    assert "(at its saved 0.70)" in html


def test_tuning_ignores_bad_threshold_values(staff_client, flagged):
    for value in ("abc", "nan", "-3", "7"):
        response = staff_client.get(reverse("audits:tuning"), {"threshold": value})
        assert response.status_code == 200


def test_saving_the_threshold_writes_the_configuration_and_records_who(staff_client, staff_user):
    response = staff_client.post(reverse("audits:tuning"), {"threshold": "0.45"})
    assert response.status_code == 302
    assert load_config().threshold == pytest.approx(0.45)
    change = ConfigChange.objects.latest("created_at")
    assert change.user == staff_user
    assert change.actor == staff_user.get_username()
    follow = staff_client.get(reverse("audits:tuning"))
    assert b"Threshold saved: 0.45 (was 0.30)." in follow.content


def test_saving_needs_the_change_permission(client, django_user_model, db):
    user = django_user_model.objects.create_user("viewer", password="x-password-1", is_staff=True)
    client.force_login(user)
    assert b"disabled" in client.get(reverse("audits:tuning")).content
    assert client.post(reverse("audits:tuning"), {"threshold": "0.9"}).status_code == 403
    assert load_config().threshold == pytest.approx(0.3)


def test_detail_shows_how_a_judged_result_was_reached(staff_client, db):
    judged = make_audit(
        response="You're absolutely right!",
        results=[
            result(
                "bias",
                0.7,
                [annotation("sycophancy", evidence="You're absolutely right!")],
                supplementary={
                    "method": "llm",
                    "model": "judge-1",
                    "summary": "Agrees blindly.",
                    "counter_arguments": ["Plain text <b>passwords</b> leak."],
                    "usage": {
                        "calls": 3,
                        "prompt_tokens": 120,
                        "completion_tokens": 30,
                        "latency_ms": 640.0,
                    },
                },
            ),
            result("tone", 0.0, supplementary={"method": "heuristic"}),
        ],
    )
    page = staff_client.get(reverse("audits:detail", args=[judged.pk])).content.decode()
    assert "judged by judge-1" in page
    assert "3 calls · 150 tokens (120 in, 30 out) · 640 ms model time" in page
    assert "Agrees blindly." in page
    assert "Plain text &lt;b&gt;passwords&lt;/b&gt; leak." in page
    assert "heuristic, no model" in page


def test_saving_an_analyzers_own_threshold(staff_client):
    make_audit(results=[result("tone", 0.4)])
    page = staff_client.get(reverse("audits:tuning"), {"analyzer": "tone"}).content.decode()
    assert "Threshold of <strong>tone</strong> (saved: 0.30)" in page
    response = staff_client.post(
        reverse("audits:tuning"), {"threshold": "0.55", "analyzer": "tone"}
    )
    assert response.status_code == 302 and response["Location"].endswith("?analyzer=tone")
    config = load_config()
    assert config.threshold_for("tone") == pytest.approx(0.55)
    assert config.threshold == pytest.approx(0.3)
    follow = staff_client.get(response["Location"]).content.decode()
    assert "The tone threshold saved: 0.55 (was 0.30)." in follow
    assert "(saved: 0.55)" in follow
