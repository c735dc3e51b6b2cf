from django.apps import AppConfig


class AuditsConfig(AppConfig):
    name = "audits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .recovery import connect_signals
        from .review import alerts  # noqa: F401  (connects its signal receivers)

        connect_signals()  # task rows run here get heartbeats (audits.recovery)
