from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from auditor_site.api import api
from audits.api.otlp.view import traces as otlp_traces

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("auditor_site.auth_urls")),
    # The HTTP API (django-ninja): /api/docs, /api/openapi.json.
    path("api/", api.urls),
    # OTLP/HTTP trace ingestion (an exporter's default path for traces).
    path("v1/traces", otlp_traces, name="otlp-traces"),
    # The dashboard's pages are added below this line (audits.urls).
]

# The dashboard at the site root (after the other prefixes).
urlpatterns += [path("", include("audits.urls"))]
# /static/ is served by WhiteNoise (a middleware), with DEBUG on or off.
