"""The audit list's rows built in Python (`audits.cards.html`) against the templates they
replaced: the same markup (whitespace aside), the same escaping, a fixed number of queries."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.context_processors import PermWrapper
from django.contrib.auth.models import Permission
from django.template import engines
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audits.cards import cards, html
from audits.live import fragments
from audits.models import AuditRun, DashboardPreference, Review
from tests.factories import annotation, make_audit, result

pytestmark = pytest.mark.django_db

# The card and the table row as the templates rendered them before `card_html` (the
# reference the Python markup is held to).
REFERENCE_CARD = """{% load audit_ui %}{% for audit in audits %}<li id="audit-card-{{ audit.pk }}" class="card audit-card" data-status="{{ audit.status }}">
  {% with h=audit.headline %}
  <div class="score {{ h.tone }}" title="Highest analyzer score{% if h.analyzer %} ({{ h.analyzer }}){% endif %}; mean of all analyzers {{ audit.overall_score|score }}">
    <span class="score-value">{{ h.score|score }}</span>
    {% if h.score is not None %}
      <meter min="0" max="1" low="{{ audit.threshold }}" high="{{ audit.threshold }}" optimum="0" value="{{ h.score }}" aria-label="Highest score">{{ h.score|score }}</meter>
    {% endif %}
    <span class="small muted score-analyzer">{{ h.analyzer|default:"highest" }}</span>
    <span class="small muted score-mean">mean {{ audit.overall_score|score }}</span>
    {% if h.forced_by %}<span class="small forced-label">forced by {{ h.forced_by }}</span>{% endif %}
  </div>
  {% endwith %}
  <div class="card-body" hx-disable>
    <a class="card-link card-title" href="{% url 'audits:detail' audit.pk %}">{{ audit.user_input|oneline:140|default:"(no user input)" }}</a>
    <p class="excerpt">{% if audit.response %}{{ audit.response|oneline:220 }}{% elif audit.status == "pending" or audit.status == "running" %}<span class="muted">streaming…</span>{% else %}(empty response){% endif %}</p>
    <ul class="badges" aria-label="Surfaced findings">
      {% for badge in audit.badges %}
        <li class="badge sev-{{ badge.severity }}" title="{{ badge.label }}"><i class="sev-icon" aria-hidden="true">{{ badge.severity|severity_icon }}</i><span class="visually-hidden">{{ badge.severity|severity_label }}:</span>{{ badge.type }}{% if badge.count > 1 %} ×{{ badge.count }}{% endif %}</li>
      {% endfor %}
      {% if audit.more_badges %}<li class="badge">+{{ audit.more_badges }} more</li>{% endif %}
      {% if not audit.badges and audit.status == "complete" %}<li class="muted small">No surfaced findings</li>{% endif %}
    </ul>
  </div>
  <div class="card-meta">
    <span class="status status-{{ audit.status }}"><span aria-hidden="true">{{ audit.status|status_icon }}</span> {{ audit.status }}</span>
    {% if audit.has_card %}<div class="surfaced-flag"><span aria-hidden="true">●</span> surfaced{% if audit.surfaced_list %}: {% for r in audit.surfaced_list %}{{ r.analyzer_id }}{% if not forloop.last %}, {% endif %}{% endfor %}{% endif %}</div>{% endif %}
    <div>{% when audit.created_at %}</div>
    {% if audit.has_card and audit.status == "complete" %}
      {% with current=audit.current_verdict target=None %}{% include "audits/list.html#verdict" %}{% endwith %}
    {% endif %}
  </div>
