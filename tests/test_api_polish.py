"""API details of issue 13: the stream endpoint in the schema, `loc` naming `body` once,
the export for a signed-in staff session."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db


def test_the_openapi_schema_documents_the_stream_endpoint():
    schema = Client().get("/api/openapi.json").json()
    operation = schema["paths"]["/api/audits/stream"]["post"]
    assert "application/x-ndjson" in operation["requestBody"]["content"]
    assert "text/event-stream" in operation["responses"]["200"]["content"]
    assert operation["security"] == [{"ApiKeyAuth": []}]


def test_the_documented_stream_endpoint_answers_under_wsgi_too(transactional_db, ingest_key):
    body = json.dumps({"user_input": "Hi?"}) + "\n" + json.dumps({"text": "Hello there."}) + "\n"
    r = Client().post(
        "/api/audits/stream", body, content_type="application/x-ndjson",
        headers={"Authorization": f"Bearer {ingest_key}"},
    )
    assert r.status_code == 200
    assert r["Content-Type"].startswith("text/event-stream")
    events = [line.removeprefix("event: ") for line in r.content.decode().splitlines()
              if line.startswith("event: ")]
    assert events[0] == "accepted" and events[-1] == "audit"


def test_the_stream_endpoint_refuses_a_missing_key_under_wsgi():
    r = Client().post("/api/audits/stream", "{}\n", content_type="application/x-ndjson")
    assert r.status_code == 401
    assert "detail" in r.json()


def test_a_422_names_body_once(ingest_key):
    r = ApiClient(ingest_key).post("/api/audits", {"user_input": 1})
    assert r.status_code == 422
    locs = [e["loc"] for e in r.json()["detail"]]
    assert ["body", "user_input"] in locs and ["body", "response"] in locs
    assert all(loc[:2] != ["body", "body"] for loc in locs)
