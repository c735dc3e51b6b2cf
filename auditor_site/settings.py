"""Settings, read from the environment with safe defaults.

Embedded defaults run everything in one process (SQLite under var/, in-memory channel
layer, in-process tasks); DATABASE_URL, REDIS_URL and AUDITOR_TASK_BACKEND scale it out.
"""

from __future__ import annotations

import ipaddress
import os
import resource
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
import django
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


# Off unless the environment turns it on (`make run` does, for development).
DEBUG = envbool("DEBUG", False)

# Needed to serve pages (sessions, CSRF, signing), not to run a command: with DEBUG off and
# no key it stays empty, Django refuses any use of it, and serving refuses to start
# (auditor_site/secret_key.py).
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY and DEBUG:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    key_file = VAR_DIR / "dev-secret-key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(50))
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
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
    "axes",
    "analyzers",
]

# Stock paths, so `check --deploy` sees (and checks) the real stack. The ASGI handler loads
# each one's inline-hook twin from auditor_site/middleware.py instead (no thread hop per
# hook; same behaviour): see `FAST_EQUIVALENTS` there.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Staff page views: the analysis threads make way between audits meanwhile.
    "auditor_site.people_first.PeopleFirstMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
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
    DATABASES["default"]["ENGINE"] = "auditor_site.sqlite"  # Django's, placeholders faster
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

# Login throttling (django-axes): after AUDITOR_LOGIN_FAILURE_LIMIT failed logins of one
# username from one address, that pair is locked out for AUDITOR_LOGIN_COOLOFF_MINUTES.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = envint("AUDITOR_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=envint("AUDITOR_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True  # failures only: no row per successful login
AXES_VERBOSE = False
# The address is REMOTE_ADDR: the peer, or what a trusted proxy forwarded (the server decides,
# AUDITOR_TRUSTED_PROXIES); never a client's own X-Forwarded-For, even with ipware installed.
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# Static files are served by WhiteNoise. With DEBUG off: compressed (gzip) and
# content-hashed (cached for ever) by `manage.py collectstatic` into STATIC_ROOT; with DEBUG
# on (`make run`): straight from static/, no collectstatic needed.
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "auditor_site.static_storage.CompressedHashedStorage"
    },
}
WHITENOISE_KEEP_ONLY_HASHED_FILES = True

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# Channels: in-memory by default, Redis when REDIS_URL is set (needed with several processes).
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        # The layer's reads block for seconds with nothing to read: no read
                        # timeout (redis-py's default of 5 s dropped idle live sockets);
                        # TCP keepalive and a PING on a connection idle this long find a
                        # dead peer instead, and connecting stays bounded.
                        "socket_timeout": None,
                        "socket_keepalive": True,
                        "health_check_interval": 30,
                        "socket_connect_timeout": 5,
                    }
                ]
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# GET /metrics (auditor_site/probes/metrics.py): off (404) unless a scraper may pass, with
# `Authorization: Bearer <AUDITOR_METRICS_TOKEN>` or from an address or network in
# AUDITOR_METRICS_ALLOW; the windowed metrics cover the last AUDITOR_METRICS_WINDOW_S s.
AUDITOR_METRICS_TOKEN = os.environ.get("AUDITOR_METRICS_TOKEN", "")
AUDITOR_METRICS_ALLOW = envlist("AUDITOR_METRICS_ALLOW", [])
for _network in AUDITOR_METRICS_ALLOW:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"AUDITOR_METRICS_ALLOW: {_network!r} is not an address or network"
        ) from exc
AUDITOR_METRICS_WINDOW_S = max(1, envint("AUDITOR_METRICS_WINDOW_S", 300))

