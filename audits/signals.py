"""Signals of the audits core, for the parts the core must not import (alerts, for one)."""

from __future__ import annotations

import logging

from django.dispatch import Signal

from audits.models import AuditRun

logger = logging.getLogger(__name__)

# Sent (robustly: a failing receiver never fails the audit) once an audit finished and its
# events went out. Keyword argument: `audit_id` (str).
audit_finished = Signal()

# Sent once when a process starts its recovery loop (audits.execution.recovery), before the
# first sweep; receivers re-queue their own work a dead process left behind and return how much.
recovery_started = Signal()


def send_finished_signal(audit_id: str) -> None:
    """`audit_finished` for a complete audit (its receivers may queue tasks: alerts)."""
    for receiver, error in audit_finished.send_robust(sender=AuditRun, audit_id=audit_id):
        if isinstance(error, Exception):
            logger.error("%r failed after audit %s", receiver, audit_id, exc_info=error)
