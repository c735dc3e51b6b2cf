"""The headline score (`top_score`): computed when results are stored, backfilled for old
audits, filtered (`top_score_min`) and sorted (`sort=`) with keyset pages in the API and
the export."""

from __future__ import annotations

import importlib
import json
from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone

from analyzers.engine.contract import AnalyzerRun, AuditReport
from audits.execution.execute import store_report
from audits.models import AuditRun
from audits.store import ordering
from audits.store.scoring import top_result
from tests.factories import make_audit, result

pytestmark = pytest.mark.django_db


def _run(analyzer_id: str, score: float, status: str = "ok", **extra) -> AnalyzerRun:
    return AnalyzerRun(analyzer_id=analyzer_id, category="c", score=score, status=status, **extra)


def test_top_result_is_the_highest_successful_score_and_its_analyzer():
    runs = [
        _run("bias", 0.2),
        _run("grounding", 1.0, status="failed"),
        _run("tone", 0.7),
        _run("links", 0.7),
    ]
    assert top_result(runs) == (0.7, "tone")  # the failed 1.0 does not count; ties: first
    assert top_result([_run("bias", 0.9, status="timeout")]) == (None, "")


def test_store_report_stores_the_highest_score_not_the_mean():
    run = AuditRun.objects.create(user_input="q", response="r", status="running")
    report = AuditReport(
        threshold=0.3,
        overall_score=(1.0 + 0.02 + 0.0) / 3,
        results=[_run("redflag", 0.0), _run("grounding", 1.0, surfaced=True), _run("bias", 0.02)],
        cleaned_response="r",
    )
    store_report(run, report, fresh=True)
    run.refresh_from_db()
    assert run.top_score == 1.0
    assert run.top_analyzer == "grounding"
    assert run.overall_score == pytest.approx(0.34)


def test_the_migration_backfills_stored_audits_from_their_results():
    migration = importlib.import_module("audits.migrations.0007_top_score_and_view_preference")
    done = make_audit(
        results=[
            result("bias", 0.2),
            result("grounding", 0.9),
            result("tone", 1.0, status="failed"),
        ]
    )
    none_ok = make_audit(results=[result("tone", 0.0, status="failed")])
    pending = make_audit(status="pending")
    AuditRun.objects.update(top_score=None, top_analyzer="")
    migration.BATCH = 1  # several batches
    migration.backfill_top_scores(apps, None)
    rows = {r.pk: (r.top_score, r.top_analyzer) for r in AuditRun.objects.all()}
    assert rows[done.pk] == (0.9, "grounding")
    assert rows[none_ok.pk] == (None, "")
    assert rows[pending.pk] == (None, "")


def test_the_audit_json_has_top_score_and_keeps_overall_score(api_client):
    run = make_audit(results=[result("grounding", 1.0), result("bias", 0.0)])
    data = api_client.get(f"/api/audits/{run.pk}").json()
    assert data["top_score"] == 1.0
    assert data["top_analyzer"] == "grounding"
    assert data["overall_score"] == 0.5


def test_top_score_min_filters_on_the_highest_score(api_client):
    high = make_audit(results=[result("grounding", 0.9), result("bias", 0.0), result("tone", 0.0)])
    make_audit(results=[result("bias", 0.4)])
    r = api_client.get("/api/audits", {"top_score_min": 0.8})
    assert [i["id"] for i in r.json()["items"]] == [str(high.pk)]
    # The mean of `high` (0.3) is below 0.8: min_score would have missed it.
    assert api_client.get("/api/audits", {"min_score": 0.8}).json()["items"] == []
    assert api_client.get("/api/audits", {"top_score_min": 2}).status_code == 422


