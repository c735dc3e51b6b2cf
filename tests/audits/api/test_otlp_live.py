"""Acceptance: real OpenTelemetry exporters, and the `openai` SDK under two instrumentations,
against a real daphne server on 127.0.0.1 (this run's test database) and a scripted model."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from openai import OpenAI
from opentelemetry.exporter.otlp.json.http.trace_exporter import (
    OTLPSpanExporter as JsonSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from audits.models import AuditRun
from tests.live_support import daphne
from tests.llm_server import Reply, ScriptedLLMServer
from tests.otlp_support import genai_chat, json_body, rag_trace, record, split

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = "Acme is easy to set up. [Read the guide](javascript:alert(document.cookie))"
QUESTION = "How do I set up Acme?"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with daphne(tmp_path_factory.mktemp("otlp")) as host:
        yield f"http://{host}"


def wait_for_audits(count: int, timeout: float = 30.0) -> list[AuditRun]:
    """Poll until `count` audits are stored and none is pending or running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = list(AuditRun.objects.all())
        if len(runs) >= count and all(r.is_finished for r in runs):
            return runs
        time.sleep(0.1)
    raise AssertionError(f"audits: {[(r.pk, r.status) for r in AuditRun.objects.all()]}")


# --- the SDK's exporters -------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["protobuf", "protobuf-gzip", "json"])
def test_the_sdk_exporters_deliver_llm_spans(server, make_key, encoding):
    key = make_key("ingest")
    spans = record(lambda t: [genai_chat(t, question="first"), genai_chat(t, question="second")])
    endpoint, headers = f"{server}/v1/traces", {"Authorization": f"Bearer {key}"}
    if encoding == "json":
        exporter = JsonSpanExporter(endpoint=endpoint, headers=headers)
    else:
        compression = Compression.Gzip if encoding.endswith("gzip") else Compression.NoCompression
        exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers, compression=compression)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    runs = wait_for_audits(2)
    assert sorted(r.user_input for r in runs) == ["first", "second"]
    assert all(r.status == "complete" and r.metadata["model"] == "gpt-4o-mini" for r in runs)


def test_the_exporter_configured_by_environment_variables(server, make_key, monkeypatch):
    """What docs/guides/otlp.md tells an application to set."""
    key = make_key("ingest")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{key}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    assert OTLPSpanExporter().export(record(genai_chat)) == SpanExportResult.SUCCESS
    assert wait_for_audits(1)[0].response == "Acme is easy to set up."


def test_a_wrong_key_fails_the_export_and_stores_nothing(server, make_key):
    exporter = OTLPSpanExporter(
        endpoint=f"{server}/v1/traces", headers={"Authorization": "Bearer ra_nope_nope"}
    )
    assert exporter.export(record(genai_chat)) == SpanExportResult.FAILURE
    assert AuditRun.objects.count() == 0


def test_the_same_batch_exported_twice_stores_each_audit_once(server, make_key):
    key = make_key("ingest")
    spans = record(lambda t: [genai_chat(t, question=f"q{i}") for i in range(5)])
    exporter = OTLPSpanExporter(
        endpoint=f"{server}/v1/traces", headers={"Authorization": f"Bearer {key}"}
    )
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    wait_for_audits(5)
    time.sleep(0.3)
    assert AuditRun.objects.count() == 5


def test_a_trace_exported_span_by_span_gets_its_sources(server, make_key):
    """The SDK's batch processor sends each span in its own request (batch size 1): the
    retrievals arrive before the LLM span of their trace and become its sources."""
    key = make_key("ingest")
    exporter = OTLPSpanExporter(
        endpoint=f"{server}/v1/traces", headers={"Authorization": f"Bearer {key}"}
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-bot"}))
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_export_batch_size=1, schedule_delay_millis=10)
    )
    rag_trace(provider.get_tracer("tests"), titles=("kb-1", "kb-2"))
    provider.shutdown()
    run = wait_for_audits(1)[0]
    assert [s["title"] for s in run.sources] == ["kb-1", "kb-2"]
    assert run.status == "complete"


def test_a_retrieval_exported_after_its_analysed_llm_span_reruns_it(server, make_key):
    key = make_key("ingest")
    retrievals, llm, _ = split(record(rag_trace))
    exporter = OTLPSpanExporter(
        endpoint=f"{server}/v1/traces", headers={"Authorization": f"Bearer {key}"}
    )
    assert exporter.export(llm) == SpanExportResult.SUCCESS
    first = wait_for_audits(1)[0]
    assert first.sources == []
    assert exporter.export(retrievals) == SpanExportResult.SUCCESS
    rerun = next(r for r in wait_for_audits(2) if r.rerun_of_id == first.pk)
    assert [s["title"] for s in rerun.sources] == ["kb-1"]
    assert rerun.status == "complete" and rerun.metadata["late_sources"] is True


