"""Signals of the audits core, for the parts the core must not import (alerts, for one)."""

from __future__ import annotations

from django.dispatch import Signal

# Sent (robustly: a failing receiver never fails the audit) once an audit finished and its
# events went out. Keyword argument: `audit_id` (str).
audit_finished = Signal()

# Sent once when a process starts its recovery loop (audits.recovery), before the first
# sweep; receivers re-queue their own work a dead process left behind and return how much.
recovery_started = Signal()
