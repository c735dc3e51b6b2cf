"""Alert rules: matching, rate windows and cooldown, payload, webhook delivery with retries.

Deliveries go to a real HTTP server on 127.0.0.1 (so the private-network setting is on,
except where the SSRF guard itself is tested).
"""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from audits.intake.submit import submit_audit
from audits.models import AlertDelivery, AlertRule, AuditRun
from audits.review import alert_rules, alert_tasks
from audits.review.alert_rules import AnnotationFact, AuditFacts
from tests.factories import annotation, make_audit, result

# --- a scripted webhook receiver ---------------------------------------------------------


class Receiver:
    """Answers each POST with the next scripted (status, headers); records what arrived."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, str]]] = []
        self.default: tuple[int, dict[str, str]] = (200, {})
        self.hits: list[dict] = []
        self.lock = threading.Lock()
        self.url = ""

    def answer(self, *statuses: int | tuple[int, dict[str, str]]) -> None:
        self.script = [s if isinstance(s, tuple) else (s, {}) for s in statuses]

    def next(self) -> tuple[int, dict[str, str]]:
        with self.lock:
            return self.script.pop(0) if self.script else self.default


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            state.hits.append(
                {
                    "at": time.monotonic(),
                    "path": self.path,
                    "body": body,
                    "content_type": self.headers.get("Content-Type"),
                    "host": self.headers.get("Host"),
                }
            )
            status, headers = state.next()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/hook"
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def fast_retries(settings):
    settings.AUDITOR_ALLOW_PRIVATE_NETWORKS = True
    settings.AUDITOR_ALERT_ATTEMPTS = 3
    settings.AUDITOR_ALERT_BACKOFF_MS = 100
    settings.AUDITOR_ALERT_MAX_DELAY_MS = 1000
    settings.AUDITOR_ALERT_TIMEOUT_S = 5
    settings.AUDITOR_ALERT_DEADLINE_S = 10
    return settings


def rule(**fields) -> AlertRule:
    fields.setdefault("name", "critical findings")
    fields.setdefault("webhook_url", "https://hooks.example.com/services/T0/B0/x")
    return AlertRule(**fields)


def facts(score: float | None = 0.5, annotations=(), surfaced=("redflag",)) -> AuditFacts:
    return AuditFacts(
        audit_id="3f2c1a9e-0000-4000-8000-000000000001",
        overall_score=score,
        surfaced_analyzers=tuple(surfaced),
        annotations=tuple(AnnotationFact(*a) for a in annotations),
    )


def critical_audit(**fields):
    return make_audit(
        results=[result("redflag", 1.0, [annotation("EMPTY_OUTPUT", "critical")])], **fields
    )


def calm_audit(**fields):
    return make_audit(
        results=[result("tone", 0.1, [annotation("condescending", "info")])], **fields
    )


# --- matching (pure) ---------------------------------------------------------------------


def test_the_score_condition_holds_at_or_above_the_value():
    r = rule(min_overall_score=0.7)
    assert alert_rules.rule_matches(r, facts(0.7))
    assert alert_rules.rule_matches(r, facts(0.95))
    assert not alert_rules.rule_matches(r, facts(0.69))
    assert not alert_rules.rule_matches(r, facts(None))


def test_type_and_minimum_severity_must_meet_in_one_annotation():
    r = rule(annotation_type="sycophancy", min_severity="warning")
    assert alert_rules.rule_matches(r, facts(annotations=[("bias", "sycophancy", "critical", "x")]))
    assert alert_rules.rule_matches(r, facts(annotations=[("bias", "sycophancy", "warning", "x")]))
    assert not alert_rules.rule_matches(r, facts(annotations=[("bias", "sycophancy", "info", "x")]))
    # the type at a low severity and another type at a high one: no single annotation meets both
    split = [("bias", "sycophancy", "info", "x"), ("bias", "anchoring_bias", "critical", "y")]
    assert not alert_rules.rule_matches(r, facts(annotations=split))


def test_severity_alone_matches_any_type_at_or_above():
    r = rule(min_severity="critical")
    assert alert_rules.rule_matches(
        r, facts(annotations=[("links", "LINK_UNHEALTHY", "critical", "")])
    )
    assert not alert_rules.rule_matches(
        r, facts(annotations=[("links", "LINK_UNHEALTHY", "warning", "")])
    )
    assert not alert_rules.rule_matches(r, facts(annotations=[]))


def test_analyzer_restricts_annotations_and_alone_means_its_result_surfaced():
    typed = rule(annotation_type="condescending", analyzer_id="tone")
    assert alert_rules.rule_matches(
        typed, facts(annotations=[("tone", "condescending", "info", "")])
    )
    assert not alert_rules.rule_matches(
        typed, facts(annotations=[("custom_judge", "condescending", "info", "")])
    )
    alone = rule(analyzer_id="bias")
    assert alert_rules.rule_matches(alone, facts(surfaced=["redflag", "bias"]))
    assert not alert_rules.rule_matches(
        alone, facts(surfaced=["redflag"], annotations=[("bias", "sycophancy", "info", "")])
    )


def test_every_condition_that_is_set_must_hold():
    r = rule(min_overall_score=0.8, min_severity="critical")
    crit = [("redflag", "EMPTY_OUTPUT", "critical", "")]
    assert alert_rules.rule_matches(r, facts(0.9, crit))
    assert not alert_rules.rule_matches(r, facts(0.5, crit))
    assert not alert_rules.rule_matches(r, facts(0.9, [("redflag", "EMPTY_OUTPUT", "warning", "")]))


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "__all__"),
        ({"min_overall_score": 1.5}, "min_overall_score"),
        ({"min_overall_score": -0.1}, "min_overall_score"),
        ({"min_severity": "critical", "webhook_url": "ftp://hooks.example.com/x"}, "webhook_url"),
        # SSRF: internal addresses are refused when the rule is saved, not only on delivery.
        ({"min_severity": "critical", "webhook_url": "http://127.0.0.1:8000/x"}, "webhook_url"),
        ({"min_severity": "critical", "webhook_url": "http://169.254.169.254/"}, "webhook_url"),
        ({"min_severity": "critical", "webhook_url": "http://localhost/hook"}, "webhook_url"),
        ({"min_severity": "critical", "min_count": 3}, "window_minutes"),
        ({"min_severity": "critical", "min_count": 0, "window_minutes": 5}, "min_count"),
    ],
)
def test_invalid_rules_are_refused_naming_the_field(fields, field):
    with pytest.raises(ValidationError) as info:
        rule(**fields).full_clean()
    assert field in info.value.message_dict


def test_a_valid_rule_passes_validation():
    rule(min_overall_score=0.8, min_count=3, window_minutes=10).full_clean()


# --- matching in the database, rate windows, cooldown -----------------------------------


@pytest.mark.django_db
def test_sql_matching_agrees_with_the_pure_function():
    from tests.factories import make_audits

    runs = make_audits(60, seed=3, spread=timedelta(minutes=30))
    since = timezone.now() - timedelta(hours=1)
    rules = [
        rule(min_overall_score=0.5),
        rule(min_severity="critical"),
        rule(annotation_type="sycophancy", min_severity="warning"),
        rule(analyzer_id="bias"),
        rule(analyzer_id="links", annotation_type="LINK_UNHEALTHY"),
        rule(min_overall_score=0.2, min_severity="warning", analyzer_id="tone"),
    ]
    all_facts = [alert_rules.audit_facts(run.pk) for run in runs]
    for r in rules:
        expected = {f.audit_id for f in all_facts if f and alert_rules.rule_matches(r, f)}
        got = {str(pk) for pk in alert_rules.matching_audits(r, since).values_list("pk", flat=True)}
        assert got == expected, r.conditions_summary()
        assert expected, f"the sample should exercise {r.conditions_summary()}"


@pytest.mark.django_db
def test_without_a_window_every_matching_audit_alerts():
    r = AlertRule.objects.create(
        name="every", webhook_url="https://hooks.example.com/a", min_severity="critical"
    )
    first, second, calm = critical_audit(), critical_audit(), calm_audit()
    assert len(alert_rules.evaluate(first.pk)) == 1
    assert len(alert_rules.evaluate(second.pk)) == 1
    assert alert_rules.evaluate(calm.pk) == []
    deliveries = list(AlertDelivery.objects.filter(rule=r).order_by("id"))
    assert [str(d.audit_id) for d in deliveries] == [str(first.pk), str(second.pk)]
    assert all(d.status == "pending" and d.payload["window"] is None for d in deliveries)


@pytest.mark.django_db
def test_a_window_fires_at_the_nth_matching_audit_then_cools_down():
    r = AlertRule.objects.create(
        name="burst",
        webhook_url="https://hooks.example.com/a",
        min_severity="critical",
        min_count=3,
        window_minutes=10,
    )
    t0 = timezone.now()
    fired = []
    for i in range(5):
        run = critical_audit(created_at=t0 + timedelta(seconds=i))
        calm_audit(created_at=t0 + timedelta(seconds=i))  # never counted
        fired.append(len(alert_rules.evaluate(run.pk, now=t0 + timedelta(seconds=i))))
    assert fired == [0, 0, 1, 0, 0]  # the third fires; the burst sends one alert
    delivery = AlertDelivery.objects.get(rule=r)
    assert delivery.payload["window"] == {"minutes": 10, "min_count": 3}
    assert "At least 3 matching audits in the last 10 min" in delivery.payload["text"]

    # 11 minutes later the old audits are out of the window: three new ones are needed
    later = t0 + timedelta(minutes=11)
    fired = []
    for i in range(3):
        run = critical_audit(created_at=later + timedelta(seconds=i))
        fired.append(len(alert_rules.evaluate(run.pk, now=later + timedelta(seconds=i))))
    assert fired == [0, 0, 1]
    assert AlertDelivery.objects.filter(rule=r).count() == 2


@pytest.mark.django_db
def test_the_cooldown_holds_while_matches_keep_arriving():
    r = AlertRule.objects.create(
        name="burst",
        webhook_url="https://hooks.example.com/a",
        min_overall_score=0.9,
        min_count=2,
        window_minutes=5,
    )
    t0 = timezone.now()
    results = []
    for i in range(8):  # one matching audit a minute: the window always holds 2 or more
        now = t0 + timedelta(minutes=i)
        run = critical_audit(created_at=now)
        results.append(len(alert_rules.evaluate(run.pk, now=now)))
    assert results == [0, 1, 0, 0, 0, 0, 1, 0]  # fired at minute 1, then again after 5 min
    assert AlertDelivery.objects.filter(rule=r).count() == 2


@pytest.mark.django_db
def test_disabled_rules_and_unfinished_audits_never_fire():
    AlertRule.objects.create(
        name="off", webhook_url="https://hooks.example.com/a", min_severity="info", enabled=False
    )
    AlertRule.objects.create(
        name="on", webhook_url="https://hooks.example.com/a", min_severity="info"
    )
    assert alert_rules.evaluate(critical_audit(status="running").pk) == []
    assert [d.rule.name for d in alert_rules.evaluate(critical_audit().pk)] == ["on"]


# --- payload -----------------------------------------------------------------------------


def test_the_payload_carries_the_audit_the_matches_and_a_slack_text(settings):
    settings.AUDITOR_PUBLIC_URL = "https://auditor.example.com"
    r = rule(pk=7, min_severity="warning", name="Bias & tone")
    f = facts(
        0.82,
        [
            ("bias", "sycophancy", "critical", "Agrees with everything"),
            ("tone", "condescending", "info", "not matched"),
        ],
        surfaced=["bias"],
    )
    payload = alert_rules.build_payload(r, f)
    json.dumps(payload)  # serialisable as is
    assert payload["rule"] == {"id": 7, "name": "Bias & tone", "conditions": "severity ≥ warning"}
    assert payload["audit"] == {
        "id": f.audit_id,
        "overall_score": 0.82,
        "surfaced_analyzers": ["bias"],
        "url": f"https://auditor.example.com/audits/{f.audit_id}/",
    }
    assert payload["annotations"] == [
        {
            "analyzer_id": "bias",
            "type": "sycophancy",
            "severity": "critical",
            "label": "Agrees with everything",
        }
    ]
    text = payload["text"]
    assert text.startswith("*Response Auditor alert: Bias &amp; tone*")
    assert "score 0.82" in text
    assert "• critical `sycophancy` `Agrees with everything`" in text
    assert f"<https://auditor.example.com/audits/{f.audit_id}/|Open the audit>" in text
    assert "not matched" not in text


def test_model_text_cannot_inject_slack_markup():
    label = "Hi <!channel> see <https://evil.example|click> & `code` \n*bold*" + "x" * 500
    r = rule(min_severity="info")
    payload = alert_rules.build_payload(r, facts(annotations=[("tone", "<@U123>", "info", label)]))
    text = payload["text"]
    assert "<!channel>" not in text and "<https://evil" not in text and "<@U123>" not in text
    assert "&lt;!channel&gt;" in text and "&amp;" in text
    bullet = [line for line in text.splitlines() if line.startswith("•")][0]
    # type and label are two closed code spans: nothing can break out of them
    assert bullet.count("`") == 4
    assert len(bullet) < 300
    assert len(payload["annotations"][0]["label"]) <= alert_rules.LABEL_CHARS
    assert "\n" not in payload["annotations"][0]["label"]


def test_the_payload_lists_at_most_ten_annotations_and_says_how_many_more():
    many = [("redflag", f"T{i}", "warning", "") for i in range(14)]
    payload = alert_rules.build_payload(rule(min_severity="warning"), facts(annotations=many))
    assert len(payload["annotations"]) == 10
    assert payload["annotations_total"] == 14
    assert "… and 4 more" in payload["text"]
    assert payload["audit"]["url"] is None  # no AUDITOR_PUBLIC_URL: no link


# --- delivery ----------------------------------------------------------------------------


def _delivery(url: str, **rule_fields) -> AlertDelivery:
    r = AlertRule.objects.create(
        name="hook", webhook_url=url, min_severity="critical", **rule_fields
    )
    return AlertDelivery.objects.create(rule=r, payload={"text": "hello", "n": 1})


@pytest.mark.django_db
def test_delivery_retries_with_backoff_until_the_receiver_accepts(receiver, fast_retries):
    receiver.answer(500, 500, 200)
    delivery = alert_rules.deliver(_delivery(receiver.url).pk)
    delivery.refresh_from_db()
    assert delivery.status == "delivered"
    assert delivery.attempts == 3
    assert delivery.last_http_status == 200 and delivery.last_error == ""
    assert delivery.delivered_at is not None
    assert [h["http_status"] for h in delivery.history] == [500, 500, 200]
    assert [h.get("wait_s") for h in delivery.history] == [0.1, 0.2, None]
    gaps = [b["at"] - a["at"] for a, b in pairwise(receiver.hits)]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2  # exponential backoff, honoured
    assert len(receiver.hits) == 3
    assert json.loads(receiver.hits[0]["body"]) == {"text": "hello", "n": 1}
    assert receiver.hits[0]["content_type"] == "application/json"
    assert receiver.hits[0]["path"] == "/hook"


@pytest.mark.django_db
def test_a_receiver_that_keeps_failing_leaves_a_failed_delivery(receiver, fast_retries):
    receiver.default = (503, {})
    delivery = alert_rules.deliver(_delivery(receiver.url).pk)
    delivery.refresh_from_db()
    assert delivery.status == "failed"
    assert delivery.attempts == 3 == len(receiver.hits)
    assert delivery.last_http_status == 503
    assert delivery.last_error == "HTTP 503"
    assert delivery.delivered_at is None
    assert alert_rules.deliver(delivery.pk) is None  # finished deliveries are not sent again


@pytest.mark.django_db
def test_after_a_failed_delivery_the_rule_gets_one_attempt_until_the_breaker_resets(
    receiver, fast_retries
):
    receiver.default = (500, {})
    first = alert_rules.deliver(_delivery(receiver.url).pk)
    assert first.status == "failed" and first.attempts == 3
    second = AlertDelivery.objects.create(rule=first.rule, payload={"text": "again"})
    second = alert_rules.deliver(second.pk)
    assert second.status == "failed" and second.attempts == 1
    assert "previous delivery failed" in second.last_error
    assert len(receiver.hits) == 4

    AlertDelivery.objects.filter(rule=first.rule).update(
        created_at=timezone.now() - timedelta(seconds=alert_rules.BREAKER_S + 1)
    )
    receiver.answer(500, 200)
    third = AlertDelivery.objects.create(rule=first.rule, payload={"text": "later"})
    third = alert_rules.deliver(third.pk)
    assert third.status == "delivered" and third.attempts == 2


@pytest.mark.django_db
def test_client_errors_and_redirects_are_not_retried(receiver, fast_retries):
    receiver.answer(404)
    delivery = alert_rules.deliver(_delivery(receiver.url).pk)
    assert (delivery.status, delivery.attempts, delivery.last_http_status) == ("failed", 1, 404)

    receiver.answer((302, {"Location": "http://169.254.169.254/latest/meta-data/"}))
    delivery = alert_rules.deliver(_delivery(receiver.url).pk)
    assert (delivery.status, delivery.attempts, delivery.last_http_status) == ("failed", 1, 302)
    assert "redirects are not followed" in delivery.last_error
    assert len(receiver.hits) == 2


@pytest.mark.django_db
def test_retry_after_is_honoured_up_to_the_cap(receiver, fast_retries):
    fast_retries.AUDITOR_ALERT_MAX_DELAY_MS = 600
    receiver.answer((429, {"Retry-After": "1"}), (429, {"Retry-After": "3600"}), 200)
    delivery = alert_rules.deliver(_delivery(receiver.url).pk)
    assert delivery.status == "delivered" and delivery.attempts == 3
    assert [h.get("wait_s") for h in delivery.history] == [0.6, 0.6, None]
    gaps = [b["at"] - a["at"] for a, b in pairwise(receiver.hits)]
    assert all(0.6 <= gap < 3 for gap in gaps)


@pytest.mark.django_db
def test_retries_stop_at_the_delivery_deadline(receiver, fast_retries):
    fast_retries.AUDITOR_ALERT_ATTEMPTS = 20
    fast_retries.AUDITOR_ALERT_BACKOFF_MS = 400
    fast_retries.AUDITOR_ALERT_MAX_DELAY_MS = 10_000
    fast_retries.AUDITOR_ALERT_DEADLINE_S = 1
    receiver.default = (500, {})
    started = time.monotonic()
    delivery = alert_rules.deliver(_delivery(receiver.url).pk)
    assert time.monotonic() - started < 1.5
    assert delivery.status == "failed"
    assert delivery.attempts == 2  # waits 0.4 s, then a 0.8 s wait would pass 1 s
    assert "deadline" in delivery.last_error


@pytest.mark.django_db
def test_a_private_webhook_is_refused_without_the_private_network_setting(receiver, settings):
    settings.AUDITOR_ALLOW_PRIVATE_NETWORKS = False
    delivery = alert_rules.deliver(_delivery(receiver.url).pk)
    assert delivery.status == "failed"
    assert delivery.attempts == 1
    assert delivery.last_http_status is None
    assert delivery.last_error.startswith("blocked:")
    assert receiver.hits == []  # nothing reached the server


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://localhost/hook",
        "http://2130706433/x",
        "http://[::ffff:127.0.0.1]/x",
        "https://10.0.0.1/x",
    ],
)
def test_internal_addresses_are_refused_like_link_checks(url, settings):
    settings.AUDITOR_ALLOW_PRIVATE_NETWORKS = False
    delivery = alert_rules.deliver(_delivery(url).pk)
    assert delivery.status == "failed" and delivery.last_error.startswith("blocked:")


# --- the pipeline hook and the admin -----------------------------------------------------


@pytest.mark.django_db
def test_without_enabled_rules_the_hook_queues_nothing_and_reads_at_most_once(
    monkeypatch, django_assert_num_queries
):

    queued = []

    class Recorder:
        def enqueue(self, audit_id: str) -> None:
            queued.append(audit_id)

    monkeypatch.setattr(alert_tasks, "evaluate_alerts", Recorder())
    alert_rules.invalidate_rules_cache()
    with django_assert_num_queries(1):
        alert_tasks.after_audit_finished("a")
    with django_assert_num_queries(0):  # cached
        for _ in range(100):
            alert_tasks.after_audit_finished("b")
    assert queued == []
    AlertRule.objects.create(
        name="r", webhook_url="https://hooks.example.com/a", min_severity="info"
    )
    alert_tasks.after_audit_finished("c")  # saving a rule cleared the cache
    assert queued == ["c"]


@pytest.mark.django_db
def test_a_submitted_audit_that_matches_a_rule_is_delivered(
    receiver, fast_retries, django_capture_on_commit_callbacks
):
    receiver.answer(500, 200)
    r = AlertRule.objects.create(
        name="empty answers",
        webhook_url=receiver.url,
        annotation_type="EMPTY_OUTPUT",
        min_severity="critical",
    )
    AlertRule.objects.create(  # never matches: no delivery
        name="tone", webhook_url=receiver.url, analyzer_id="tone", min_severity="critical"
    )
    with django_capture_on_commit_callbacks(execute=True):
        run = submit_audit(user_input="Anything?", response="")
    run.refresh_from_db()
    assert run.status == "complete"
    delivery = AlertDelivery.objects.get()
    assert delivery.rule == r and delivery.audit_id == run.pk
    assert delivery.status == "delivered" and delivery.attempts == 2
    body = json.loads(receiver.hits[-1]["body"])
    assert body["audit"]["id"] == str(run.pk)
    assert body["annotations"][0]["type"] == "EMPTY_OUTPUT"
    assert "empty answers" in body["text"]


@pytest.fixture
def admin_client(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.mark.django_db
def test_the_admin_sends_a_test_alert_and_lists_its_delivery(admin_client, receiver, fast_retries):
    r = AlertRule.objects.create(name="ops", webhook_url=receiver.url, min_overall_score=0.9)
    response = admin_client.post(
        "/admin/audits/alertrule/",
        {"action": "send_test_alert", "_selected_action": [r.pk]},
    )
    assert response.status_code == 302
    delivery = AlertDelivery.objects.get(rule=r)
    assert delivery.is_test and delivery.status == "delivered"
    assert json.loads(receiver.hits[0]["body"])["test"] is True
    assert r.last_fired_at is None  # a test does not start the cooldown
    page = admin_client.get("/admin/audits/alertrule/").content.decode()
    assert "delivered (1 attempt(s))" in page and "score ≥ 0.9" in page
    page = admin_client.get("/admin/audits/alertdelivery/").content.decode()
    assert "ops" in page
    assert admin_client.get(f"/admin/audits/alertdelivery/{delivery.pk}/change/").status_code == 200


@pytest.mark.django_db
def test_the_admin_form_refuses_a_rule_without_conditions(admin_client):
    response = admin_client.post(
        "/admin/audits/alertrule/add/",
        {
            "name": "none",
            "enabled": "on",
            "webhook_url": "https://hooks.example.com/a",
            "min_count": 1,
            "min_severity": "",
        },
    )
    assert response.status_code == 200
    assert "Set at least one condition" in response.content.decode()
    assert not AlertRule.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_thread_backend_delivers_alerts_after_the_audits(receiver, fast_retries, thread_tasks):
    receiver.answer(503)
    AlertRule.objects.create(
        name="empty",
        webhook_url=receiver.url,
        annotation_type="EMPTY_OUTPUT",
        min_count=2,
        window_minutes=5,
    )
    runs = [submit_audit(user_input="Anything?", response="") for _ in range(3)]
    for _ in range(3):  # the audits, then the evaluations they queue, then the delivery
        assert thread_tasks.wait_idle(timeout=30)
    statuses = AuditRun.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)
    assert set(statuses) == {"complete"}
    delivery = AlertDelivery.objects.get()  # three matches, one alert in the window
    assert delivery.status == "delivered" and delivery.attempts == 2
    assert delivery.payload["window"] == {"minutes": 5, "min_count": 2}
    assert len(receiver.hits) == 2


@pytest.mark.django_db
def test_deleting_the_rule_during_retries_ends_the_delivery_quietly(
    receiver, fast_retries, monkeypatch
):
    delivery = _delivery(receiver.url)
    receiver.default = (500, {})

    class Clock:  # the admin deletes the rule while the delivery waits for its retry
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            AlertRule.objects.filter(pk=delivery.rule_id).delete()

    monkeypatch.setattr(alert_rules, "time", Clock)
    assert alert_rules.deliver(delivery.pk) is None
    assert len(receiver.hits) == 1
    assert not AlertDelivery.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "bad",
    [
        {"min_count": ""},
        {"min_count": "-2"},
        {"min_overall_score": "high"},
        {"webhook_url": "javascript:alert(1)"},
        {"min_severity": "fatal"},
    ],
)
def test_the_admin_form_answers_bad_values_with_errors_not_500(admin_client, bad):
    form = {
        "name": "r",
        "enabled": "on",
        "webhook_url": "https://hooks.example.com/a",
        "min_count": "1",
        "min_severity": "critical",
    } | bad
    response = admin_client.post("/admin/audits/alertrule/add/", form)
    assert response.status_code == 200
    assert "errornote" in response.content.decode()
    assert not AlertRule.objects.exists()


@pytest.mark.django_db
def test_recover_audits_resends_deliveries_a_dead_worker_left_pending(receiver, fast_retries):
    from django.core.management import call_command

    stuck = _delivery(receiver.url)
    fresh = AlertDelivery.objects.create(rule=stuck.rule, payload={"text": "in flight"})
    AlertDelivery.objects.filter(pk=stuck.pk).update(
        created_at=timezone.now() - timedelta(minutes=10)
    )
    out = io.StringIO()
    call_command("recover_audits", stdout=out)
    assert "alert deliveries requeued 1" in out.getvalue()
    stuck.refresh_from_db()
    fresh.refresh_from_db()
    assert stuck.status == "delivered" and len(receiver.hits) == 1
    assert fresh.status == "pending"  # its worker may still be sending it


@pytest.mark.django_db
def test_a_webhook_on_an_internationalised_domain_is_delivered_with_its_ascii_host(
    receiver, fast_retries, monkeypatch
):
    from analyzers.engine.linkcheck import LinkChecker

    async def resolve(self, host, port):  # DNS is the outside world: the name is ours
        return ["127.0.0.1"]

    monkeypatch.setattr(LinkChecker, "resolve", resolve)
    port = receiver.url.split(":")[2].split("/")[0]
    receiver.answer(200)
    delivery = alert_rules.deliver(_delivery(f"http://пример.рф:{port}/hook").pk)
    assert delivery is not None and delivery.status == "delivered", delivery and delivery.last_error
    assert receiver.hits[0]["host"] == f"xn--e1afmkfd.xn--p1ai:{port}"


@pytest.mark.django_db
def test_an_unexpected_error_fails_the_delivery_instead_of_leaving_it_pending(
    fast_retries, monkeypatch
):
    async def broken(url, body, timeout_s):
        raise RuntimeError("a bug")

    monkeypatch.setattr(alert_rules, "_post", broken)
    delivery = alert_rules.deliver(_delivery("https://hooks.example.com/x").pk)
    assert delivery.status == "failed" and delivery.attempts == 1
    assert delivery.last_error == "RuntimeError: a bug"
