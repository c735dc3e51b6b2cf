"""WebSocket routes (mounted by auditor_site.asgi)."""

from __future__ import annotations

from django.urls import path

from audits.live.consumers import AuditConsumer, LiveFeedConsumer
from audits.live.ingest import IngestConsumer

# Behind the session auth and origin check: the live pages (staff only).
websocket_urlpatterns = [
    path("ws/audits/", LiveFeedConsumer.as_asgi()),
    path("ws/audits/<uuid:audit_id>/", AuditConsumer.as_asgi()),
]

# API-key auth, no cookies, any origin (programs, not browsers): streamed ingestion.
ingest_urlpatterns = [
    path("ws/ingest/", IngestConsumer.as_asgi()),
]