# Background tasks: "thread" (default) runs audits on a small thread pool inside the server
# process, so `make run` needs nothing else; "database" queues them for `manage.py db_worker`
# processes on any number of machines (django-tasks-db); "immediate" runs them inside the
# request (debugging only).
AUDITOR_TASK_BACKEND = os.environ.get("AUDITOR_TASK_BACKEND", "thread")
# Nothing left pending (audits.execution.recovery): the server and every db_worker sweep at start and
# every AUDITOR_RECOVERY_INTERVAL s. A running run (or task row) without a heartbeat for
# AUDITOR_RECOVER_RUNNING_AFTER_S belongs to a dead process and is taken over; a pending
# run that no queue holds is queued again after AUDITOR_RECOVER_PENDING_AFTER_S.
AUDITOR_RECOVERY_INTERVAL = envint("AUDITOR_RECOVERY_INTERVAL", 10)
AUDITOR_RECOVER_RUNNING_AFTER_S = envint("AUDITOR_RECOVER_RUNNING_AFTER_S", 30)
AUDITOR_RECOVER_PENDING_AFTER_S = envint("AUDITOR_RECOVER_PENDING_AFTER_S", 30)
# Retention (audits.store.erasure): audits older than the configuration's
# retention_days are erased every AUDITOR_RETENTION_INTERVAL_S s by the same processes (0: off).
AUDITOR_RETENTION_INTERVAL_S = envint("AUDITOR_RETENTION_INTERVAL_S", 3600)
# Threads that run audits (thread backend, db_worker) keep their database connections
# this many seconds (0: closed after every task); requests keep CONN_MAX_AGE=0.
AUDITOR_TASK_CONN_MAX_AGE = envint("AUDITOR_TASK_CONN_MAX_AGE", 600)
# CPU niceness of the analysis processes (AUDITOR_ANALYSIS_PROCESSES). 0: niced, they
# starved under other load and held SQLite's write lock while descheduled (docs/contributing/performance.md).
AUDITOR_ANALYSIS_NICE = envint("AUDITOR_ANALYSIS_NICE", 0)
if AUDITOR_TASK_BACKEND == "thread":
    TASKS = {
        "default": {
            "BACKEND": "audits.execution.backend.ThreadPoolBackend",
            "OPTIONS": {
                "MAX_WORKERS": envint("AUDITOR_TASK_THREADS", 2),
                "SWEEP_INTERVAL": AUDITOR_RECOVERY_INTERVAL,
                # Audits claimed, analysed and stored together when the queue is deep.
                "BATCH_SIZE": envint("AUDITOR_TASK_BATCH", 32),
                # ... and up to this many when the queue is deep and nobody watches or
                # waits for a page (audits.execution.backend, `_batch_limit`).
                "DEEP_BATCH_SIZE": envint("AUDITOR_TASK_DEEP_BATCH", 64),
                # Analysis in this many child processes, off the server's GIL (0: in
                # the task threads); see audits.execution.processes.
                "PROCESSES": envint("AUDITOR_ANALYSIS_PROCESSES", 0),
                # Background tasks (shadow analysis) waiting for the audits to be done;
                # past it the oldest is dropped (audits.execution.background).
                "MAX_BACKGROUND": envint("AUDITOR_BACKGROUND_MAX_QUEUED", 10000),
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
# A request's line and headers, on the shipped server (auditor_site/edge/head_limit.py): their
# size, and the seconds they may take to arrive.
AUDITOR_MAX_HEAD_BYTES = envint("AUDITOR_MAX_HEAD_BYTES", 65_536)
AUDITOR_HEAD_TIMEOUT_S = max(1, envint("AUDITOR_HEAD_TIMEOUT_S", 30))
# Seconds a request body may go without a byte (the streams' bodies: the stream timeout).
AUDITOR_BODY_IDLE_TIMEOUT_S = max(1, envint("AUDITOR_BODY_IDLE_TIMEOUT_S", 30))


def default_max_connections() -> int:
    """Connections open at once: well under the file descriptors this process may open,
    leaving room for the database, logs and analysis processes."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, min(int(soft * 0.8) - 100, 10_000))


# Past this many open connections, a new one gets 503 at once (auditor_site/edge/head_limit.py).
AUDITOR_MAX_CONNECTIONS = max(1, envint("AUDITOR_MAX_CONNECTIONS", default_max_connections()))
# Addresses (IPs or CIDRs, comma-separated) whose X-Forwarded-For / X-Forwarded-Proto the
# server believes (the reverse proxy in front); none by default: the peer is the client.
AUDITOR_TRUSTED_PROXIES = [
    part.strip()
    for part in os.environ.get("AUDITOR_TRUSTED_PROXIES", "").split(",")
    if part.strip()
]
# Streams (POST /api/audits/stream, /ws/ingest/, the proxy): the seconds a stream may go
# without a byte from its client, and the seconds it may last in all.
AUDITOR_STREAM_IDLE_TIMEOUT_S = max(1, envint("AUDITOR_STREAM_IDLE_TIMEOUT_S", 120))
AUDITOR_STREAM_MAX_S = max(1, envint("AUDITOR_STREAM_MAX_S", 900))
AUDITOR_RATE_LIMIT_PER_MINUTE = envint("AUDITOR_RATE_LIMIT_PER_MINUTE", 6000)
# A key's burst: requests per second, per server process (analyzers/auth.py; 0: none).
AUDITOR_RATE_BURST_PER_S = envint("AUDITOR_RATE_BURST_PER_S", 100)
# POST /v1/traces (OTLP): body on the wire, after gzip, spans per request, text per span.
AUDITOR_OTLP_MAX_BODY_BYTES = envint("AUDITOR_OTLP_MAX_BODY_BYTES", 8_000_000)
AUDITOR_OTLP_MAX_DECOMPRESSED_BYTES = envint("AUDITOR_OTLP_MAX_DECOMPRESSED_BYTES", 32_000_000)
AUDITOR_OTLP_MAX_SPANS = envint("AUDITOR_OTLP_MAX_SPANS", 2000)
# OTLP/JSON (several times protobuf's CPU per byte): its own, lower, bound on the body.
AUDITOR_OTLP_JSON_MAX_BYTES = envint("AUDITOR_OTLP_JSON_MAX_BYTES", 4_000_000)
AUDITOR_OTLP_MAX_TEXT_CHARS = envint("AUDITOR_OTLP_MAX_TEXT_CHARS", 200_000)
# How long a request waits for SQLite's write lock before its 503 (analyzers/lock_wait.py).
AUDITOR_REQUEST_LOCK_WAIT_MS = envint("AUDITOR_REQUEST_LOCK_WAIT_MS", 2000)
# Group commit of single submissions (audits/api/group_commit.py): the POST /api/audits
# requests that arrive while a commit is in flight are stored together, at most this many.
AUDITOR_API_GROUP_COMMIT = envbool("AUDITOR_API_GROUP_COMMIT", True)
AUDITOR_API_GROUP_MAX = envint("AUDITOR_API_GROUP_MAX", 100)
# POST /api/audits answered in front of Django when its key was verified recently and its
# body is valid (audits/api/submit_asgi.py); off: every submission through Django.
AUDITOR_API_FAST_SUBMIT = envbool("AUDITOR_API_FAST_SUBMIT", True)
# Bounded work: `?wait=true` waits at most this long (then 202), with at most this many
# waiting requests per API key (more are queued: 202); responses of at least this many
# characters are audited on the thread backend's own lane for large audits.
AUDITOR_WAIT_TIMEOUT_S = envint("AUDITOR_WAIT_TIMEOUT_S", 30)
AUDITOR_WAIT_PER_KEY = envint("AUDITOR_WAIT_PER_KEY", 2)
# GET /api/audits/{id} (audits/api/polling.py): finished audits kept serialised per process
# (entries, bytes); GETs of one key waiting at once with `?wait=`; answered in front of
# Django when the key was verified recently (audits/api/poll_asgi.py).
AUDITOR_POLL_CACHE_ENTRIES = envint("AUDITOR_POLL_CACHE_ENTRIES", 1000)
AUDITOR_POLL_CACHE_BYTES = envint("AUDITOR_POLL_CACHE_BYTES", 32_000_000)
AUDITOR_POLL_WAIT_PER_KEY = envint("AUDITOR_POLL_WAIT_PER_KEY", 100)
AUDITOR_API_FAST_GET = envbool("AUDITOR_API_FAST_GET", True)
AUDITOR_LARGE_AUDIT_CHARS = envint("AUDITOR_LARGE_AUDIT_CHARS", 100_000)

# Third-party analyzers by dotted path (comma-separated in the environment).
AUDITOR_EXTRA_ANALYZERS = envlist("AUDITOR_EXTRA_ANALYZERS", [])
# Link health checks may reach private networks (intranets, tests). Off by default: SSRF guard.
AUDITOR_ALLOW_PRIVATE_NETWORKS = envbool("AUDITOR_ALLOW_PRIVATE_NETWORKS", False)
# The OpenAI-compatible proxy (POST /v1/chat/completions, analyzers/proxy_config.py):
# `proxy.api_key_env` may only name variables matching AUDITOR_PROXY_KEY_ENVS (exact names or
# prefixes ending in `*`); `proxy.base_url` passes the SSRF guard unless
# AUDITOR_PROXY_ALLOW_PRIVATE (a model server on localhost or the LAN).
AUDITOR_PROXY_KEY_ENVS = envlist("AUDITOR_PROXY_KEY_ENVS", ["AUDITOR_UPSTREAM_*"])
AUDITOR_PROXY_ALLOW_PRIVATE = envbool("AUDITOR_PROXY_ALLOW_PRIVATE", False)

# What the configuration (admin API keys, staff) may name; the environment decides
# (analyzers/policy.py). `llm.api_key_env` must match AUDITOR_LLM_KEY_ENVS (exact names,
# or prefixes ending in `*`); `llm.base_url` passes the SSRF guard unless
# AUDITOR_LLM_ALLOW_PRIVATE (a model server on localhost or the LAN); redflag `validators`
# must live under one of AUDITOR_VALIDATOR_MODULES (module prefixes; none by default).
AUDITOR_LLM_KEY_ENVS = envlist("AUDITOR_LLM_KEY_ENVS", ["AUDITOR_LLM_*"])
AUDITOR_LLM_ALLOW_PRIVATE = envbool("AUDITOR_LLM_ALLOW_PRIVATE", False)
AUDITOR_VALIDATOR_MODULES = envlist("AUDITOR_VALIDATOR_MODULES", [])

# Alert webhooks (audits.review.alert_rules): attempts per delivery, first backoff (doubles; one wait,
# Retry-After included, is capped), per-request timeout, and the total time one delivery
# may hold a task thread. AUDITOR_PUBLIC_URL (e.g. https://auditor.example.com) adds a
# dashboard link to each alert.
AUDITOR_ALERT_ATTEMPTS = envint("AUDITOR_ALERT_ATTEMPTS", 3)
AUDITOR_ALERT_BACKOFF_MS = envint("AUDITOR_ALERT_BACKOFF_MS", 1000)
AUDITOR_ALERT_MAX_DELAY_MS = envint("AUDITOR_ALERT_MAX_DELAY_MS", 10_000)
AUDITOR_ALERT_TIMEOUT_S = envint("AUDITOR_ALERT_TIMEOUT_S", 5)
AUDITOR_ALERT_DEADLINE_S = envint("AUDITOR_ALERT_DEADLINE_S", 15)
# Candidate configurations (docs/guides/candidates.md): how many in shadow at once, the
# audits waiting past which shadow analysis of a new audit is skipped (the database
# backend; the thread backend defers it until no audit runs), and the most stored audits one replay analyses.
AUDITOR_MAX_SHADOW_CANDIDATES = max(1, envint("AUDITOR_MAX_SHADOW_CANDIDATES", 3))
AUDITOR_SHADOW_MAX_WAITING = max(0, envint("AUDITOR_SHADOW_MAX_WAITING", 0))
AUDITOR_REPLAY_MAX = max(1, envint("AUDITOR_REPLAY_MAX", 5000))
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

# HTTPS (docs/operations/production.md): AUDITOR_HTTPS=true turns on the redirect to https, Secure
# session and CSRF cookies and one year of HSTS including subdomains; each Django setting
# below can also be set on its own. Behind a TLS-terminating proxy, SECURE_PROXY_SSL_HEADER
# names the header it sets (e.g. X-Forwarded-Proto) to "https".
AUDITOR_HTTPS = envbool("AUDITOR_HTTPS", False)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", AUDITOR_HTTPS)
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", AUDITOR_HTTPS)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", AUDITOR_HTTPS)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31_536_000 if AUDITOR_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", AUDITOR_HTTPS)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", False)
_proxy_header = os.environ.get("SECURE_PROXY_SSL_HEADER", "").strip()
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https") if _proxy_header else None
)

# E-mail: only when EMAIL_HOST is set (SMTP). Without it there is no mailer (sending
# raises; nothing tries SMTP on localhost) and the password-reset pages are off (404).
_email_host = os.environ.get("EMAIL_HOST", "")
_smtp = {
    "host": _email_host,
    "port": envint("EMAIL_PORT", 587),
    "username": os.environ.get("EMAIL_HOST_USER", ""),
    "password": os.environ.get("EMAIL_HOST_PASSWORD", ""),
    "use_tls": envbool("EMAIL_USE_TLS", True),
}
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "webmaster@localhost")
if django.VERSION >= (6, 1):  # MAILERS replaces the EMAIL_* settings
    MAILERS = (
        {"default": {"BACKEND": "django.core.mail.backends.smtp.EmailBackend", "OPTIONS": _smtp}}
        if _email_host
        else {}
    )
    if not _email_host:  # no mailer on purpose: sending raises instead of trying localhost
        SILENCED_SYSTEM_CHECKS = ["mail.W001"]
elif _email_host:
    EMAIL_HOST, EMAIL_PORT, EMAIL_USE_TLS = _smtp["host"], _smtp["port"], _smtp["use_tls"]
    EMAIL_HOST_USER, EMAIL_HOST_PASSWORD = _smtp["username"], _smtp["password"]
else:
    EMAIL_BACKEND = "django.core.mail.backends.dummy.EmailBackend"
AUDITOR_PASSWORD_RESET = bool(_email_host)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
    # django.tasks logs every task's start and end at INFO: a LogRecord per audit, built
    # even when no handler prints it (Django's own "django" logger is at INFO).
    "loggers": {"django.tasks": {"level": os.environ.get("AUDITOR_TASK_LOG_LEVEL", "WARNING")}},
}
