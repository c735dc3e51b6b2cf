"""POST /v1/traces across requests: retrieval documents joined to the LLM spans of their
trace when the two arrive in different export requests, in either order; bulk storage."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audits.models import AuditRun, TraceDocuments
from tests.otlp_support import genai_chat, proto_body, rag_trace, record, split

pytestmark = pytest.mark.django_db

PB = "application/x-protobuf"


def post(spans: list, key: str):
    return Client().post(
        "/v1/traces", proto_body(spans), content_type=PB, HTTP_AUTHORIZATION=f"Bearer {key}"
    )


def titles(run: AuditRun) -> list[str]:
    return [s["title"] for s in run.sources]


# --- retrieval first, LLM span in a later request -----------------------------------------


def test_a_retrieval_exported_before_its_llm_span_gives_the_sources(ingest_key):
    retrievals, llm, others = split(record(rag_trace))
    first = post(retrievals + others, ingest_key)
    assert first["X-Auditor-Audits-Created"] == "0"
    post(llm, ingest_key)
    run = AuditRun.objects.get()
    assert titles(run) == ["kb-1"]
    assert run.sources[0]["url"] == "https://www.acme.example/kb-1"
    assert run.metadata["source_spans"] == [retrievals[0].context.span_id.to_bytes(8).hex()]


def test_documents_of_another_trace_or_another_key_are_not_joined(ingest_key, make_key):
    retrievals, _, _ = split(record(rag_trace))
    _, llm, _ = split(record(rag_trace))  # another trace
    post(retrievals, ingest_key)
    post(llm, ingest_key)
    assert AuditRun.objects.get().sources == []
    other_key = make_key("ingest")
    retrievals, llm, _ = split(record(rag_trace))
    post(retrievals, other_key)
    post(llm, ingest_key)
    assert AuditRun.objects.filter(sources=[]).count() == 2


def test_documents_older_than_the_window_are_not_joined(ingest_key, settings):
    settings.AUDITOR_OTLP_TRACE_WINDOW_S = 60
    retrievals, llm, _ = split(record(rag_trace))
    post(retrievals, ingest_key)
    TraceDocuments.objects.update(created_at=timezone.now() - timedelta(seconds=61))
    post(llm, ingest_key)
    assert AuditRun.objects.get().sources == []


def test_the_memory_keeps_the_newest_rows_up_to_its_cap(ingest_key, settings):
    settings.AUDITOR_OTLP_TRACE_MEMORY_ROWS = 3
    traces = [split(record(lambda t, i=i: rag_trace(t, titles=(f"kb-{i}",)))) for i in range(5)]
    for retrievals, _, _ in traces:
        post(retrievals, ingest_key)
    kept = sorted(s["title"] for row in TraceDocuments.objects.all() for s in row.sources)
    assert kept == ["kb-2", "kb-3", "kb-4"]
    post(traces[4][1], ingest_key)  # the newest trace's LLM span still gets its documents
    assert titles(AuditRun.objects.get()) == ["kb-4"]


def test_the_same_retrieval_sent_twice_is_remembered_once(ingest_key):
    retrievals, llm, _ = split(record(rag_trace))
    post(retrievals, ingest_key)
    post(retrievals, ingest_key)
    assert TraceDocuments.objects.count() == 1
    post(llm, ingest_key)
    assert titles(AuditRun.objects.get()) == ["kb-1"]


def test_retrievals_from_both_requests_are_joined_in_start_order(ingest_key):
    retrievals, llm, _ = split(record(lambda t: rag_trace(t, titles=("kb-1", "kb-2"))))
    post(retrievals[:1], ingest_key)
    post(retrievals[1:] + llm, ingest_key)
    assert titles(AuditRun.objects.get()) == ["kb-1", "kb-2"]


# --- LLM span first, retrieval in a later request -----------------------------------------


def test_a_late_retrieval_is_added_to_a_pending_audit_in_place(ingest_key):
    retrievals, llm, _ = split(record(rag_trace))
    post(llm, ingest_key)  # the test runs no on-commit enqueue: the audit stays pending
    r = post(retrievals, ingest_key)
    assert r["X-Auditor-Late-Sources-Joined"] == "1"
    run = AuditRun.objects.get()
    assert run.status == "pending" and titles(run) == ["kb-1"]
    assert run.metadata["source_spans"] == [retrievals[0].context.span_id.to_bytes(8).hex()]
    again = post(retrievals, ingest_key)  # sent again: already joined
    assert again["X-Auditor-Late-Sources-Joined"] == "0"


def test_a_late_retrieval_reruns_an_analysed_audit_once(
    ingest_key, django_capture_on_commit_callbacks
):
    retrievals, llm, _ = split(record(lambda t: rag_trace(t, titles=("kb-1", "kb-2"))))
    with django_capture_on_commit_callbacks(execute=True):
        post(llm, ingest_key)
    first = AuditRun.objects.get()
    assert first.status == "complete" and first.sources == []
    with django_capture_on_commit_callbacks(execute=True):
        r = post(retrievals[:1], ingest_key)
    assert r["X-Auditor-Late-Sources-Reruns"] == "1"
    rerun = AuditRun.objects.get(rerun_of=first)
    assert rerun.status == "complete" and titles(rerun) == ["kb-1"]
    assert rerun.external_id == first.external_id + ":late"
    assert rerun.metadata["late_sources"] is True
    # The same retrieval again: nothing new. Another one after the re-run was analysed:
    # counted as dropped (one re-run per LLM span), nothing stored.
    assert post(retrievals[:1], ingest_key)["X-Auditor-Late-Sources-Reruns"] == "0"
    r = post(retrievals[1:], ingest_key)
    assert r["X-Auditor-Late-Sources-Dropped"] == "1"
    assert AuditRun.objects.count() == 2


def test_a_second_late_retrieval_joins_the_rerun_while_it_is_pending(
    ingest_key, django_capture_on_commit_callbacks
):
    retrievals, llm, _ = split(record(lambda t: rag_trace(t, titles=("kb-1", "kb-2"))))
    with django_capture_on_commit_callbacks(execute=True):
        post(llm, ingest_key)
    post(retrievals[:1], ingest_key)  # the re-run is stored, not analysed (no on-commit)
    r = post(retrievals[1:], ingest_key)
    assert r["X-Auditor-Late-Sources-Joined"] == "1"
    rerun = AuditRun.objects.get(rerun_of__isnull=False)
    assert titles(rerun) == ["kb-1", "kb-2"] and rerun.status == "pending"


def test_late_retrievals_leave_audits_of_other_sources_alone(ingest_key, api_client):
    retrievals, llm, _ = split(record(rag_trace))
    trace_id = llm[0].context.trace_id.to_bytes(16).hex()
    span_id = llm[0].context.span_id.to_bytes(8).hex()
    # An audit from the JSON API whose external id looks like one of this trace's spans.
    created = api_client.post(
        "/api/audits",
        {"user_input": "q", "response": "a", "external_id": f"{trace_id}:{span_id}"},
        key=ingest_key,
    )
    assert created.status_code == 202
    r = post(retrievals, ingest_key)
    assert r["X-Auditor-Late-Sources-Joined"] == "0"
    assert AuditRun.objects.get().sources == []


# --- bulk storage ----------------------------------------------------------------------------


def test_a_request_costs_the_same_queries_for_10_or_100_spans(ingest_key):
    """One read of the trace memory, one of the external ids already stored, one insert
    (the key check, rate-limit and configuration syncs, once a second, are not counted)."""

    def queries(n: int) -> list[str]:
        spans = record(lambda t: [genai_chat(t, question=f"q{i}") for i in range(n)])
        with CaptureQueriesContext(connection) as ctx:
            assert post(spans, ingest_key)["X-Auditor-Audits-Created"] == str(n)
        # An executemany is captured as "N times: INSERT ...": one statement either way.
        return [
            re.sub(r"^\d+ times: ", "", q["sql"]).split(" (")[0][:40]
            for q in ctx.captured_queries
            if '"audits_' in q["sql"]
        ]

    ten, hundred = queries(10), queries(100)
    assert ten == hundred and len(hundred) == 3


def test_a_span_twice_in_one_request_is_one_audit(ingest_key):
    spans = record(genai_chat)
    r = post(spans + spans, ingest_key)
    assert (r["X-Auditor-Audits-Created"], r["X-Auditor-Audits-Existing"]) == ("1", "1")
    assert AuditRun.objects.count() == 1


def test_the_same_span_sent_again_with_other_sources_is_not_a_second_audit(ingest_key):
    retrievals, llm, _ = split(record(rag_trace))
    post(llm, ingest_key)
    r = post(llm + retrievals, ingest_key)  # another grouping: another request body
    assert (r["X-Auditor-Audits-Created"], r["X-Auditor-Audits-Existing"]) == ("0", "1")
    assert AuditRun.objects.count() == 1


def test_batch_submission_checks_external_ids_per_key_in_one_go(make_key):
    from analyzers.models import ApiKey
    from audits.intake import submit

    key = ApiKey.objects.get(prefix=make_key("ingest").split("_")[1])
    other = ApiKey.objects.get(prefix=make_key("ingest").split("_")[1])
    submit.submit_audit(user_input="q", response="a", external_id="x", api_key=key)
    submit.submit_audit(user_input="q", response="a", external_id="y", api_key=other)
    item = {"user_input": "q", "response": "a"}
    same, changed, new, again, elsewhere = submit.submit_audits_once(
        [
            {**item, "external_id": "x"},
            {**item, "response": "b", "external_id": "x"},
            {**item, "external_id": "n"},
            {**item, "external_id": "n"},
            {**item, "external_id": "y"},  # another key's id: a new audit for this key
        ],
        api_key=key,
    )
    assert same.was_created is False and same.external_id == "x"
    assert isinstance(changed, submit.ExternalIdConflict)
    assert new.was_created is True and again.was_created is False and again.pk == new.pk
    assert elsewhere.was_created is True
    assert AuditRun.objects.filter(api_key=key).count() == 3


def test_sources_are_bounded_and_a_late_retrieval_adds_nothing_to_full_sources(ingest_key):
    names = tuple(f"kb-{i:02}" for i in range(25))
    retrievals, llm, _ = split(record(lambda t: rag_trace(t, titles=names)))
    post(retrievals[:24], ingest_key)
    post(llm, ingest_key)
    run = AuditRun.objects.get()
    assert titles(run) == list(names[:20])  # at most 20 sources, in start order
    r = post(retrievals[24:], ingest_key)
    assert (r["X-Auditor-Late-Sources-Joined"], r["X-Auditor-Late-Sources-Reruns"]) == ("0", "0")
    assert AuditRun.objects.count() == 1 and titles(AuditRun.objects.get()) == list(names[:20])
