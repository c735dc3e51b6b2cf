"""Alert rules: match finished audits, count them in a window, POST webhooks with retries.

- `has_enabled_rules()` answers the pipeline hook (audits.review.alert_tasks), cached per
  process for `RULES_CACHE_S` and cleared on every rule save/delete, so ingest without
  rules costs at most one query per 5 s.
- `evaluate(audit_id)` matches the audit against the enabled rules (`rule_matches`, a pure
  function of `AuditFacts`), counts matching audits in the rule's window from the database
  (`matching_audits`, the same conditions in SQL), claims the rule's cooldown atomically and
  creates one `AlertDelivery` per rule that fires.
- `deliver(delivery_id)` POSTs the payload through the link checker's SSRF guard (one DNS
  resolution, pinned address, no redirects), retrying 429/5xx/network errors with
  exponential backoff (honouring a capped Retry-After) within `AUDITOR_ALERT_DEADLINE_S`;
  every attempt is recorded on the row. While a rule's last delivery failed less than
  `BREAKER_S` ago, its deliveries get one attempt (a dead receiver holds no task threads).

Annotation types and labels may come from model output: in the Slack `text` they are
shortened, stripped of backticks and control characters, escaped (&, <, >) and shown as
code, so they cannot mention a channel, add a link or format the message.
"""

from __future__ import annotations

import email.utils
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from analyzers.engine.linkcheck import BlockedURL, LinkChecker
from audits.models import AlertDelivery, AlertRule, AnalyzerRunRecord, Annotation, AuditRun

logger = logging.getLogger(__name__)

SEVERITIES = ("info", "warning", "critical")
RULES_CACHE_S = 5.0
MAX_ANNOTATIONS = 10
LABEL_CHARS = 120
USER_AGENT = "response-auditor-alerts/1.0"
RETRYABLE = frozenset({408, 425, 429})
# A rule whose previous delivery failed this recently gets one attempt, no retries: a dead
# receiver must not hold task threads (which also run the audits) for every alert.
BREAKER_S = 60


# --- is there anything to do? -----------------------------------------------------------

_cache_lock = threading.Lock()
_cache: tuple[float, bool] | None = None


def has_enabled_rules() -> bool:
    """Whether any rule is enabled; one query per `RULES_CACHE_S` per process at most."""
    global _cache
    now = time.monotonic()
    cached = _cache
    if cached is not None and cached[0] > now:
        return cached[1]
    answer = AlertRule.objects.filter(enabled=True).exists()
    with _cache_lock:
        _cache = (now + RULES_CACHE_S, answer)
    return answer


def invalidate_rules_cache() -> None:
    global _cache
    with _cache_lock:
        _cache = None


def rules_changed(**kwargs: Any) -> None:
    invalidate_rules_cache()


# --- matching ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AnnotationFact:
    analyzer_id: str
    type: str
    severity: str
    label: str


@dataclass(frozen=True, slots=True)
class AuditFacts:
    """What the rules look at, read once from the stored audit."""

    audit_id: str
    overall_score: float | None
    surfaced_analyzers: tuple[str, ...]
    annotations: tuple[AnnotationFact, ...]
    created_at: datetime | None = None


def audit_facts(audit_id: Any) -> AuditFacts | None:
    """The facts of a complete audit (None when it is missing or not complete)."""
    run = (
        AuditRun.objects.filter(pk=audit_id, status=AuditRun.Status.COMPLETE)
        .only("id", "overall_score", "created_at")
        .first()
    )
    if run is None:
        return None
    surfaced = tuple(
        AnalyzerRunRecord.objects.filter(audit_id=run.pk, surfaced=True)
        .order_by("position")
        .values_list("analyzer_id", flat=True)
    )
    annotations = tuple(
        AnnotationFact(*row)
        for row in Annotation.objects.filter(audit_id=run.pk)
        .order_by("result__position", "position")
        .values_list("analyzer_id", "type", "severity", "label")
    )
    return AuditFacts(str(run.pk), run.overall_score, surfaced, annotations, run.created_at)


