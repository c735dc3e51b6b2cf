"""Settings, read from the environment with safe defaults.

Embedded defaults run everything in one process (SQLite under var/, in-memory channel
layer, in-process tasks); DATABASE_URL, REDIS_URL and AUDITOR_TASK_BACKEND scale it out.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AUDITOR_VAR_DIR", BASE_DIR / "var"))


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean, not {value!r}")


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from exc


def envlist(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


DEBUG = envbool("DEBUG", True)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    key_file = VAR_DIR / "dev-secret-key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ninja",
    "django_htmx",
    "channels",
    # audits before django_tasks_db: its `db_worker` (with recovery) replaces the stock one.
    "audits",
    "django_tasks_db",
    "analyzers",
]

# Django's own middleware classes, subclassed to skip a thread hop per hook under ASGI
# (auditor_site/middleware.py): same behaviour, a fraction of the per-request CPU.
MIDDLEWARE = [
    "auditor_site.middleware.SecurityMiddleware",
    "auditor_site.middleware.ContentSecurityPolicyMiddleware",
    "auditor_site.middleware.SessionMiddleware",
    "auditor_site.middleware.CommonMiddleware",
    "auditor_site.middleware.CsrfViewMiddleware",
    "auditor_site.middleware.AuthenticationMiddleware",
    "auditor_site.middleware.MessageMiddleware",
    "auditor_site.middleware.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "auditor_site.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csp",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = None
ASGI_APPLICATION = "auditor_site.asgi.application"

DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'auditor.sqlite3'}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            # WAL + a busy timeout let the server, its task thread and workers share the file.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
    # A file (not :memory:) so live servers in child processes share it; one per test run,
    # inherited by the children through the environment.
    os.environ.setdefault("AUDITOR_TEST_DB", str(VAR_DIR / f"test-{os.getpid()}.sqlite3"))
    DATABASES["default"]["TEST"] = {"NAME": os.environ["AUDITOR_TEST_DB"]}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# Channels: in-memory by default, Redis when REDIS_URL is set (needed with several processes).
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Background tasks: "thread" (default) runs audits on a small thread pool inside the server
# process, so `make run` needs nothing else; "database" queues them for `manage.py db_worker`
# processes on any number of machines (django-tasks-db); "immediate" runs them inside the
# request (debugging only).
AUDITOR_TASK_BACKEND = os.environ.get("AUDITOR_TASK_BACKEND", "thread")
# Nothing left pending (audits.recovery): the server and every db_worker sweep at start and
# every AUDITOR_RECOVERY_INTERVAL s. A running run (or task row) without a heartbeat for
# AUDITOR_RECOVER_RUNNING_AFTER_S belongs to a dead process and is taken over; a pending
# run that no queue holds is queued again after AUDITOR_RECOVER_PENDING_AFTER_S.
AUDITOR_RECOVERY_INTERVAL = envint("AUDITOR_RECOVERY_INTERVAL", 10)
AUDITOR_RECOVER_RUNNING_AFTER_S = envint("AUDITOR_RECOVER_RUNNING_AFTER_S", 30)
AUDITOR_RECOVER_PENDING_AFTER_S = envint("AUDITOR_RECOVER_PENDING_AFTER_S", 30)
# Threads that run audits (thread backend, db_worker) keep their database connections
# this many seconds (0: closed after every task); requests keep CONN_MAX_AGE=0.
AUDITOR_TASK_CONN_MAX_AGE = envint("AUDITOR_TASK_CONN_MAX_AGE", 600)
if AUDITOR_TASK_BACKEND == "thread":
    TASKS = {
        "default": {
            "BACKEND": "audits.task_backends.ThreadPoolBackend",
            "OPTIONS": {
                "MAX_WORKERS": envint("AUDITOR_TASK_THREADS", 2),
                "SWEEP_INTERVAL": AUDITOR_RECOVERY_INTERVAL,
            },
        }
    }
elif AUDITOR_TASK_BACKEND == "database":
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
elif AUDITOR_TASK_BACKEND == "immediate":
    TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
else:
    raise ImproperlyConfigured("AUDITOR_TASK_BACKEND must be 'thread', 'database' or 'immediate'")
# API limits: request body size and requests per minute per API key.
AUDITOR_MAX_BODY_BYTES = envint("AUDITOR_MAX_BODY_BYTES", 1_000_000)
AUDITOR_RATE_LIMIT_PER_MINUTE = envint("AUDITOR_RATE_LIMIT_PER_MINUTE", 6000)

# Third-party analyzers by dotted path (comma-separated in the environment).
AUDITOR_EXTRA_ANALYZERS = envlist("AUDITOR_EXTRA_ANALYZERS", [])
# Link health checks may reach private networks (intranets, tests). Off by default: SSRF guard.
AUDITOR_ALLOW_PRIVATE_NETWORKS = envbool("AUDITOR_ALLOW_PRIVATE_NETWORKS", False)

# Alert webhooks (audits.review.alerts): attempts per delivery, first backoff (doubles; one wait,
# Retry-After included, is capped), per-request timeout, and the total time one delivery
# may hold a task thread. AUDITOR_PUBLIC_URL (e.g. https://auditor.example.com) adds a
# dashboard link to each alert.
AUDITOR_ALERT_ATTEMPTS = envint("AUDITOR_ALERT_ATTEMPTS", 3)
AUDITOR_ALERT_BACKOFF_MS = envint("AUDITOR_ALERT_BACKOFF_MS", 1000)
AUDITOR_ALERT_MAX_DELAY_MS = envint("AUDITOR_ALERT_MAX_DELAY_MS", 10_000)
AUDITOR_ALERT_TIMEOUT_S = envint("AUDITOR_ALERT_TIMEOUT_S", 5)
AUDITOR_ALERT_DEADLINE_S = envint("AUDITOR_ALERT_DEADLINE_S", 15)
AUDITOR_PUBLIC_URL = os.environ.get("AUDITOR_PUBLIC_URL", "").rstrip("/")

# Content-Security-Policy (Django 6 built-in): no inline scripts, no eval.
from django.utils.csp import CSP  # noqa: E402

SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
}
