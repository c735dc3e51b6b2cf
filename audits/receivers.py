"""The audits app's signal receivers, connected once the app is ready (audits.apps): a stage
sends its signal and never imports the stages that listen to it."""

from __future__ import annotations

from django.db.models.signals import post_delete, post_save

from analyzers.models import AnalyzerConfig, CandidateConfig, GlobalSettings
from audits.execution import recovery
from audits.models import AlertRule
from audits.review import alert_rules, alert_tasks
from audits.shadow import hooks as shadow_hooks
from audits.signals import audit_finished, recovery_started
from audits.surfacing import jobs


def connect() -> None:
    # Task rows run here get heartbeats; the thread backend's sweeper starts on its first
    # enqueue (audits.execution.recovery).
    recovery.connect_signals()
    # A saved threshold re-surfaces the stored audits; the settings app never imports
    # audits, so audits listens to its models' saves.
    for model in (GlobalSettings, AnalyzerConfig):
        post_save.connect(
            jobs.thresholds_saved, sender=model, dispatch_uid=f"resurface-save-{model.__name__}"
        )
        post_delete.connect(
            jobs.thresholds_saved, sender=model, dispatch_uid=f"resurface-del-{model.__name__}"
        )
    recovery_started.connect(jobs.requeue_abandoned, dispatch_uid="resurface-recovery")
    audit_finished.connect(alert_tasks.on_audit_finished, dispatch_uid="alerts-finished")
    recovery_started.connect(alert_tasks.on_recovery_started, dispatch_uid="alerts-recovery")
    post_save.connect(alert_rules.rules_changed, sender=AlertRule, dispatch_uid="alerts-save")
    post_delete.connect(alert_rules.rules_changed, sender=AlertRule, dispatch_uid="alerts-delete")
    # Candidates in shadow analyse each finished audit too, in a task of their own.
    audit_finished.connect(shadow_hooks.on_audit_finished, dispatch_uid="shadow-finished")
    post_save.connect(shadow_hooks.invalidate, sender=CandidateConfig, dispatch_uid="shadow-save")
    post_delete.connect(
        shadow_hooks.invalidate, sender=CandidateConfig, dispatch_uid="shadow-delete"
    )
