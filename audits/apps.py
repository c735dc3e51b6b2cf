from django.apps import AppConfig


class AuditsConfig(AppConfig):
    name = "audits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .recovery import connect_signals
        from .review import alerts  # noqa: F401  (connects its signal receivers)

        connect_signals()  # task rows run here get heartbeats (audits.recovery)
        _connect_surfacing()


def _connect_surfacing() -> None:
    """A saved threshold re-surfaces the stored audits (audits.surfacing); the settings
    app never imports audits, so audits listens to its models' saves."""
    from django.db.models.signals import post_delete, post_save

    from analyzers.models import AnalyzerConfig, GlobalSettings

    from .signals import recovery_started
    from .surfacing import requeue_abandoned, thresholds_saved

    for model in (GlobalSettings, AnalyzerConfig):
        post_save.connect(thresholds_saved, sender=model, dispatch_uid=f"resurface-save-{model.__name__}")
        post_delete.connect(thresholds_saved, sender=model, dispatch_uid=f"resurface-del-{model.__name__}")
    recovery_started.connect(requeue_abandoned, dispatch_uid="resurface-recovery")
