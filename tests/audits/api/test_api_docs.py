"""The API docs page works offline and under the Content-Security-Policy."""

from __future__ import annotations

import re

from django.contrib.staticfiles import finders
from django.test import Client


def test_api_docs_load_only_local_assets_and_no_inline_script():
    response = Client().get("/api/docs", HTTP_HOST="127.0.0.1")
    assert response.status_code == 200
    page = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets and all(url.startswith("/static/") for url in assets), assets
    inline = [tag for tag in re.findall(r"<script[^>]*>", page) if "src=" not in tag]
    assert all('type="application/json"' in tag for tag in inline), inline
    for url in assets:
        name = re.sub(r"\.[0-9a-f]{12}(\.\w+)$", r"\1", url.removeprefix("/static/"))  # hash
        assert finders.find(name), f"{url} is not a static file"


def test_the_api_docs_name_every_way_in_and_link_back_to_the_dashboard():
    schema = Client().get("/api/openapi.json", HTTP_HOST="127.0.0.1").json()
    description = schema["info"]["description"]
    for path in (
        "/v1/chat/completions",
        "/v1/models",
        "/v1/traces",
        "/api/audits/stream",
        "/ws/ingest/",
        "/healthz",
        "/metrics",
    ):
        assert f"{path}`" in description, path
    assert "](/)" in description  # the dashboard