def severities_at_or_above(minimum: str) -> tuple[str, ...]:
    if minimum not in SEVERITIES:
        return SEVERITIES
    return SEVERITIES[SEVERITIES.index(minimum) :]


def _has_annotation_condition(rule: AlertRule) -> bool:
    return bool(rule.annotation_type or rule.min_severity)


def matching_annotations(rule: AlertRule, facts: AuditFacts) -> list[AnnotationFact]:
    """The annotations that meet the rule's annotation conditions (all, when it has none)."""
    allowed = severities_at_or_above(rule.min_severity) if rule.min_severity else SEVERITIES
    return [
        a
        for a in facts.annotations
        if (not rule.annotation_type or a.type == rule.annotation_type)
        and (not rule.min_severity or a.severity in allowed)
        and (not rule.analyzer_id or a.analyzer_id == rule.analyzer_id)
    ]


def rule_matches(rule: AlertRule, facts: AuditFacts) -> bool:
    """True when every condition the rule sets holds for the audit (no rate window here)."""
    score = facts.overall_score
    if rule.min_overall_score is not None and (score is None or score < rule.min_overall_score):
        return False
    if _has_annotation_condition(rule):
        return bool(matching_annotations(rule, facts))
    return not rule.analyzer_id or rule.analyzer_id in facts.surfaced_analyzers


def matching_audits(rule: AlertRule, since: datetime) -> QuerySet[AuditRun]:
    """Complete audits submitted since `since` that meet the rule: `rule_matches` in SQL."""
    qs = AuditRun.objects.filter(status=AuditRun.Status.COMPLETE, created_at__gte=since)
    if rule.min_overall_score is not None:
        qs = qs.filter(overall_score__gte=rule.min_overall_score)
    if _has_annotation_condition(rule):
        annotations = Annotation.objects.filter(audit_id=OuterRef("pk"))
        if rule.annotation_type:
            annotations = annotations.filter(type=rule.annotation_type)
        if rule.min_severity:
            annotations = annotations.filter(severity__in=severities_at_or_above(rule.min_severity))
        if rule.analyzer_id:
            annotations = annotations.filter(analyzer_id=rule.analyzer_id)
        qs = qs.filter(Exists(annotations))
    elif rule.analyzer_id:
        qs = qs.filter(
            Exists(
                AnalyzerRunRecord.objects.filter(
                    audit_id=OuterRef("pk"), analyzer_id=rule.analyzer_id, surfaced=True
                )
            )
        )
    return qs


def count_in_window(rule: AlertRule, facts: AuditFacts, now: datetime) -> int:
    """Matching audits in the rule's window, this one included; stops counting at N."""
    since = now - timedelta(minutes=rule.window_minutes or 0)
    count = matching_audits(rule, since).values("pk")[: rule.min_count].count()
    if facts.created_at is not None and facts.created_at < since:
        count += 1  # a late (re-queued) run still counts itself
    return count


def _claim(rule: AlertRule, now: datetime) -> bool:
    """Mark the rule fired; with a window, only one caller per window wins (the cooldown)."""
    qs = AlertRule.objects.filter(pk=rule.pk, enabled=True)
    if rule.window_minutes:
        since = now - timedelta(minutes=rule.window_minutes)
        qs = qs.filter(Q(last_fired_at__isnull=True) | Q(last_fired_at__lte=since))
    return qs.update(last_fired_at=now) == 1


def evaluate(audit_id: Any, *, now: datetime | None = None) -> list[AlertDelivery]:
    """Create a pending delivery for every enabled rule this audit makes fire."""
    facts = audit_facts(audit_id)
    if facts is None:
        return []
    now = now or timezone.now()
    created = []
    for rule in AlertRule.objects.filter(enabled=True):
        if not rule_matches(rule, facts):
            continue
        if rule.window_minutes and count_in_window(rule, facts, now) < rule.min_count:
            continue
        if not _claim(rule, now):
            continue
        created.append(
            AlertDelivery.objects.create(
                rule=rule,
                audit_id=facts.audit_id,
                payload=build_payload(rule, facts, now=now),
            )
        )
    return created


# --- payload ----------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")


