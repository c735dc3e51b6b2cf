"""API details: the stream endpoint in the schema, `loc` naming `body` once,
the export for a signed-in staff session."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.test import Client

from tests.conftest import ApiClient
from tests.factories import make_audit

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
        "/api/audits/stream",
        body,
        content_type="application/x-ndjson",
        headers={"Authorization": f"Bearer {ingest_key}"},
    )
    assert r.status_code == 200
    assert r["Content-Type"].startswith("text/event-stream")
    events = [
        line.removeprefix("event: ")
        for line in r.content.decode().splitlines()
        if line.startswith("event: ")
    ]
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


@pytest.fixture
def three_audits():
    from datetime import timedelta

    from django.utils import timezone

    from tests.factories import annotation, result

    now = timezone.now()
    surfaced = make_audit(
        user_input="surfaced today",
        results=[result("tone", 0.8, [annotation("condescending")])],
        created_at=now,
    )
    quiet = make_audit(user_input="quiet today", results=[result("tone", 0.0)], created_at=now)
    old = make_audit(
        user_input="surfaced long ago",
        results=[result("tone", 0.9, [annotation("dismissive")])],
        created_at=now - timedelta(days=10),
    )
    return surfaced, quiet, old


def _staff_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _export_href(client: Client, query: str, fmt: str) -> str:
    """The Export menu's link on the list page for this filter query."""
    import re
    from html import unescape

    page = client.get("/?" + query).content.decode()
    match = re.search(rf'id="export-{fmt}" href="([^"]+)"', page)
    assert match, "the list page has no Export menu"
    return unescape(match.group(1))


def _streamed(response) -> str:
    return b"".join(response.streaming_content).decode()


def test_the_export_menu_downloads_the_current_filter_as_csv(staff_user, three_audits):
    surfaced, quiet, old = three_audits
    client = _staff_client(staff_user)
    today = surfaced.created_at.date().isoformat()
    href = _export_href(client, f"surfaced=1&since={today}&until={today}", "csv")
    assert href.startswith("/api/audits/export?format=csv")
    response = client.get(href)  # the session, no API key
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="audits.csv"'
    rows = list(csv.DictReader(io.StringIO(_streamed(response))))
    assert [r["id"] for r in rows] == [str(surfaced.pk)]


def test_the_export_menu_downloads_jsonl_of_the_same_filter(staff_user, three_audits):
    surfaced, quiet, old = three_audits
    client = _staff_client(staff_user)
    href = _export_href(client, "surfaced=1", "jsonl")
    lines = [json.loads(line) for line in _streamed(client.get(href)).splitlines()]
    assert {line["id"] for line in lines} == {str(surfaced.pk), str(old.pk)}


def test_the_export_refuses_sessions_of_non_staff_users(plain_user, three_audits):
    response = _staff_client(plain_user).get("/api/audits/export?format=csv")
    assert response.status_code == 401


def test_the_export_needs_the_view_permission_for_staff_sessions(django_user_model, three_audits):
    staff = django_user_model.objects.create_user(
        "nosee", "n@example.com", "pw-12345678", is_staff=True
    )
    response = _staff_client(staff).get("/api/audits/export?format=csv")
    assert response.status_code == 403
    assert "audits.view_auditrun" in response.json()["detail"]


def test_the_export_still_takes_keys_and_refuses_anonymous_requests(read_key, three_audits):
    assert Client().get("/api/audits/export").status_code == 401
    response = ApiClient(read_key).get("/api/audits/export", {"format": "csv"})
    assert response.status_code == 200
    assert len(list(csv.DictReader(io.StringIO(_streamed(response))))) == 3


def test_the_nav_links_the_api_docs(staff_user):
    page = _staff_client(staff_user).get("/").content.decode()
    assert 'href="/api/docs"' in page.split("</nav>")[0]


def test_favicon_ico_is_served():
    response = Client().get("/favicon.ico", follow=True)
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert body.startswith(b"<svg")
    assert response.redirect_chain[0][0].startswith("/static/favicon")