def test_a_poison_span_is_rejected_alone_and_the_export_succeeds(server, make_key):
    """NaN in an attribute and a lone surrogate in the messages: the export is not failed
    (nor retried), the other spans are stored."""
    key = make_key("ingest")
    spans = record(
        lambda t: [
            genai_chat(t, question="good"),
            genai_chat(t, question="nan", extra={"app.score": float("nan")}),
            genai_chat(
                t,
                question="surrogate",
                extra={
                    "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "content": "\ud800"}]
                    )
                },
            ),
        ]
    )
    exporter = OTLPSpanExporter(
        endpoint=f"{server}/v1/traces", headers={"Authorization": f"Bearer {key}"}
    )
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    runs = {r.user_input: r for r in wait_for_audits(2)}
    assert sorted(runs) == ["good", "nan"]
    assert runs["nan"].metadata["attributes"]["app.score"] == "NaN"


def test_flat_prompt_and_completion_attributes_exported_by_the_sdk(server, make_key):
    key = make_key("ingest")

    def build(tracer):
        with tracer.start_as_current_span("openai.chat") as span:
            span.set_attributes(
                {
                    "gen_ai.system": "openai",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.prompt": QUESTION,
                    "gen_ai.completion": HOSTILE,
                }
            )

    exporter = OTLPSpanExporter(
        endpoint=f"{server}/v1/traces", headers={"Authorization": f"Bearer {key}"}
    )
    assert exporter.export(record(build)) == SpanExportResult.SUCCESS
    run = wait_for_audits(1)[0]
    assert (run.user_input, run.response) == (QUESTION, HOSTILE)
    assert run.annotations.filter(type="LINK_UNSAFE_SCHEME").exists()


def test_the_shipped_server_bounds_otlp_json_below_protobuf(server, make_key):
    key = make_key("ingest")
    spans = record(
        lambda t: [genai_chat(t, question=f"q{i}", answer="a" * 9_000) for i in range(460)]
    )
    body = json_body(spans)
    assert 4_000_000 < len(body) < 8_000_000  # under the protobuf limit, over the JSON one
    r = httpx.post(
        f"{server}/v1/traces",
        content=body,
        timeout=30,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert "AUDITOR_OTLP_JSON_MAX_BYTES" in r.json()["message"]
    exporter = JsonSpanExporter(
        endpoint=f"{server}/v1/traces", headers={"Authorization": f"Bearer {key}"}
    )
    assert exporter.export(spans) == SpanExportResult.FAILURE  # a 413 is not retried
    exporter = OTLPSpanExporter(
        endpoint=f"{server}/v1/traces", headers={"Authorization": f"Bearer {key}"}
    )
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert len(wait_for_audits(460, timeout=180)) == 460  # analysed before the next test


# --- end to end: an instrumented openai client ---------------------------------------------


def instrumented_call(instrumentor, server: str, key: str) -> None:
    """The app: the openai SDK, instrumented, calls a scripted model; spans go to `server`."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentor.instrument(tracer_provider=provider)
    try:
        with ScriptedLLMServer() as model:
            model.enqueue(Reply(content=HOSTILE, prompt_tokens=21, completion_tokens=13))
            client = OpenAI(base_url=model.base_url, api_key="sk-test", max_retries=0)
            completion = client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[
                    {"role": "system", "content": "You help Acme customers."},
                    {"role": "user", "content": QUESTION},
                ],
            )
        assert completion.choices[0].message.content == HOSTILE
    finally:
        instrumentor.uninstrument()
    provider.force_flush()
    exporter = OTLPSpanExporter(
        endpoint=f"{server}/v1/traces", headers={"Authorization": f"Bearer {key}"}
    )
    assert exporter.export(memory.get_finished_spans()) == SpanExportResult.SUCCESS


def assert_the_audit_of_the_call(convention: str) -> None:
    run = wait_for_audits(1)[0]
    assert run.status == "complete"
    assert run.user_input == QUESTION
    assert run.response == HOSTILE
    meta = run.metadata
    assert meta["convention"] == convention
    assert meta["model"] == "gpt-4o-mini"
    assert (meta["input_tokens"], meta["output_tokens"]) == (21, 13)
    assert meta["service_name"] == "support-bot"
    assert run.annotations.filter(type="LINK_UNSAFE_SCHEME").exists()
    assert "javascript:" not in run.cleaned_response


def test_openai_instrumented_by_openinference(server, make_key):
    from openinference.instrumentation.openai import OpenAIInstrumentor

    instrumented_call(OpenAIInstrumentor(), server, make_key("ingest"))
    assert_the_audit_of_the_call("openinference")
    assert AuditRun.objects.get().metadata["provider"] == "openai"


def test_openai_instrumented_by_opentelemetry_openai_v2(server, make_key, monkeypatch):
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    # The GenAI conventions keep message content out of spans unless asked for.
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    instrumented_call(OpenAIInstrumentor(), server, make_key("ingest"))
    assert_the_audit_of_the_call("genai")
    assert AuditRun.objects.get().metadata["provider"] == "openai"
