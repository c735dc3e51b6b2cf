"""The alerts' tasks and what enqueues them: a finished audit (`after_audit_finished`, on
`audits.signals.audit_finished`) queues `evaluate_alerts` when an enabled rule exists; each
rule that fires queues a `deliver_alert`; the admin's test alert and the recovery of
deliveries a dead process left pending queue it too. The rules themselves:
audits.review.alert_rules. Pass ids, never model instances."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.tasks import task
from django.utils import timezone

from audits.models import AlertDelivery, AlertRule
from audits.review import alert_rules
from audits.review.alert_rules import AnnotationFact, AuditFacts, build_payload, has_enabled_rules

logger = logging.getLogger(__name__)


def after_audit_finished(audit_id: str) -> None:
    """The pipeline hook: queue the evaluation when rules exist; never fails the audit."""
    try:
        if not has_enabled_rules():
            return
        evaluate_alerts.enqueue(str(audit_id))
    except Exception:
        logger.exception("could not queue the alert evaluation of audit %s", audit_id)


def on_audit_finished(sender: Any, audit_id: str, **kwargs: Any) -> None:
    after_audit_finished(audit_id)


def send_test_alert(rule: AlertRule) -> AlertDelivery:
    """Queue a delivery of a sample payload (not counted by the cooldown)."""
    facts = AuditFacts(
        audit_id="00000000-0000-0000-0000-000000000000",
        overall_score=1.0,
        surfaced_analyzers=(rule.analyzer_id,) if rule.analyzer_id else (),
        annotations=(
            AnnotationFact(
                rule.analyzer_id or "redflag",
                rule.annotation_type or "TEST_ALERT",
                rule.min_severity or "warning",
                "A test alert from the admin",
            ),
        ),
    )
    delivery = AlertDelivery.objects.create(
        rule=rule, is_test=True, payload=build_payload(rule, facts, test=True)
    )
    deliver_alert.enqueue(delivery.pk)
    return delivery


def recover_pending_deliveries(*, older_than: timedelta | None = None) -> int:
    """Re-queue deliveries a dead process left pending.

    A live process finishes a delivery within `AUDITOR_ALERT_DEADLINE_S`, so one still
    pending after twice that (and a minute) has lost its worker.
    """
    if older_than is None:
        older_than = timedelta(seconds=2 * settings.AUDITOR_ALERT_DEADLINE_S + 60)
    stuck = AlertDelivery.objects.filter(
        status=AlertDelivery.Status.PENDING, created_at__lt=timezone.now() - older_than
    ).values_list("pk", flat=True)
    ids = list(stuck)
    for delivery_id in ids:
        deliver_alert.enqueue(delivery_id)
    return len(ids)


def on_recovery_started(sender: Any, **kwargs: Any) -> int:
    return recover_pending_deliveries()


@task()
def evaluate_alerts(audit_id: str) -> int:
    """Match a finished audit against the alert rules; queue one delivery per rule fired."""
    deliveries = alert_rules.evaluate(audit_id)
    for delivery in deliveries:
        deliver_alert.enqueue(delivery.pk)
    return len(deliveries)


@task()
def deliver_alert(delivery_id: int) -> str:
    """POST one alert with bounded retries (`AUDITOR_ALERT_DEADLINE_S`); see audits.review.alerts."""
    delivery = alert_rules.deliver(delivery_id)
    return delivery.status if delivery is not None else "skipped"
