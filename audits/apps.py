from django.apps import AppConfig


class AuditsConfig(AppConfig):
    name = "audits"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from audits import receivers  # deferred: it imports models, loaded after this class

        receivers.connect()