def _short(value: str, limit: int = LABEL_CHARS) -> str:
    text = " ".join(_CONTROL.sub(" ", value or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_escape(value: str) -> str:
    """Slack's three control characters: no `<!channel>`, `<url|text>` or `&` entities."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(value: str, limit: int = LABEL_CHARS) -> str:
    """Untrusted text as a Slack code span: no mentions, links or formatting inside."""
    text = _short((value or "").replace("`", "'"), limit)
    return f"`{slack_escape(text)}`" if text else "`-`"


def audit_url(audit_id: str) -> str | None:
    base = getattr(settings, "AUDITOR_PUBLIC_URL", "")
    if not base:
        return None
    from django.urls import reverse

    return base + reverse("audits:detail", args=[audit_id])


def build_payload(
    rule: AlertRule,
    facts: AuditFacts,
    *,
    now: datetime | None = None,
    test: bool = False,
) -> dict[str, Any]:
    """The JSON body: structured fields plus a Slack-compatible `text`."""
    now = now or timezone.now()
    found = matching_annotations(rule, facts)
    shown = [
        {
            "analyzer_id": a.analyzer_id,
            "type": _short(a.type, 100),
            "severity": a.severity,
            "label": _short(a.label),
        }
        for a in found[:MAX_ANNOTATIONS]
    ]
    url = audit_url(facts.audit_id)
    window = (
        {"minutes": rule.window_minutes, "min_count": rule.min_count}
        if rule.window_minutes
        else None
    )
    score = facts.overall_score
    lines = [
        f"*{'[TEST] ' if test else ''}Response Auditor alert: {slack_escape(_short(rule.name, 200))}*",
        f"Audit {_code(facts.audit_id)} · score {'-' if score is None else f'{score:.2f}'}"
        + (
            " · surfaced: " + ", ".join(_code(a, 60) for a in facts.surfaced_analyzers)
            if facts.surfaced_analyzers
            else ""
        ),
    ]
    if window:
        lines.append(
            f"At least {rule.min_count} matching audits in the last {rule.window_minutes} min"
        )
    for a in shown:
        lines.append(f"• {a['severity']} {_code(a['type'], 100)} {_code(a['label'])}")
    if len(found) > len(shown):
        lines.append(f"… and {len(found) - len(shown)} more")
    if url:
        lines.append(f"<{slack_escape(url).replace('|', '%7C')}|Open the audit>")
    return {
        "text": "\n".join(lines),
        "test": test,
        "rule": {"id": rule.pk, "name": rule.name, "conditions": rule.conditions_summary()},
        "audit": {
            "id": facts.audit_id,
            "overall_score": score,
            "surfaced_analyzers": list(facts.surfaced_analyzers),
            "url": url,
        },
        "annotations": shown,
        "annotations_total": len(found),
        "window": window,
        "sent_at": now.isoformat(),
    }


# --- delivery ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attempt:
    http_status: int | None
    error: str
    retry_after_s: float | None = None
    retryable: bool = True

    @property
    def ok(self) -> bool:
        return self.http_status is not None and 200 <= self.http_status < 300


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date), None if unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, (when - (now or timezone.now())).total_seconds())


async def _post(url: str, body: bytes, timeout_s: float) -> Attempt:
    """One POST to the guarded, pinned address; the response body is never read."""
    checker = LinkChecker(allow_private_networks=settings.AUDITOR_ALLOW_PRIVATE_NETWORKS)
    try:
        pinned, host_header, server_name = await checker.pin(url)
    except BlockedURL as exc:
        return Attempt(None, f"blocked: {exc}", retryable=False)
    except httpx.InvalidURL as exc:
        return Attempt(None, f"blocked: invalid URL ({exc})", retryable=False)
    headers = {
        "Host": host_header,
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
    }
    extensions = {"sni_hostname": server_name} if pinned.scheme == "https" else {}
    try:
        async with httpx.AsyncClient(
            trust_env=False, follow_redirects=False, timeout=httpx.Timeout(timeout_s)
        ) as client:
            request = client.build_request(
                "POST", pinned, content=body, headers=headers, extensions=extensions
            )
            response = await client.send(request, stream=True)
            await response.aclose()
    except (httpx.HTTPError, OSError) as exc:
        return Attempt(None, f"{type(exc).__name__}: {exc}"[:500])
    status = response.status_code
    if 200 <= status < 300:
        return Attempt(status, "")
    retryable = status in RETRYABLE or status >= 500
    error = f"HTTP {status}" + (" (redirects are not followed)" if 300 <= status < 400 else "")
    return Attempt(status, error, parse_retry_after(response.headers.get("retry-after")), retryable)


def _delay(attempt_no: int, retry_after: float | None) -> float:
    """Exponential backoff from the setting; Retry-After may ask for longer, up to the cap."""
    base = settings.AUDITOR_ALERT_BACKOFF_MS / 1000 * 2 ** (attempt_no - 1)
    cap = settings.AUDITOR_ALERT_MAX_DELAY_MS / 1000
    wanted = max(base, retry_after or 0.0)
    return min(wanted, cap)


def deliver(delivery_id: Any) -> AlertDelivery | None:
    """Send one pending delivery, retrying within the deadline; records every attempt."""
    delivery = (
        AlertDelivery.objects.select_related("rule")
        .filter(pk=delivery_id, status=AlertDelivery.Status.PENDING)
        .first()
    )
    if delivery is None:
        return None
    body = json.dumps(delivery.payload, separators=(",", ":")).encode()
    max_attempts = max(1, settings.AUDITOR_ALERT_ATTEMPTS)
    broken = (
        AlertDelivery.objects.filter(
            rule_id=delivery.rule_id,
            status=AlertDelivery.Status.FAILED,
            created_at__gte=timezone.now() - timedelta(seconds=BREAKER_S),
        )
        .exclude(pk=delivery.pk)
        .exists()
    )
    if broken:
        max_attempts = 1
    deadline = time.monotonic() + settings.AUDITOR_ALERT_DEADLINE_S
    post = async_to_sync(_post)
    while True:
        remaining = deadline - time.monotonic()
        timeout = max(0.1, min(float(settings.AUDITOR_ALERT_TIMEOUT_S), remaining))
        try:
            attempt = post(delivery.rule.webhook_url, body, timeout)
        except Exception as exc:  # a bug must not leave the delivery pending for ever
            logger.exception("alert delivery %s crashed", delivery.pk)
            attempt = Attempt(None, f"{type(exc).__name__}: {exc}"[:500], retryable=False)
        delivery.attempts += 1
        delivery.last_http_status = attempt.http_status
        delivery.last_error = attempt.error
        entry: dict[str, Any] = {
            "at": timezone.now().isoformat(),
            "http_status": attempt.http_status,
            "error": attempt.error,
        }
        delivery.history = [*delivery.history, entry]
        wait = None
        if attempt.ok:
            delivery.status = AlertDelivery.Status.DELIVERED
            delivery.delivered_at = timezone.now()
        elif not attempt.retryable or delivery.attempts >= max_attempts:
            delivery.status = AlertDelivery.Status.FAILED
            if broken and attempt.retryable:
                delivery.last_error += (
                    f"; no retry: this rule's previous delivery failed in the last {BREAKER_S} s"
                )
        else:
            wait = _delay(delivery.attempts, attempt.retry_after_s)
            if time.monotonic() + wait >= deadline:
                delivery.status = AlertDelivery.Status.FAILED
                delivery.last_error = (
                    f"{attempt.error}; no retry: the next one would pass the "
                    f"{settings.AUDITOR_ALERT_DEADLINE_S} s delivery deadline"
                )
                wait = None
            else:
                entry["wait_s"] = round(wait, 3)
        try:
            delivery.save(
                update_fields=[
                    "status",
                    "attempts",
                    "last_http_status",
                    "last_error",
                    "history",
                    "delivered_at",
                ]
            )
        except AlertDelivery.NotUpdated:
            return None  # the rule (and its deliveries) was deleted meanwhile
        if wait is None:
            return delivery
        time.sleep(wait)
        if not AlertDelivery.objects.filter(pk=delivery.pk).exists():
            return None  # the rule was deleted while we waited
