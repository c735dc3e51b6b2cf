from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe

from auditor_site.api import api
from audits.api.otlp.view import traces as otlp_traces


@require_safe
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for /favicon.ico whatever the page links: the vendored icon (a static
    file, served by WhiteNoise)."""
    return HttpResponseRedirect(static("favicon.svg"))


urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
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
