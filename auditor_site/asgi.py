"""ASGI entry point: HTTP through Django, WebSockets through Channels (served by uvicorn,
`python -m auditor_site.serve`).

Every HTTP request passes `BodyLimitMiddleware` first: bodies over `AUDITOR_MAX_BODY_BYTES`
get 413 before they are read (auditor_site/edge/body_limit.py); then `KeyGate`: a body to an
endpoint that needs an API key is refused from the head when the key cannot pass
(auditor_site/edge/key_gate.py). Requests and WebSockets wait at
most `AUDITOR_REQUEST_LOCK_WAIT_MS` for SQLite's write lock (analyzers/lock_wait.py).

`POST /api/audits` is answered in front of Django in its common case (a recently
verified key, a valid body: audits/api/submit_asgi.py), else by Django; so is
`GET /api/audits/<id>` (audits/api/poll_asgi.py). Probes (`/healthz`, `/readyz`:
auditor_site/probes/health.py) and `/metrics` (auditor_site/probes/metrics.py) are answered
here too.
`POST /api/audits/stream` and the OpenAI-compatible proxy (`/v1/chat/completions`,
`/v1/models`) go to plain ASGI apps in front of Django (Django reads a whole body before
its views run, and cannot see a client leave mid-answer); `/ws/ingest/` is authenticated
by API key; the live pages' sockets need a staff session and the same origin (scheme,
host and port).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
django_asgi_app = get_asgi_application()  # sets Django up

from auditor_site.secret_key import require_secret_key  # noqa: E402

require_secret_key()  # serving needs it (sessions, CSRF, signing)

from auditor_site.asgi_handler import ReusableThreadASGIHandler  # noqa: E402

# Django's handler, reusing request threads instead of starting two per request.
# (Off with AUDITOR_BENCH_PLAIN_HANDLER=1 only to measure it: bench/bench_server.py.)
if os.environ.get("AUDITOR_BENCH_PLAIN_HANDLER") != "1":
    django_asgi_app = ReusableThreadASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from analyzers.lock_wait import lock_wait  # noqa: E402
from auditor_site.api import api  # noqa: E402
from auditor_site.edge.body_limit import BodyLimitMiddleware  # noqa: E402
from auditor_site.edge.key_gate import KeyGate  # noqa: E402
from auditor_site.edge.ws_origin import SameOriginValidator  # noqa: E402
from auditor_site.probes.health import PATHS as HEALTH_PATHS  # noqa: E402
from auditor_site.probes.health import health_endpoint  # noqa: E402
from auditor_site.probes.metrics import PATH as METRICS_PATH  # noqa: E402
from auditor_site.probes.metrics import live_connection, metrics_endpoint  # noqa: E402
from audits.api.poll_asgi import PollEndpoint, is_poll  # noqa: E402
from audits.api.proxy import PATHS as PROXY_PATHS  # noqa: E402
from audits.api.proxy import proxy_endpoint  # noqa: E402
from audits.api.proxy.app import CHAT_PATH  # noqa: E402
from audits.api.stream_http import stream_endpoint  # noqa: E402
from audits.api.submit_asgi import PATH as SUBMIT_PATH  # noqa: E402
from audits.api.submit_asgi import SubmitEndpoint  # noqa: E402
from audits.live.routing import ingest_urlpatterns, websocket_urlpatterns  # noqa: E402

STREAM_PATH = "/api/audits/stream"
# Bodies sent as they come: their idle timeout is the streams' (auditor_site/edge/head_limit.py).
STREAMING_PATHS = frozenset({STREAM_PATH, STREAM_PATH + "/", CHAT_PATH, CHAT_PATH + "/"})
submit_endpoint = SubmitEndpoint(api, django_asgi_app)
poll_endpoint = PollEndpoint(api, django_asgi_app)


async def route_http(scope, receive, send):
    lock_wait.set(settings.AUDITOR_REQUEST_LOCK_WAIT_MS)
    if scope["path"] in HEALTH_PATHS:  # probes: no session, no key, no middleware
        await health_endpoint(scope, receive, send)
    elif scope["path"] == METRICS_PATH:  # its own access check (auditor_site/probes/metrics.py)
        await metrics_endpoint(scope, receive, send)
    elif scope["path"] in (STREAM_PATH, STREAM_PATH + "/"):
        await stream_endpoint(scope, receive, send)
    elif scope["path"] == SUBMIT_PATH:  # its common case in front of Django
        await submit_endpoint(scope, receive, send)
    elif is_poll(scope):  # GET /api/audits/<id>: its common case too
        await poll_endpoint(scope, receive, send)
    elif scope["path"] in PROXY_PATHS:  # the OpenAI-compatible proxy (audits/api/proxy/)
        await proxy_endpoint(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


OTLP_PATH = "/v1/traces"


def body_limit(path: str) -> int:
    """OTLP exporters send batches of spans: their endpoint has its own, larger limit."""
    if path.rstrip("/") == OTLP_PATH:
        return settings.AUDITOR_OTLP_MAX_BODY_BYTES
    return settings.AUDITOR_MAX_BODY_BYTES


# The scope of each key-protected path answered outside ninja (their own checks answer).
FRONT_SCOPES = {path: "ingest" for path in (STREAM_PATH, OTLP_PATH, *PROXY_PATHS)}

# The stream endpoint counts its own body (it answers while it reads).
http_app = BodyLimitMiddleware(
    KeyGate(route_http, FRONT_SCOPES),
    limit=body_limit,
    counted_by_app=(STREAM_PATH, STREAM_PATH + "/"),
)


ingest_app = URLRouter(ingest_urlpatterns)
# Same origin = scheme, host and port (auditor_site/edge/ws_origin.py), then the staff session.
live_app = SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))


async def websocket_app(scope, receive, send):
    lock_wait.set(settings.AUDITOR_REQUEST_LOCK_WAIT_MS)
    if scope["path"].startswith("/ws/ingest/"):
        with live_connection("ingest"):
            await ingest_app(scope, receive, send)
    else:
        with live_connection("live"):
            await live_app(scope, receive, send)


application = ProtocolTypeRouter({"http": http_app, "websocket": websocket_app})

# Take over at once what a previous server process left pending or running, then keep
# sweeping (audits.execution.recovery); the thread backend's tasks also beat from here.
from audits.execution import recovery  # noqa: E402

recovery.start()
# The task backend now, not at the first audit: its analysis processes, if any
# (AUDITOR_ANALYSIS_PROCESSES), start with the server.
from django.tasks import task_backends  # noqa: E402

task_backends["default"]
