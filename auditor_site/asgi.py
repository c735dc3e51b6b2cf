"""ASGI entry point: HTTP through Django, WebSockets through Channels (served by daphne).

`POST /api/audits/stream` goes to a plain ASGI app in front of Django (Django reads a
whole body before its views run); `/ws/ingest/` is authenticated by API key; the live
pages' sockets need a staff session and the same origin (scheme, host and port).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
django_asgi_app = get_asgi_application()  # sets Django up

from auditor_site.asgi_handler import ReusableThreadASGIHandler  # noqa: E402

# Django's handler, reusing request threads instead of starting two per request.
django_asgi_app = ReusableThreadASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from auditor_site.ws_origin import SameOriginValidator  # noqa: E402
from audits.routing import ingest_urlpatterns, websocket_urlpatterns  # noqa: E402
from audits.stream_http import stream_endpoint  # noqa: E402

STREAM_PATH = "/api/audits/stream"


async def http_app(scope, receive, send):
    if scope["path"] in (STREAM_PATH, STREAM_PATH + "/"):
        await stream_endpoint(scope, receive, send)
    else:
        await django_asgi_app(scope, receive, send)


ingest_app = URLRouter(ingest_urlpatterns)
# Same origin = scheme, host and port (auditor_site/ws_origin.py), then the staff session.
live_app = SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))


async def websocket_app(scope, receive, send):
    if scope["path"].startswith("/ws/ingest/"):
        await ingest_app(scope, receive, send)
    else:
        await live_app(scope, receive, send)


application = ProtocolTypeRouter({"http": http_app, "websocket": websocket_app})
