from django.apps import AppConfig


class AnalyzersConfig(AppConfig):
    name = "analyzers"
    default_auto_field = "django.db.models.BigAutoField"
