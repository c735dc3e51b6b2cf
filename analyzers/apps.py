from django.apps import AppConfig


class AnalyzersConfig(AppConfig):
    name = "analyzers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import (  # deferred: they import models, loaded after this class
            config_store,  # noqa: F401  (connects the change-log signals)
            lock_wait,  # noqa: F401  (bounded SQLite lock waits per context)
        )
