from django.apps import AppConfig


class AuditsConfig(AppConfig):
    name = "audits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .review import alerts  # noqa: F401  (connects its signal receivers)
