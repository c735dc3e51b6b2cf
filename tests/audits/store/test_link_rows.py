"""An audit's link table in one `AuditLinks` row (audits.store.link_rows): storing, the API, the
export, the detail page, the admin and the migration from one `LinkCheck` row per link."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from analyzers.engine.contract import AnalyzerRun, AuditReport, LinkRecord
from audits.api.export import _supplementary
from audits.cards import cards
from audits.execution import execute
from audits.execution.execute import store_report
from audits.intake.submit import submit_audit
from audits.models import AnalyzerRunRecord, AuditLinks, AuditRun
from audits.store.link_rows import (
    IN_LINK_ROW,
    StoredLink,
    link_dicts,
    packed,
    stored_links,
    with_links_json,
)
from tests.migrating import migrate_to

pytestmark = pytest.mark.django_db

HOSTILE = "</td><script>window.__x=1</script>\"'\\ \u2028 ünï"


def _links(n: int) -> list[LinkRecord]:
    links = []
    for i in range(n):
        if i % 3 == 0:
            links.append(
                LinkRecord(
                    url=f"https://acme.example/{i}",
                    label=f"docs {i}",
                    decision="keep",
                    http_status=200,
                    healthy=True,
                )
            )
        elif i % 3 == 1:
            links.append(
                LinkRecord(
                    url=f"https://evil.example/{i}?d=x",
                    label=HOSTILE,
                    decision="strip",
                    reason="LINK_HOST_NOT_ALLOWED",
                )
            )
        else:
            links.append(
                LinkRecord(
                    url=f"https://acme.example/r{i}",
                    label="this article",
                    decision="replace",
                    reason="LINK_LABEL_UPGRADED",
                    http_status=404,
                    healthy=False,
                )
            )
    return links


def _stored(links: list[LinkRecord]) -> AuditRun:
    run = AuditRun.objects.create(user_input="q", response="r", status="running")
    report = AuditReport(
        threshold=0.3, overall_score=0.0, results=[], cleaned_response="r", links=links
    )
    store_report(run, report, fresh=True)
    return run


def _contract(links: list[LinkRecord]) -> list[dict]:
    return [link.model_dump() for link in links]


def test_a_stored_report_keeps_its_links_in_one_row_in_order():
    links = _links(40)
    run = _stored(links)
    (row,) = AuditLinks.objects.filter(audit=run)
    assert link_dicts(row.rows) == _contract(links)
    assert stored_links(row.rows)[1] == StoredLink(
        "https://evil.example/1?d=x", HOSTILE, "strip", "LINK_HOST_NOT_ALLOWED", None, None
    )


def test_no_links_store_no_row_and_read_as_none(api_client):
    run = _stored([])
    assert not AuditLinks.objects.filter(audit=run).exists()
    assert api_client.get(f"/api/audits/{run.pk}").json()["links"] == []
    rows = cards.detail_rows(run, [])
    assert (rows.links, rows.links_total) == ([], 0)


def test_a_retried_report_replaces_the_links_of_the_attempt_before():
    run = _stored(_links(5))
    report = AuditReport(
        threshold=0.3, overall_score=0.0, results=[], cleaned_response="r", links=_links(2)
    )
    store_report(run, report)  # not fresh: what the earlier attempt stored goes first
    assert link_dicts(AuditLinks.objects.get(audit=run).rows) == _contract(_links(2))


def test_the_api_the_export_and_the_detail_page_read_every_link(api_client, staff_user):
    links = _links(130)
    run = _stored(links)
    assert api_client.get(f"/api/audits/{run.pk}").json()["links"] == _contract(links)
    listed = api_client.get("/api/audits", {"limit": 10}).json()
    export = api_client.get("/api/audits/export", {"format": "jsonl"})
    (line,) = b"".join(export.streaming_content).decode().split("\n")[:-1]
    assert json.loads(line)["links"] == _contract(links)
    assert listed  # the list reads without error

    client = Client()
    client.force_login(staff_user)
    html = client.get(reverse("audits:detail", args=[run.pk])).content.decode()
    rows = cards.DETAIL_ROWS
    assert f"The first {rows} of 130 links" in html
    assert f"{links[rows - 1].url}<" in html  # the last one shown
    assert f"{links[rows].url}<" not in html
    assert "<script>window.__x" not in html  # the label is escaped
    assert "&lt;/td&gt;&lt;script&gt;window.__x=1&lt;/script&gt;" in html


LINKED = (
    "Read [the guide](https://docs.acme.example/guide) and [this](https://evil.example/x), "
    'or https://blog.other.example/tuning and <https://evil.example/y?q="1">.\n\n'
    "Then [setup](https://docs.acme.example/setup)."
)


def _audited(text: str = LINKED) -> AuditRun:
    """An audit of `text` analysed by the engine and stored, as the server does."""
    run = submit_audit(user_input="How do I tune search?", response=text, enqueue=False)
    assert execute.execute_run(run.pk) == "complete"
    return AuditRun.objects.get(pk=run.pk)


def _links_result(run: AuditRun) -> dict:
    with connection.cursor() as cursor:  # as stored, not as a reader rebuilds it
        cursor.execute(
            f"SELECT supplementary FROM {AnalyzerRunRecord._meta.db_table} "
            "WHERE audit_id = %s AND analyzer_id = 'links'",
            [AnalyzerRunRecord._meta.get_field("audit").get_db_prep_value(run.pk, connection)],
        )
        (value,) = cursor.fetchone()
    return json.loads(value) if isinstance(value, str) else value


def test_the_links_result_keeps_its_list_once_and_every_reader_gives_it_back(
    api_client, staff_user
):
    run = _audited()
    table = link_dicts(AuditLinks.objects.get(audit=run).rows)
    assert len(table) == 5 and {link["decision"] for link in table} == {"strip"}
    stored = _links_result(run)
    assert stored["links"] == IN_LINK_ROW  # not a second copy of the table
    assert stored["counts"] == {"strip": 5}

    def links_result(audit: dict) -> dict:
        (result,) = [r for r in audit["results"] if r["analyzer_id"] == "links"]
        return result["supplementary"]

    single = api_client.get(f"/api/audits/{run.pk}").json()
    (listed,) = api_client.get("/api/audits", {"limit": 10}).json()["items"]
    export = api_client.get("/api/audits/export", {"format": "jsonl"})
    (line,) = b"".join(export.streaming_content).decode().split("\n")[:-1]
    for audit in (single, listed, json.loads(line)):
        assert links_result(audit) == {"links": table, "counts": stored["counts"]}
        assert audit["links"] == table

    client = Client()
    client.force_login(staff_user)
    html = client.get(reverse("audits:detail", args=[run.pk])).content.decode()
    assert "the audit&#x27;s link table (5 links)" in html
    assert IN_LINK_ROW not in html


def test_a_links_list_that_is_not_the_table_is_stored_whole(api_client):
    links = _links(3)
    own = [link.model_dump() for link in links[:2]]  # capped at another limit, say
    result = AnalyzerRun(
        analyzer_id="links", category="links", supplementary={"links": own, "counts": {"keep": 1}}
    )
    run = AuditRun.objects.create(user_input="q", response="r", status="running")
    store_report(
        run,
        AuditReport(
            threshold=0.3, overall_score=0.0, results=[result], cleaned_response="r", links=links
        ),
        fresh=True,
    )
    assert _links_result(run)["links"] == own
    (got,) = api_client.get(f"/api/audits/{run.pk}").json()["results"]
    assert got["supplementary"]["links"] == own


def test_the_export_puts_the_row_back_in_stored_text_and_in_decoded_json():
    row = packed(_links(2))
    text = json.dumps({"links": IN_LINK_ROW, "counts": {"strip": 2}})
    assert json.loads(_supplementary("links", text, row)) == {
        "links": json.loads(row),
        "counts": {"strip": 2},
    }
    decoded = {"counts": {"strip": 2}, "links": IN_LINK_ROW}  # jsonb's key order
    assert json.loads(_supplementary("links", decoded, row))["links"] == json.loads(row)
    assert json.loads(_supplementary("links", text, None))["links"] == []
    # another analyzer's value, and a label that spells the marker, are left alone
    assert _supplementary("tone", text, row) == text
    spelled = json.dumps({"links": [{"label": '"links": "@link_row"'}]})
    assert with_links_json(spelled, row) == spelled


def test_the_admin_shows_the_link_table_escaped(admin_client):
    run = _stored(_links(3))
    html = admin_client.get(reverse("admin:audits_auditrun_change", args=[run.pk]))
    text = html.content.decode()
    assert html.status_code == 200
    assert "<td>https://evil.example/1?d=x</td>" in text
    assert "&lt;script&gt;window.__x=1&lt;/script&gt;" in text
    assert "<script>window.__x" not in text


def test_packed_rows_are_the_contract_objects():
    text = packed(_links(3))
    assert json.loads(text) == _contract(_links(3))
    assert "\n" not in text and "\u2028" not in text  # one line of ASCII JSON


@pytest.mark.django_db(transaction=True)
def test_the_migration_packs_link_rows_in_order_and_back():
    before = ("audits", "0011_trace_lines_without_breaks")
    after = ("audits", "0012_links_in_one_row")
    old = migrate_to(before)
    Run, LinkCheck = old.get_model("audits", "AuditRun"), old.get_model("audits", "LinkCheck")
    one, two, bare = (Run.objects.create(status="complete") for _ in range(3))
    for position in (2, 0, 1):  # written out of order: read back by position
        LinkCheck.objects.create(
            audit_id=one.pk,
            position=position,
            url=f"https://a/{position}",
            label=HOSTILE,
            decision="keep",
            http_status=200,
            healthy=True,
        )
    LinkCheck.objects.create(
        audit_id=two.pk, url="javascript:x", decision="strip", reason="LINK_UNSAFE_SCHEME"
    )
    new = migrate_to(after).get_model("audits", "AuditLinks")
    tables = {t.audit_id: json.loads(t.rows) for t in new.objects.all()}
    assert set(tables) == {one.pk, two.pk}  # no row for the audit without links
    assert [link["url"] for link in tables[one.pk]] == ["https://a/0", "https://a/1", "https://a/2"]
    assert tables[one.pk][0] == {
        "url": "https://a/0",
        "label": HOSTILE,
        "decision": "keep",
        "reason": None,
        "http_status": 200,
        "healthy": True,
    }
    assert tables[two.pk] == [
        {
            "url": "javascript:x",
            "label": "",
            "decision": "strip",
            "reason": "LINK_UNSAFE_SCHEME",
            "http_status": None,
            "healthy": None,
        }
    ]

    back = migrate_to(before).get_model("audits", "LinkCheck")  # and back: a row per link
    assert list(
        back.objects.filter(audit_id=one.pk).order_by("position").values_list("position", "url")
    ) == [(0, "https://a/0"), (1, "https://a/1"), (2, "https://a/2")]
    migrate_to()
