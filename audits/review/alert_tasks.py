"""Background tasks of the alerts (django.tasks). Pass ids, never model instances."""

from __future__ import annotations

from django.tasks import task


@task()
def evaluate_alerts(audit_id: str) -> int:
    """Match a finished audit against the alert rules; queue one delivery per rule fired."""
    from . import alerts

    deliveries = alerts.evaluate(audit_id)
    for delivery in deliveries:
        deliver_alert.enqueue(delivery.pk)
    return len(deliveries)


@task()
def deliver_alert(delivery_id: int) -> str:
    """POST one alert with bounded retries (`AUDITOR_ALERT_DEADLINE_S`); see audits.review.alerts."""
    from . import alerts

    delivery = alerts.deliver(delivery_id)
    return delivery.status if delivery is not None else "skipped"