</li>
{% endfor %}"""

REFERENCE_ROWS = """{% load audit_ui %}{% with can_review=perms.audits.add_review %}
{% for audit in page.audits %}
  {% url 'audits:detail' audit.pk as detail_url %}
  {% with h=audit.headline %}
  <tr id="audit-row-{{ audit.pk }}" class="audit-row" tabindex="-1" data-href="{{ detail_url }}">
    <td class="col-time"><time datetime="{{ audit.created_at|date:'c' }}" title="{{ audit.created_at|date:'Y-m-d H:i:s e' }}">{{ audit.created_at|date:"M j, H:i" }}</time></td>
    <td class="col-input"><a class="row-link" href="{{ detail_url }}" title="{{ audit.user_input|oneline:300 }}">{{ audit.user_input|oneline:90|default:"(no user input)" }}</a></td>
    <td class="col-score {{ h.tone }}" title="mean of all analyzers {{ audit.overall_score|score }}"><span class="score-value">{{ h.score|score }}</span> <span class="muted small">{{ h.analyzer }}</span>{% if h.forced_by %} <span class="small forced-label" title="forced by {{ h.forced_by }}">forced</span>{% endif %}</td>
    <td class="col-types">
      {% for badge in audit.table_badges %}<span class="badge sev-{{ badge.severity }}" title="{{ badge.label }}"><i class="sev-icon" aria-hidden="true">{{ badge.severity|severity_icon }}</i><span class="visually-hidden">{{ badge.severity|severity_label }}:</span>{{ badge.type }}{% if badge.count > 1 %} ×{{ badge.count }}{% endif %}</span>{% endfor %}
      {% if audit.table_more %}<span class="badge" title="more kinds of surfaced findings">+{{ audit.table_more }}</span>{% endif %}
    </td>
    <td class="col-status"><span class="status status-{{ audit.status }}"><span aria-hidden="true">{{ audit.status|status_icon }}</span> {{ audit.status }}</span></td>
    <td class="col-verdict">
      {% if audit.has_card and audit.status == "complete" %}
        {% url 'audits:review' audit.pk as review_url %}
        {% with current=audit.current_verdict %}
        <form class="row-verdict" method="post" action="{{ review_url }}"
              hx-post="{{ review_url }}" hx-target="find .row-verdict-now" hx-select=".verdict-state" hx-swap="innerHTML">
          {% csrf_token %}
          <span class="row-verdict-now small">{% if current %}<strong>{{ current.get_verdict_display|capfirst }}</strong>{% else %}<span class="muted">—</span>{% endif %}</span>
          {% if can_review %}
            <button type="submit" name="verdict" value="confirmed" data-verdict-key="c" title="Confirmed (c)" aria-label="Confirm"><span aria-hidden="true">✓</span></button>
            <button type="submit" name="verdict" value="false_positive" data-verdict-key="f" title="False positive (f)" aria-label="False positive"><span aria-hidden="true">✗</span></button>
            <button type="submit" name="verdict" value="unsure" data-verdict-key="u" title="Unsure (u)" aria-label="Unsure"><span aria-hidden="true">?</span></button>
          {% endif %}
        </form>
        {% endwith %}
      {% endif %}
    </td>
  </tr>
  {% endwith %}
{% endfor %}
{% endwith %}
"""

EVIL = "<script>alert(\"x\")</script> & 'q' {{ x }}"


def _same(a: str, b: str) -> None:
    """Equal markup: whitespace runs count as one space (as the browser renders them)."""
    squash = lambda s: re.sub(r"\s+", " ", str(s)).strip()  # noqa: E731
    assert squash(a) == squash(b)


def _varied_audits() -> list[AuditRun]:
    """Audits covering every branch of a card and a row."""
    many = [
        annotation(
            f"T{i}",
            ["info", "warning", "critical", "odd"][i % 4],
            label=("" if i % 2 else f'Lbl <i>{i}</i> "q"'),
        )
        for i in range(9)
    ]
    runs = [
        make_audit(
            user_input=EVIL,
            response=EVIL,
            results=[
                result("bias", 0.9, [annotation("sycophancy", "critical", label=EVIL)]),
                result(
                    "tone",
                    0.5,
                    [annotation("condescending", "info"), annotation("condescending", "info")],
                ),
            ],
        ),
        make_audit(
            results=[result("prompt_leak", 0.1, [annotation("PROMPT_LEAK")], should_surface=True)]
        ),
        make_audit(results=[result("redflag", 0.7, many)]),
        make_audit(response="", user_input="", results=[result("bias", 0.0)]),
        make_audit(status="pending", response=""),
        make_audit(status="running", response="partial text"),
        make_audit(status="failed", response=""),
        make_audit(
            results=[result("links", 0.35, [annotation("LINK_UNHEALTHY")])],
            overall_score=None,
            threshold=0.25,
        ),
        make_audit(results=[result("tone", 0.31)], top_score=None, top_analyzer=""),
    ]
    at = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    Review.objects.create(
        audit=runs[0], verdict="false_positive", comment=EVIL, reviewer_name=EVIL, created_at=at
    )
    Review.objects.create(audit=runs[1], verdict="confirmed", reviewer_name="", created_at=at)
    Review.objects.create(audit=runs[2], verdict="unsure", comment="fine", created_at=at)
    return cards.prepare_cards(list(cards.card_queryset().order_by("-created_at", "-id")))


def _contexts(django_user_model) -> list[dict]:
    """No request (a shared Live fragment), a reviewer, and a user who may only look."""
    reviewer = django_user_model.objects.create_user("rev", is_staff=True, is_superuser=True)
    viewer = django_user_model.objects.create_user("view", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_auditrun"))
    return [
        {},
        {"perms": PermWrapper(reviewer), "csrf_token": "tok<en>"},
        {"perms": PermWrapper(viewer), "csrf_token": "token"},
    ]


def test_cards_are_the_markup_the_template_rendered(django_user_model):
    runs = _varied_audits()
    reference = engines["django"].from_string(REFERENCE_CARD)
    for context in _contexts(django_user_model):
        built = html.cards(runs, html.Rows.from_context(context))
        _same(built, reference.render({**context, "audits": runs}))


def test_table_rows_are_the_markup_the_template_rendered(django_user_model):
    runs = _varied_audits()
    for run in runs:  # what the table view set on its rows before
        run.table_badges = run.badges[: html.CHIPS]
        run.table_more = max(0, len(run.badges) - html.CHIPS) + run.more_badges
    reference = engines["django"].from_string(REFERENCE_ROWS)
    for context in _contexts(django_user_model):
        built = html.table_rows(runs, html.Rows.from_context(context))
        _same(built, reference.render({**context, "page": cards.Page(runs, None)}))


def test_a_cards_verdict_form_is_the_verdict_partial(django_user_model):
    run = make_audit(results=[result("bias", 0.9)])
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    verdicts = [None] + [
        Review(audit=run, verdict=v, comment=c, reviewer_name=n, created_at=at)
        for v, c, n in (("confirmed", "", ""), ("false_positive", EVIL, EVIL), ("unsure", "x", "y"))
    ]
    for context in _contexts(django_user_model):
        rows = html.Rows.from_context(context)
        for current in verdicts:
            partial = render_to_string(
                "audits/list.html#verdict",
                {**context, "audit": run, "current": current, "target": None},
            )
            _same(html.verdict_form(run.pk, current, rows), partial)


def test_model_text_is_escaped_never_markup(staff_user):
    run = make_audit(
        user_input=EVIL,
        response=EVIL,
        results=[result("bias", 0.9, [annotation("sycophancy", label=EVIL)])],
    )
    client = Client()
    client.force_login(staff_user)
    for view in ("cards", "table"):
        DashboardPreference.objects.update_or_create(user=staff_user, defaults={"audit_view": view})
        html = client.get(reverse("audits:list")).content.decode()
        assert str(run.pk) in html
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;q&#x27;" in html


@pytest.mark.parametrize("value", [0.3, 0.713, 1e-05, 2.0, 0, 3, 1234567, None, "a<b"])
def test_values_render_as_the_template_engine_renders_them(value):
    expected = engines["django"].from_string("{{ v }}").render({"v": value})
    assert html.text(value) == expected


@pytest.mark.parametrize(
    "value", [0.3, 0.713, 1e-05, 2.0, 0.0, -0.5, 999.5, 1234.5, 0, 7, 999, 1000, 1234567, None]
)
def test_numbers_render_as_the_template_engine_renders_them(value):
    expected = engines["django"].from_string("{{ v }}").render({"v": value})
    assert html.Rows.shared().number(value) == expected


@pytest.mark.parametrize("day", [1, 9, 28])
def test_row_times_are_the_date_filters_renderings(day):
    value = datetime(2026, 12, day, 7, 5, 3, 123456, tzinfo=UTC)
    template = engines["django"].from_string(
        "{{ d|date:'c' }}|{{ d|date:'Y-m-d H:i:s e' }}|{{ d|date:'M j, H:i' }}"
    )
    rows = html.Rows.shared()
    assert "|".join(html._row_dates(value, rows)) == template.render({"d": value})
    with timezone.override("Europe/Paris"):  # the current time zone, as the filter uses it
        rows = html.Rows.shared()
        assert "|".join(html._row_dates(value, rows)) == template.render({"d": value})


@pytest.mark.parametrize("view", ["cards", "table"])
def test_the_list_page_issues_the_same_queries_for_a_few_rows_or_a_full_page(
    staff_user, view, django_assert_max_num_queries
):
    """Session, user, view choice, the configuration's version (the filter choices), the
    page, and the two queries of `prepare_cards`."""
    DashboardPreference.objects.update_or_create(user=staff_user, defaults={"audit_view": view})
    client = Client()
    client.force_login(staff_user)
    make_audit(results=[result("bias", 0.9, [annotation("sycophancy")])])
    client.get(reverse("audits:list"))  # the configuration loaded once (cached)
    with django_assert_max_num_queries(7):
        assert client.get(reverse("audits:list")).status_code == 200
    for _ in range(60):
        run = make_audit(
            results=[
                result("bias", 0.9, [annotation("sycophancy")]),
                result("tone", 0.5, [annotation("condescending")]),
            ]
        )
        Review.objects.create(audit=run, verdict="confirmed", created_at=run.created_at)
    with django_assert_max_num_queries(7):
        html = client.get(reverse("audits:list")).content.decode()
    assert html.count('class="card audit-card"' if view == "cards" else 'class="audit-row"') == (
        cards.PAGE_SIZE if view == "cards" else cards.TABLE_PAGE_SIZE
    )


def test_live_cards_take_a_fixed_number_of_queries(django_assert_max_num_queries):
    ids = [
        make_audit(results=[result("bias", 0.9, [annotation("sycophancy")])]).pk for _ in range(12)
    ]
    filters = cards.ListFilters()
    # the ids that match, their rows, then `prepare_cards`' two
    with django_assert_max_num_queries(4):
        html = fragments.news_rows(fragments.NewsQuery(filters), ids)
    assert html.count('class="card audit-card"') == 12
    with django_assert_max_num_queries(3):
        changed = fragments.changed_since(filters, datetime.now(UTC) - timedelta(minutes=5))
    assert len(changed) == 12


def test_results_alike_on_two_audits_stay_on_their_own_cards():
    """Equal scores and positions: each card lists its own surfaced result once, and its
    findings grouped (a result's row comes once per finding)."""

    def findings():
        return [
            annotation("sycophancy", "warning"),
            annotation("anchoring_bias", "critical"),
            annotation("sycophancy", "warning"),
        ]

    first = make_audit(results=[result("bias", 0.5, findings())])
    second = make_audit(results=[result("bias", 0.5, findings())])
    for run in cards.prepare_cards([first, second]):
        assert [r.analyzer_id for r in run.surfaced_list] == ["bias"]
        assert [(b.type, b.count) for b in run.badges] == [("anchoring_bias", 1), ("sycophancy", 2)]


def test_cards_follow_a_new_verdict_and_a_deletion(staff_user):
    """Nothing is kept between renders: a verdict, a deletion show on the next page."""
    client = Client()
    client.force_login(staff_user)
    run = make_audit(results=[result("bias", 0.9, [annotation("sycophancy")])])
    assert "Not reviewed" in client.get(reverse("audits:list")).content.decode()
    Review.objects.create(
        audit=run, verdict="confirmed", reviewer_name="ann", created_at=run.created_at
    )
    html = client.get(reverse("audits:list")).content.decode()
    assert "<strong>Confirmed</strong>" in html and "by ann," in html
    run.delete()
    assert f"audit-card-{run.pk}" not in client.get(reverse("audits:list")).content.decode()
