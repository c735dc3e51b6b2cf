"""Edge inputs: a locked database, NaN in metadata, an over-limit stream,
invalid UTF-8 in `manage.py audit`, CSV formula prefixes after separators."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import time
from contextlib import contextmanager
from io import StringIO

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from audits.models import AnalyzerRunRecord, AuditRun
from tests.factories import make_audit
from tests.live_support import live_server

BODY = {"user_input": "Which retailers use Acme?", "response": "Acme is easy to set up."}


# --- (a) a locked database: reads go on, writes get a quick 503 --------------------------


@contextmanager
def write_locked_database():
    """Another process's write transaction holding SQLite's lock on the test database."""
    db = settings.DATABASES["default"]
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's database lock")
    other = sqlite3.connect(db["NAME"], timeout=1, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


@pytest.mark.django_db(transaction=True)
def test_a_locked_database_leaves_reads_working_and_writes_get_503_quickly(make_key, tmp_path):
    read_key, ingest_key = make_key("read"), make_key("ingest")
    make_audit()
    with live_server(tmp_path) as host, httpx.Client(base_url=f"http://{host}", timeout=30) as http:
        with write_locked_database():
            # A fresh key: its first request syncs the rate limit counter (a write).
            started = time.monotonic()
            listing = http.get("/api/audits", headers={"Authorization": f"Bearer {read_key}"})
            read_took = time.monotonic() - started
            started = time.monotonic()
            submitted = http.post(
                "/api/audits", json=BODY, headers={"Authorization": f"Bearer {ingest_key}"}
            )
            write_took = time.monotonic() - started
        assert listing.status_code == 200 and len(listing.json()["items"]) == 1
        assert read_took < 1.5  # it waited the whole 20 s busy timeout on the counter
        assert submitted.status_code == 503
        assert int(submitted.headers["Retry-After"]) > 0
        assert write_took < 5  # 20 s before
        # The lock is gone: writes work again, and the hits kept in memory were counted.
        again = http.post(
            "/api/audits", json=BODY, headers={"Authorization": f"Bearer {ingest_key}"}
        )
        assert again.status_code == 202


# --- (b) NaN / Infinity in JSON fields are 422 -------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "raw",
    [
        '{"user_input": "q", "response": "r", "metadata": {"score": NaN}}',
        '{"user_input": "q", "response": "r", "metadata": {"deep": [1, {"x": Infinity}]}}',
        '{"user_input": "q", "response": "r", "metadata": {"x": -Infinity}}',
        '{"user_input": "q", "response": "r", "options": {"redflag": {"max_chars": NaN}}}',
    ],
)
def test_nan_and_infinity_are_422_naming_the_field(api_client, ingest_key, raw):
    r = api_client.post("/api/audits", raw=raw.encode(), key=ingest_key)
    assert r.status_code == 422, r.content  # was 409 "conflict" from the database
    assert "NaN and Infinity" in json.dumps(r.json())
    assert AuditRun.objects.count() == 0


# --- (c) a chunked stream over the limit --------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_stream_over_the_limit_is_refused_and_stored_as_failed(make_key, settings):
    from tests.audits.api.test_stream_endpoint import HEAD, body_messages, call_http

    settings.AUDITOR_MAX_BODY_BYTES = 2000
    key = await sync_to_async(make_key)("ingest")
    lines = [HEAD, {"text": "First paragraph.\n\n"}, *({"text": "x" * 300} for _ in range(10))]
    status, events = await call_http(key, body_messages(lines))
    assert status == 200  # sent with the first event, before the body ended
    names = [name for name, _ in events]
    error = next(data for name, data in events if name == "error")
    assert error["status"] == 413
    audit = events[-1][1]
    assert names[-1] == "audit"
    assert audit["status"] == "failed" and audit["incomplete"] is True
    assert "2000 bytes" in audit["error"]
    run = await sync_to_async(AuditRun.objects.get)(pk=audit["id"])
    assert run.status == "failed"  # was: complete, analysed as if the cut text were whole
    assert not await sync_to_async(AnalyzerRunRecord.objects.filter(audit=run).exists)()


# --- (d) manage.py audit and invalid UTF-8 ------------------------------------------------


def test_an_invalid_utf8_line_is_reported_and_the_rest_audited(tmp_path):
    path = tmp_path / "cases.jsonl"
    good = json.dumps({"user_input": "q", "response": "Fine.", "external_id": "ok"}).encode()
    bad = b'{"user_input": "q", "response": "caf\xe9"}'
    path.write_bytes(b"\n".join([good, bad, good.replace(b'"ok"', b'"ok2"')]) + b"\n")
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError):
        call_command("audit", str(path), stdout=out, stderr=err)
    assert [json.loads(line)["external_id"] for line in out.getvalue().splitlines()] == [
        "ok",
        "ok2",
    ]
    assert "line 2: not valid UTF-8 (byte 0xe9 at column 37)" in err.getvalue()


# --- (e) CSV cells that become formulas after separators or blanks -----------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "text",
    [";=cmd|' /C calc'!A0", " ;=1+1", ",@SUM(A1)", "\u3000=1", "|+1", "\uff1dHYPERLINK()", "\n=1"],
)
def test_csv_cells_with_formula_prefixes_after_separators_are_neutralised(api_client, text):
    make_audit(user_input=text)
    r = api_client.get("/api/audits/export", {"format": "csv"})
    rows = list(csv.reader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert rows[1][rows[0].index("user_input")] == "'" + text


@pytest.mark.django_db
def test_csv_cells_without_formulas_are_left_alone(api_client):
    make_audit(user_input="a;=b is plain text")
    r = api_client.get("/api/audits/export", {"format": "csv"})
    rows = list(csv.reader(io.StringIO(b"".join(r.streaming_content).decode())))
    assert rows[1][rows[0].index("user_input")] == "a;=b is plain text"