def _population() -> list[AuditRun]:
    """Ties on score and on created_at, and audits without a score (pending)."""
    now = timezone.now()
    runs = []
    for i in range(17):
        score = [0.1, 0.5, 0.5, 0.9][i % 4]
        created = now - timedelta(minutes=i // 3)  # three audits per instant
        runs.append(make_audit(results=[result("bias", score)], created_at=created))
    runs += [make_audit(status="pending", created_at=now - timedelta(minutes=i)) for i in range(4)]
    return runs


def _expected(runs: list[AuditRun], sort: str) -> list[str]:
    def time_key(r):
        return (r.created_at, r.pk)

    if sort == "-created_at":
        ordered = sorted(runs, key=time_key, reverse=True)
    elif sort == "created_at":
        ordered = sorted(runs, key=time_key)
    elif sort == "-top_score":
        scored = sorted(
            (r for r in runs if r.top_score is not None),
            key=lambda r: (r.top_score, r.created_at, r.pk),
            reverse=True,
        )
        unscored = sorted((r for r in runs if r.top_score is None), key=time_key, reverse=True)
        ordered = scored + unscored
    else:
        scored = sorted(
            (r for r in runs if r.top_score is not None),
            key=lambda r: (r.top_score, r.created_at, r.pk),
        )
        unscored = sorted((r for r in runs if r.top_score is None), key=time_key)
        ordered = scored + unscored
    return [str(r.pk) for r in ordered]


@pytest.mark.parametrize("sort", ordering.SORTS)
def test_keyset_pages_of_every_sort_have_each_audit_once_in_order(api_client, sort):
    runs = _population()
    seen, cursor, pages = [], None, 0
    while True:
        params = {"sort": sort, "limit": 4, **({"cursor": cursor} if cursor else {})}
        r = api_client.get("/api/audits", params)
        assert r.status_code == 200, r.content
        body = r.json()
        seen += [i["id"] for i in body["items"]]
        pages += 1
        cursor = body["next"]
        if cursor is None:
            break
    assert seen == _expected(runs, sort)
    assert pages == 6  # 21 audits, 4 a page


def test_a_page_is_not_shifted_by_audits_stored_meanwhile(api_client):
    runs = _population()
    first = api_client.get("/api/audits", {"sort": "-top_score", "limit": 5}).json()
    make_audit(results=[result("bias", 1.0)])  # sorts first: before the cursor
    second = api_client.get(
        "/api/audits", {"sort": "-top_score", "limit": 5, "cursor": first["next"]}
    ).json()
    assert [i["id"] for i in second["items"]] == _expected(runs, "-top_score")[5:10]


def test_bad_sort_values_and_foreign_cursors_are_422_not_500(api_client):
    make_audit()
    make_audit()
    for bad in ("score", "-overall_score", "top_score;drop", "-", ""):
        r = api_client.get("/api/audits", {"sort": bad})
        assert r.status_code == 422, (bad, r.content)
        assert "sort" in r.json()["detail"][0]["loc"]
    time_cursor = api_client.get("/api/audits", {"limit": 1}).json()["next"]
    r = api_client.get("/api/audits", {"sort": "-top_score", "cursor": time_cursor})
    assert r.status_code == 422
    assert "cursor" in json.dumps(r.json())
    score_cursor = api_client.get("/api/audits", {"limit": 1, "sort": "top_score"}).json()["next"]
    assert api_client.get("/api/audits", {"cursor": score_cursor}).status_code == 422
    assert api_client.get("/api/audits/export", {"sort": "nope"}).status_code == 422


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_export_follows_the_sort_across_batches(api_client, monkeypatch, fmt):
    from audits.api import router as audits_api

    monkeypatch.setattr(audits_api, "EXPORT_BATCH", 3)
    runs = _population()
    r = api_client.get("/api/audits/export", {"format": fmt, "sort": "-top_score"})
    assert r.status_code == 200
    text = b"".join(r.streaming_content).decode()
    if fmt == "jsonl":
        rows = [json.loads(line) for line in text.splitlines()]
        ids = [row["id"] for row in rows]
        assert rows[0]["top_score"] == 0.9 and rows[0]["top_analyzer"] == "bias"
    else:
        lines = text.splitlines()
        header = lines[0].split(",")
        assert header[-2:] == ["top_score", "top_analyzer"]
        ids = [line.split(",")[0] for line in lines[1:]]
    assert ids == _expected(runs, "-top_score")


def test_the_export_takes_top_score_min(api_client):
    high = make_audit(results=[result("grounding", 0.95), result("bias", 0.0)])
    make_audit(results=[result("bias", 0.2)])
    r = api_client.get("/api/audits/export", {"format": "jsonl", "top_score_min": 0.9})
    lines = b"".join(r.streaming_content).decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [str(high.pk)]
