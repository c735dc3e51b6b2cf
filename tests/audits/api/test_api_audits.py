"""POST/GET /api/audits, the export, auth scopes and error paths."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from analyzers.models import ApiKey
from audits.models import AuditRun
from tests.factories import annotation, make_audit, result

pytestmark = pytest.mark.django_db

BODY = {"user_input": "Which retailers use Acme?", "response": "Acme is easy to set up."}


def test_it_returns_202_and_stores_a_pending_run(api_client, ingest_key):
    r = api_client.post("/api/audits", BODY, key=ingest_key)
    assert r.status_code == 202, r.content
    data = r.json()
    run = AuditRun.objects.get(pk=data["id"])
    assert data["status"] == "pending"
    assert run.user_input == BODY["user_input"]
    assert run.api_key.scope == "ingest"


def test_it_runs_the_audit_after_commit(api_client, ingest_key, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        r = api_client.post("/api/audits", BODY, key=ingest_key)
    run = AuditRun.objects.get(pk=r.json()["id"])
    assert run.status == "complete"
    assert run.results.exists()


def test_wait_returns_201_with_the_full_audit(api_client, ingest_key):
    r = api_client.post("/api/audits?wait=true", BODY, key=ingest_key)
    assert r.status_code == 201, r.content
    data = r.json()
    assert data["status"] == "complete"
    assert data["finished_at"] is not None
    assert {res["analyzer_id"] for res in data["results"]} >= {"redflag"}
    assert data["surfaced_results"] == [x for x in data["results"] if x["surfaced"]]
    for key in (
        "id",
        "external_id",
        "created_at",
        "cleaned_response",
        "sources",
        "metadata",
        "threshold",
        "overall_score",
        "links",
        "trace",
    ):
        assert key in data


def test_same_external_id_returns_the_stored_audit(api_client, ingest_key):
    body = {**BODY, "external_id": "conv-1"}
    first = api_client.post("/api/audits", body, key=ingest_key)
    second = api_client.post("/api/audits", body, key=ingest_key)
    assert first.status_code == 202
    assert second.status_code == 200
    assert second.json()["id"] == first.json()["id"]
    assert AuditRun.objects.count() == 1


def test_same_external_id_with_another_body_is_409(api_client, ingest_key):
    api_client.post("/api/audits", {**BODY, "external_id": "conv-2"}, key=ingest_key)
    r = api_client.post(
        "/api/audits", {**BODY, "response": "other", "external_id": "conv-2"}, key=ingest_key
    )
    assert r.status_code == 409
    assert "conv-2" in r.json()["detail"]
    assert AuditRun.objects.count() == 1


def test_external_ids_are_scoped_per_key(api_client, make_key):
    a, b = make_key("ingest", "a"), make_key("ingest", "b")
    body = {**BODY, "external_id": "same"}
    assert api_client.post("/api/audits", body, key=a).status_code == 202
    assert api_client.post("/api/audits", body, key=b).status_code == 202
    assert AuditRun.objects.count() == 2


@pytest.mark.parametrize(
    "body,field",
    [
        ({"response": "x"}, "user_input"),
        ({"user_input": "x", "response": 5}, "response"),
        ({**BODY, "sources": "nope"}, "sources"),
        ({**BODY, "external_id": ""}, "external_id"),
        ({**BODY, "surprise": 1}, "surprise"),
        ({**BODY, "options": {"redflag": {"max_chars": "lots"}}}, "options"),
        ({**BODY, "options": {"nonexistent": {}}}, "options"),
        ({**BODY, "response": "a\x00b"}, "response"),
    ],
)
def test_validation_errors_are_422_naming_the_field(api_client, ingest_key, body, field):
    r = api_client.post("/api/audits", body, key=ingest_key)
    assert r.status_code == 422, r.content
    assert field in json.dumps(r.json())
    assert AuditRun.objects.count() == 0


def test_malformed_json_is_a_4xx(api_client, ingest_key):
    r = api_client.post("/api/audits", raw=b"{not json", key=ingest_key)
    assert 400 <= r.status_code < 500


def test_options_override_analyzer_settings_for_one_audit(api_client, ingest_key):
    body = {**BODY, "options": {"redflag": {"max_chars": 5}}}
    r = api_client.post("/api/audits?wait=true", body, key=ingest_key)
    assert r.status_code == 201, r.content
    assert r.json()["options"] == {"redflag": {"max_chars": 5}}


def test_body_over_the_limit_is_413_and_nothing_is_stored(api_client, ingest_key, settings):
    settings.AUDITOR_MAX_BODY_BYTES = 1000
    r = api_client.post("/api/audits", {**BODY, "response": "x" * 2000}, key=ingest_key)
    assert r.status_code == 413
    assert "1000 bytes" in r.json()["detail"]
    assert AuditRun.objects.count() == 0


def test_rate_limit_gives_429_with_retry_after(api_client, make_key):
    key = make_key("ingest", rate_limit_per_minute=3)
    codes = [api_client.post("/api/audits", BODY, key=key).status_code for _ in range(4)]
    assert codes[:3] == [202, 202, 202]
    assert codes[3] == 429
    r = api_client.post("/api/audits", BODY, key=key)
    assert 1 <= int(r["Retry-After"]) <= 60
    assert AuditRun.objects.count() == 3


def test_it_returns_401_without_a_valid_key(api_client):
    assert api_client.post("/api/audits", BODY, key="").status_code == 401
    assert api_client.get("/api/audits", key="ra_nope_nope").status_code == 401
    assert api_client.get("/api/audits", key="garbage").status_code == 401


def test_a_revoked_key_is_rejected(api_client, read_key):
    from django.utils import timezone

    ApiKey.objects.update(revoked_at=timezone.now())
    assert api_client.get("/api/audits", key=read_key).status_code == 401


def test_an_ingest_key_cannot_read_or_export(api_client, ingest_key):
    run = make_audit()
    for path in ("/api/audits", f"/api/audits/{run.id}", "/api/audits/export"):
        r = api_client.get(path, key=ingest_key)
        assert r.status_code == 403, path
    assert api_client.get("/api/config", key=ingest_key).status_code == 403


def test_a_read_key_cannot_change_config(api_client, read_key):
    assert api_client.get("/api/config", key=read_key).status_code == 403
    assert api_client.put("/api/config", {}, key=read_key).status_code == 403


def test_get_one_audit(api_client):
    run = make_audit(results=[result("redflag", 0.9, [annotation("EMPTY_OUTPUT", "critical")])])
    r = api_client.get(f"/api/audits/{run.id}")
    assert r.status_code == 200
    data = r.json()
    assert data["id"] == str(run.id)
    assert data["results"][0]["annotations"][0]["type"] == "EMPTY_OUTPUT"
    assert data["trace"] == ["[AUDIT] start", "[AUDIT] done"]
    assert api_client.get("/api/audits/00000000-0000-0000-0000-000000000000").status_code == 404
    assert api_client.get("/api/audits/not-a-uuid").status_code == 404


def test_the_serializers_agree(api_client):
    from audits.store.queries import RUN_FIELDS, serialize_runs
    from audits.store.serializers import audit_queryset, audit_to_dict

    run = make_audit(
        results=[
            result("redflag", 0.9, [annotation("EMPTY_OUTPUT"), annotation("TOO_MANY_CHARS")]),
            result("tone", 0.0, status="failed", error="boom"),
        ],
        links=[
            {
                "url": "https://x.example",
                "label": "x",
                "decision": "strip",
                "reason": "host",
                "http_status": None,
                "healthy": None,
            }
        ],
    )
    fast = serialize_runs(list(AuditRun.objects.filter(pk=run.pk).values(*RUN_FIELDS)))[0]
    assert fast == audit_to_dict(audit_queryset().get(pk=run.pk))


def _ids(resp) -> list[str]:
    return [item["id"] for item in resp.json()["items"]]


def test_list_is_newest_first_with_cursor_pages(api_client):
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    runs = [make_audit(created_at=now - timedelta(minutes=i)) for i in range(7)]
    expected = [str(r.id) for r in runs]
    seen, cursor = [], None
    while True:
        r = api_client.get("/api/audits", {"limit": 3, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200
        seen += _ids(r)
        cursor = r.json()["next"]
        if cursor is None:
            break
        # A row inserted while paging (newer than everything) never shifts the pages.
        make_audit(created_at=now + timedelta(minutes=1))
    assert seen == expected


def test_invalid_cursor_is_422(api_client):
    assert api_client.get("/api/audits", {"cursor": "!!!"}).status_code == 422


def test_list_filters(api_client):
    from datetime import timedelta

    from django.utils import timezone

    high = make_audit(
        results=[result("grounding", 0.9, [annotation("UNGROUNDED_CUSTOMER_CLAIM", "critical")])],
        user_input="Tell me about Decathlon",
    )
    low = make_audit(results=[result("tone", 0.1, [annotation("dismissive", "info")])])
    old = make_audit(results=[result("bias", 0.5)], created_at=timezone.now() - timedelta(days=30))

    def ids(**params):
        r = api_client.get("/api/audits", params)
        assert r.status_code == 200, r.content
        return set(_ids(r))

    assert ids(min_score=0.8) == {str(high.id)}
    assert ids(max_score=0.2) == {str(low.id)}
    assert ids(surfaced="true") == {str(high.id), str(old.id)}
    assert ids(surfaced="false") == {str(low.id)}
    assert ids(analyzer="grounding") == {str(high.id)}
    assert ids(type="dismissive") == {str(low.id)}
    assert ids(severity="critical") == {str(high.id)}
    assert ids(since=(timezone.now() - timedelta(days=1)).isoformat()) == {
        str(high.id),
        str(low.id),
    }
    assert ids(until=(timezone.now() - timedelta(days=1)).isoformat()) == {str(old.id)}
    # an offset ISO 8601 allows and PostgreSQL cannot hold: the same instant in UTC
    day_ago = timezone.now() - timedelta(days=1)
    far_east = day_ago.astimezone(timezone.get_fixed_timezone(20 * 60 + 22))
    assert ids(since=far_east.isoformat()) == {str(high.id), str(low.id)}
    late = {"until": "9999-12-31T23:59:59-20:00"}  # past the last date once in UTC
    assert api_client.get("/api/audits", late).status_code == 422
    assert ids(q="decathlon") == {str(high.id)}
    assert api_client.get("/api/audits", {"severity": "huge"}).status_code == 422
    assert api_client.get("/api/audits", {"min_score": "x"}).status_code == 422


def test_export_jsonl_streams_every_filtered_audit(api_client, monkeypatch):
    from audits.api import router as audits_api

    monkeypatch.setattr(audits_api, "EXPORT_BATCH", 3)
    runs = [make_audit(results=[result("redflag", 0.5)]) for _ in range(7)]
    make_audit(results=[result("redflag", 0.0)])
    r = api_client.get("/api/audits/export", {"format": "jsonl", "min_score": 0.4})
    assert r.status_code == 200
    assert r.streaming
    lines = b"".join(r.streaming_content).decode().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(str(x.id) for x in runs)


def test_export_csv_has_a_header_and_neutralises_formulas(api_client):
    make_audit(user_input='=HYPERLINK("http://evil")')
    r = api_client.get("/api/audits/export", {"format": "csv"})
    assert r.status_code == 200
    rows = list(csv.reader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert rows[0][0] == "id"
    assert rows[1][rows[0].index("user_input")].startswith("'=")
    assert api_client.get("/api/audits/export", {"format": "xml"}).status_code == 422


@pytest.mark.django_db(transaction=True)
def test_database_outage_is_503(api_client, ingest_key):
    """A real outage: the database file cannot be opened."""
    from django.db import connections

    conn = connections["default"]
    name = conn.settings_dict["NAME"]
    conn.close()
    conn.settings_dict["NAME"] = "/nonexistent-dir/auditor.sqlite3"
    try:
        r = api_client.post("/api/audits", BODY, key=ingest_key)
        listing = api_client.get("/api/audits")
    finally:
        conn.close()
        conn.settings_dict["NAME"] = name
    assert r.status_code == 503
    assert "unavailable" in r.json()["detail"]
    assert listing.status_code == 503
    assert AuditRun.objects.count() == 0


def test_batch_submission_stores_each_audit_and_reports_per_item(api_client, ingest_key):
    api_client.post("/api/audits", {**BODY, "external_id": "known"}, key=ingest_key)
    r = api_client.post(
        "/api/audits/batch",
        {
            "audits": [
                BODY,
                {**BODY, "external_id": "known"},
                {**BODY, "response": "other", "external_id": "known"},
                {**BODY, "options": {"nonexistent": {}}},
            ]
        },
        key=ingest_key,
    )
    assert r.status_code == 202, r.content
    items = r.json()["items"]
    assert items[0]["created"] is True and items[0]["status"] == "pending"
    assert items[1]["created"] is False and items[1]["error"] is None
    assert items[2]["id"] is None and "already used" in items[2]["error"]
    assert items[3]["id"] is None and "nonexistent" in items[3]["error"]
    assert AuditRun.objects.count() == 2


def test_batch_limits(api_client, ingest_key, read_key):
    assert api_client.post("/api/audits/batch", {"audits": []}, key=ingest_key).status_code == 422
    too_many = {"audits": [BODY] * 501}
    assert api_client.post("/api/audits/batch", too_many, key=ingest_key).status_code == 422
    assert api_client.post("/api/audits/batch", {"audits": [BODY]}, key="").status_code == 401


def test_the_fast_export_lines_equal_the_serializer():
    from audits.api.export import export_page
    from audits.store.serializers import audit_queryset, audit_to_dict

    runs = [
        make_audit(
            results=[
                result(
                    "redflag",
                    0.9,
                    [annotation("EMPTY_OUTPUT", evidence='é"x\n<', start=0, end=3)],
                    supplementary={"stats": {"chars": 3}, "ünï": ["ç"]},
                ),
                result("tone", 0.0, status="timeout", error="timed out"),
            ],
            links=[
                {
                    "url": "https://x.example",
                    "label": "x",
                    "decision": "strip",
                    "reason": "host",
                    "http_status": 404,
                    "healthy": False,
                }
            ],
            metadata={"nested": {"a": [1, 2.5, None, True]}},
            external_id="ext",
            sources=[{"title": "t", "url": None, "text": "s", "company": "Acme"}],
        ),
        make_audit(status="pending"),
        make_audit(status="failed", error="boom"),
    ]
    text, cursor = export_page(AuditRun.objects.all(), None, 10)
    assert cursor is None
    exported = {d["id"]: d for d in map(json.loads, text.splitlines())}
    for run in runs:
        assert exported[str(run.id)] == audit_to_dict(audit_queryset().get(pk=run.pk))
    first, cursor = export_page(AuditRun.objects.all(), None, 2)
    rest, end = export_page(AuditRun.objects.all(), cursor, 2)
    assert end is None
    assert len((first + rest).splitlines()) == 3


def run_inserts(ctx) -> list[str]:
    """The statements inserting into the runs' table, as "INSERT" (on PostgreSQL a COPY)
    or, for an executemany (captured as "N times: INSERT …"), "N times"."""
    return [
        q["sql"].split(": ", 1)[0] if re.match(r"\d+ times: ", q["sql"]) else "INSERT"
        for q in ctx.captured_queries
        if 'INSERT INTO "audits_auditrun"' in q["sql"][:60]
        or q["sql"].startswith('COPY "audits_auditrun"')
    ]


def test_a_batch_stores_its_plain_audits_in_one_insert_and_analyses_each(
    api_client, ingest_key, django_capture_on_commit_callbacks
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    bodies = [{**BODY, "user_input": f"question {i}"} for i in range(5)]
    with CaptureQueriesContext(connection) as ctx, django_capture_on_commit_callbacks(execute=True):
        r = api_client.post("/api/audits/batch", {"audits": bodies}, key=ingest_key)
    assert r.status_code == 202, r.content
    # One INSERT statement for all (a multi-row one, not a step per row).
    assert run_inserts(ctx) == ["INSERT"]
    ids = [item["id"] for item in r.json()["items"]]
    runs = {str(run.pk): run for run in AuditRun.objects.filter(pk__in=ids)}
    assert [runs[i].user_input for i in ids] == [b["user_input"] for b in bodies]
    assert {run.status for run in runs.values()} == {"complete"}


def test_a_batch_stores_its_external_id_audits_together_with_the_same_idempotency(
    api_client, ingest_key, django_capture_on_commit_callbacks
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    api_client.post("/api/audits", {**BODY, "external_id": "known"}, key=ingest_key)
    bodies = [{**BODY, "user_input": f"question {i}", "external_id": f"new-{i}"} for i in range(5)]
    bodies += [
        {**BODY, "external_id": "known"},  # stored before: the same audit
        {**BODY, "user_input": "question 0", "external_id": "new-0"},  # a repeat
        {**BODY, "user_input": "changed", "external_id": "new-1"},
    ]  # another body
    with CaptureQueriesContext(connection) as ctx, django_capture_on_commit_callbacks(execute=True):
        r = api_client.post("/api/audits/batch", {"audits": bodies}, key=ingest_key)
    assert r.status_code == 202, r.content
    items = r.json()["items"]
    assert run_inserts(ctx) == ["INSERT"]  # the five new ones (counted below)
    assert AuditRun.objects.filter(external_id__startswith="new-").count() == 5
    assert [item["created"] for item in items] == [True] * 5 + [False, False, False]
    known = AuditRun.objects.get(external_id="known")
    assert items[5]["id"] == str(known.pk)
    assert items[6]["id"] == items[0]["id"]
    assert items[7]["id"] is None and "already used" in items[7]["error"]
    assert AuditRun.objects.count() == 6
    again = api_client.post("/api/audits/batch", {"audits": bodies[:5]}, key=ingest_key)
    assert [item["id"] for item in again.json()["items"]] == [i["id"] for i in items[:5]]
    assert not any(item["created"] for item in again.json()["items"])
