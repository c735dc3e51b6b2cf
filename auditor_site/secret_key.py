"""The secret key is required where it is used: to serve pages (sessions, CSRF, signing).

Commands that sign nothing (create_api_key, audit, export_config, ...) run without one;
the server refuses to start without one (auditor_site/asgi.py, auditor_site/serve.py).
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

MISSING = "SECRET_KEY must be set when DEBUG is off (it signs sessions, CSRF tokens and links)"


def require_secret_key() -> None:
    """Raise ImproperlyConfigured when there is no key to serve with."""
    try:
        settings.SECRET_KEY  # noqa: B018 (Django refuses an empty key on access)
    except ImproperlyConfigured:
        raise ImproperlyConfigured(MISSING) from None
