"""POST /v1/traces in process: encodings, OTLP answers, limits, span conventions, idempotency."""

from __future__ import annotations

import gzip
import json

import pytest
from django.test import Client
from django.utils import timezone
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.trace import Status, StatusCode

from audits.models import AuditRun
from tests.otlp_support import genai_chat, json_body, proto_body, record

pytestmark = pytest.mark.django_db

PB = "application/x-protobuf"
JS = "application/json"


def post(body: bytes, key: str | None, content_type: str = PB, **headers):
    extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    if key:
        extra["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    return Client().post("/v1/traces", body, content_type=content_type, **extra)


def answer(response) -> ExportTraceServiceResponse:
    message = ExportTraceServiceResponse()
    message.ParseFromString(response.content)
    return message


def status_of(response) -> status_pb2.Status:
    message = status_pb2.Status()
    message.ParseFromString(response.content)
    return message


# --- encodings and the stored audit ------------------------------------------------------


def test_it_stores_a_genai_chat_span_as_one_audit(ingest_key):
    spans = record(genai_chat)
    r = post(proto_body(spans), ingest_key)
    assert r.status_code == 200, r.content
    assert r["Content-Type"] == PB
    assert not answer(r).HasField("partial_success")
    run = AuditRun.objects.get()
    span = spans[0]
    trace_id, span_id = f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"
    assert run.external_id == f"{trace_id}:{span_id}"
    assert run.user_input == "Which retailers use Acme?"
    assert run.response == "Acme is easy to set up."
    meta = run.metadata
    assert meta["trace_id"] == trace_id and meta["span_id"] == span_id
    assert meta["model"] == "gpt-4o-mini" and meta["provider"] == "openai"
    assert (meta["input_tokens"], meta["output_tokens"], meta["total_tokens"]) == (12, 34, 46)
    assert meta["service_name"] == "checkout-bot"
    assert meta["convention"] == "genai"
    assert meta["attributes"]["gen_ai.operation.name"] == "chat"
    assert "gen_ai.input.messages" not in meta["attributes"]  # the text is not metadata


def test_it_reads_the_json_encoding_with_hex_ids(ingest_key):
    spans = record(genai_chat)
    body = json_body(spans)
    assert f'"{spans[0].context.trace_id:032x}"' in body.decode()  # OTLP JSON: hex ids
    r = post(body, ingest_key, content_type=JS)
    assert r.status_code == 200, r.content
    assert r["Content-Type"] == JS
    assert json.loads(r.content) == {}
    run = AuditRun.objects.get()
    assert run.metadata["span_id"] == f"{spans[0].context.span_id:016x}"


def test_it_accepts_gzip(ingest_key):
    r = post(gzip.compress(proto_body(record(genai_chat))), ingest_key, content_encoding="gzip")
    assert r.status_code == 200, r.content
    assert AuditRun.objects.count() == 1


def test_the_same_batch_sent_twice_stores_each_audit_once(ingest_key):
    spans = record(lambda t: [genai_chat(t, question=f"q{i}") for i in range(3)])
    first = post(proto_body(spans), ingest_key)
    second = post(proto_body(spans), ingest_key)
    assert (first["X-Auditor-Audits-Created"], second["X-Auditor-Audits-Created"]) == ("3", "0")
    assert second["X-Auditor-Audits-Existing"] == "3"
    assert AuditRun.objects.count() == 3


def test_the_audit_is_analysed_and_a_hostile_link_found(
    ingest_key, django_capture_on_commit_callbacks
):
    hostile = "Details: [click here](javascript:alert(document.cookie))"
    with django_capture_on_commit_callbacks(execute=True):
        post(proto_body(record(lambda t: genai_chat(t, answer=hostile))), ingest_key)
    run = AuditRun.objects.get()
    assert run.status == "complete"
    assert run.annotations.filter(type="LINK_UNSAFE_SCHEME").exists()


# --- conventions ---------------------------------------------------------------------------


def openinference_llm(tracer, *, with_messages=True):
    with tracer.start_as_current_span("agent"), tracer.start_as_current_span("retrieve") as r:
        r.set_attributes(
            {
                "openinference.span.kind": "RETRIEVER",
                "retrieval.documents.0.document.id": "kb-1",
                "retrieval.documents.0.document.content": "Decathlon grew conversion by 50%.",
                "retrieval.documents.0.document.metadata": json.dumps(
                    {
                        "title": "Decathlon story",
                        "url": "https://www.acme.example/customers/decathlon",
                    }
                ),
            }
        )
    with tracer.start_as_current_span("ChatCompletion") as span:
        attrs = {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4.1",
            "llm.provider": "openai",
            "llm.token_count.prompt": 5,
            "llm.token_count.completion": 6,
            "llm.token_count.total": 11,
            "input.value": json.dumps({"messages": [{"role": "user", "content": "raw?"}]}),
            "input.mime_type": "application/json",
            "output.value": "raw answer",
        }
        if with_messages:
            attrs.update(
                {
                    "llm.input_messages.0.message.role": "system",
                    "llm.input_messages.0.message.content": "Be brief.",
                    "llm.input_messages.1.message.role": "user",
                    "llm.input_messages.1.message.content": "Who uses Acme?",
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": "Decathlon does.",
                }
            )
        span.set_attributes(attrs)


def test_an_openinference_llm_span_with_sources_from_the_trace(ingest_key):
    # One trace: retrieval and LLM spans under the same root.
    def build(tracer):
        with tracer.start_as_current_span("root"):
            openinference_llm(tracer)

    r = post(proto_body(record(build)), ingest_key)
    assert r["X-Auditor-Audits-Created"] == "1"
    assert r["X-Auditor-Spans-Ignored"] == "3"  # root, agent, retriever
    run = AuditRun.objects.get()
    assert (run.user_input, run.response) == ("Who uses Acme?", "Decathlon does.")
    assert run.metadata["model"] == "gpt-4.1" and run.metadata["total_tokens"] == 11
    assert run.metadata["convention"] == "openinference"
    assert run.sources == [
        {
            "title": "Decathlon story",
            "url": "https://www.acme.example/customers/decathlon",
            "text": "Decathlon grew conversion by 50%.",
            "company": None,
        }
    ]


def test_openinference_falls_back_to_input_and_output_values(ingest_key):
    post(proto_body(record(lambda t: openinference_llm(t, with_messages=False))), ingest_key)
    run = AuditRun.objects.get()
    assert (run.user_input, run.response) == ("raw?", "raw answer")
    assert run.sources == []  # the retriever was in another trace


def test_the_older_per_message_events(ingest_key):
    def build(tracer):
        with tracer.start_as_current_span("chat m") as span:
            span.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.system": "openai",
                    "gen_ai.request.model": "m",
                    "gen_ai.usage.prompt_tokens": 3,
                    "gen_ai.usage.completion_tokens": 4,
                }
            )
            span.add_event("gen_ai.system.message", {"content": "Be brief."})
            span.add_event("gen_ai.user.message", {"content": "Old style?"})
            span.add_event(
                "gen_ai.choice",
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": json.dumps({"role": "assistant", "content": "Yes."}),
                },
            )

    post(proto_body(record(build)), ingest_key)
    run = AuditRun.objects.get()
    assert (run.user_input, run.response) == ("Old style?", "Yes.")
    assert (run.metadata["provider"], run.metadata["input_tokens"]) == ("openai", 3)


def flat_attributes(tracer, attrs: dict) -> None:
    with tracer.start_as_current_span("openai.chat") as span:
        span.set_attributes({"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o", **attrs})


@pytest.mark.parametrize(
    "attrs",
    [
        {"gen_ai.prompt": "Flat question?", "gen_ai.completion": "Flat answer."},
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.prompt": "Flat question?",
            "gen_ai.completion": "Flat answer.",
        },
        {
            "gen_ai.prompt": json.dumps(
                [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Flat question?"},
                ]
            ),
            "gen_ai.completion": json.dumps([{"role": "assistant", "content": "Flat answer."}]),
        },
        {
            "llm.request.type": "chat",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "Be brief.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "Flat question?",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Flat answer.",
        },
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.prompt.0.content": "Flat question?",
            "gen_ai.completion.0.content": "Flat answer.",
        },
    ],
    ids=[
        "flat-text",
        "flat-text-with-operation",
        "flat-json-messages",
        "indexed",
        "indexed-with-operation",
    ],
)
def test_the_older_flat_prompt_and_completion_attributes(ingest_key, attrs):
    r = post(proto_body(record(lambda t: flat_attributes(t, attrs))), ingest_key)
    assert r.status_code == 200 and not answer(r).HasField("partial_success")
    run = AuditRun.objects.get()
    assert (run.user_input, run.response) == ("Flat question?", "Flat answer.")
    assert (run.metadata["provider"], run.metadata["model"]) == ("openai", "gpt-4o")
    assert "gen_ai.prompt" not in run.metadata["attributes"]  # the text is not metadata


def test_non_llm_spans_are_ignored_and_malformed_ones_rejected_the_rest_stored(ingest_key):
    def build(tracer):
        with tracer.start_as_current_span("GET /checkout"):
            genai_chat(tracer, question="good one")
            with tracer.start_as_current_span("bad json") as span:
                span.set_attributes(
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.input.messages": "{not json",
                        "gen_ai.output.messages": "[]",
                    }
                )
            with tracer.start_as_current_span("no content") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
            with tracer.start_as_current_span("failed call") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_status(Status(StatusCode.ERROR))
            with tracer.start_as_current_span("embeddings") as span:
                span.set_attribute("gen_ai.operation.name", "embeddings")

    r = post(proto_body(record(build)), ingest_key)
    assert r.status_code == 200
    partial = answer(r).partial_success
    assert partial.rejected_spans == 2
    assert "not valid JSON" in partial.error_message
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in partial.error_message
    assert r["X-Auditor-Spans-Ignored"] == "3"  # the HTTP span, embeddings, the failed call
    assert list(AuditRun.objects.values_list("user_input", flat=True)) == ["good one"]


def test_a_span_with_an_invalid_id_is_rejected_not_a_500(ingest_key):
    data = json.loads(json_body(record(lambda t: [genai_chat(t), genai_chat(t)])))
    spans = data["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0]["spanId"] = "zz-not-hex"
    r = post(json.dumps(data).encode(), ingest_key, content_type=JS)
    assert r.status_code == 200
    assert json.loads(r.content)["partialSuccess"]["rejectedSpans"] in (1, "1")
    assert AuditRun.objects.count() == 1


# --- bounds ------------------------------------------------------------------------------


def test_long_attributes_are_cut_in_the_metadata_and_overlong_text_rejected(ingest_key, settings):
    settings.AUDITOR_OTLP_MAX_TEXT_CHARS = 1000

    def build(tracer):
        genai_chat(tracer, extra={"app.note": "x" * 5000})
        genai_chat(tracer, answer="y" * 1001)

    r = post(proto_body(record(build)), ingest_key)
    assert answer(r).partial_success.rejected_spans == 1
    run = AuditRun.objects.get()
    assert len(run.metadata["attributes"]["app.note"]) == 1000


def test_a_gzip_bomb_is_refused_before_it_is_inflated(ingest_key, settings):
    settings.AUDITOR_OTLP_MAX_DECOMPRESSED_BYTES = 1_000_000
    bomb = gzip.compress(b"\0" * 50_000_000)
    assert len(bomb) < 100_000
    r = post(bomb, ingest_key, content_encoding="gzip")
    assert r.status_code == 413
    assert "decompressed" in status_of(r).message


def test_a_body_over_the_limit_is_413(ingest_key, settings):
    settings.AUDITOR_OTLP_MAX_BODY_BYTES = 100
    r = post(proto_body(record(genai_chat)), ingest_key)
    assert r.status_code == 413
    assert AuditRun.objects.count() == 0


def test_otlp_json_has_its_own_lower_body_limit(ingest_key, settings):
    settings.AUDITOR_OTLP_JSON_MAX_BYTES = 2_000
    spans = record(lambda t: [genai_chat(t, question=f"q{i}") for i in range(3)])
    body = json_body(spans)
    assert len(body) > 2_000 and len(proto_body(spans)) < 4_000
    for sent, encoding in ((body, ""), (gzip.compress(body), "gzip")):  # gzip: once inflated
        r = post(sent, ingest_key, content_type=JS, content_encoding=encoding)
        assert r.status_code == 413
        message = json.loads(r.content)["message"]
        assert "2000 bytes" in message and "AUDITOR_OTLP_JSON_MAX_BYTES" in message
        assert "http/protobuf" in message
    assert AuditRun.objects.count() == 0
    assert post(proto_body(spans), ingest_key).status_code == 200  # protobuf: its own limit
    assert AuditRun.objects.count() == 3


def test_too_many_spans_in_one_request_is_413(ingest_key, settings):
    settings.AUDITOR_OTLP_MAX_SPANS = 2
    r = post(proto_body(record(lambda t: [genai_chat(t) for _ in range(3)])), ingest_key)
    assert r.status_code == 413
    assert "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" in status_of(r).message


def test_a_truncated_gzip_body_is_400(ingest_key):
    r = post(
        gzip.compress(proto_body(record(genai_chat)))[:-20], ingest_key, content_encoding="gzip"
    )
    assert r.status_code == 400


# --- refusals ----------------------------------------------------------------------------


def test_another_content_type_is_415(ingest_key):
    r = post(b"{}", ingest_key, content_type="text/plain")
    assert r.status_code == 415


def test_another_content_encoding_is_415(ingest_key):
    r = post(proto_body(record(genai_chat)), ingest_key, content_encoding="br")
    assert r.status_code == 415


@pytest.mark.parametrize("body,ctype", [(b"\xff\xff\xff", PB), (b"[1,", JS), (b"[]", JS)])
def test_a_body_that_is_not_an_export_request_is_400(ingest_key, body, ctype):
    r = post(body, ingest_key, content_type=ctype)
    assert r.status_code == 400
    assert AuditRun.objects.count() == 0


def test_it_needs_an_ingest_key(make_key):
    body = proto_body(record(genai_chat))
    assert post(body, None).status_code == 401
    assert post(body, "ra_wrong").status_code == 401
    assert post(body, make_key("ingest", revoked_at=timezone.now())).status_code == 401
    assert AuditRun.objects.count() == 0


def test_over_the_rate_limit_is_429_with_retry_after(make_key):
    key = make_key("ingest", rate_limit_per_minute=1)
    body = proto_body(record(genai_chat))
    assert post(body, key).status_code == 200
    r = post(body, key)
    assert r.status_code == 429
    assert int(r["Retry-After"]) >= 1


def test_get_is_405():
    assert Client().get("/v1/traces").status_code == 405


def test_an_empty_export_request_is_fine(ingest_key):
    empty = ExportTraceServiceRequest(resource_spans=[{}]).SerializeToString()
    assert post(empty, ingest_key).status_code == 200
    assert post(b"{}", ingest_key, content_type=JS).status_code == 200


# --- metadata filter, trace context, configuration -----------------------------------------


def _ingest_two_models(key):
    spans = record(
        lambda t: [
            genai_chat(t, model="gpt-4o", question="a"),
            genai_chat(t, model="claude", question="b"),
        ]
    )
    post(proto_body(spans), key)


def test_the_api_list_filters_on_metadata(api_client, ingest_key, read_key):
    _ingest_two_models(ingest_key)
    items = api_client.get("/api/audits?meta=model:gpt-4o", key=read_key).json()["items"]
    assert [i["user_input"] for i in items] == ["a"]
    both = "/api/audits?meta=service_name:checkout-bot&meta=input_tokens:12"
    assert len(api_client.get(both, key=read_key).json()["items"]) == 2
    assert api_client.get("/api/audits?meta=model:none", key=read_key).json()["items"] == []
    assert api_client.get("/api/audits?meta=no-colon", key=read_key).status_code == 422
    assert api_client.get("/api/audits?meta=a__b:1", key=read_key).status_code == 422
    r = api_client.get("/api/audits/export?meta=model:claude", key=read_key)
    text = b"".join(r.streaming_content).decode()
    assert [json.loads(line)["user_input"] for line in text.splitlines()] == ["b"]


def test_the_dashboard_list_filters_on_metadata(client, staff_user, ingest_key):
    _ingest_two_models(ingest_key)
    client.force_login(staff_user)
    page = client.get("/?meta=model:claude").content.decode()
    assert 'name="meta" value="model:claude"' in page
    run_b = AuditRun.objects.get(user_input="b")
    run_a = AuditRun.objects.get(user_input="a")
    assert str(run_b.pk) in page and str(run_a.pk) not in page
    assert "Write key:value" in client.get("/?meta=bad").content.decode()


def test_the_detail_page_shows_the_trace_and_links_it(client, staff_user, ingest_key):
    from analyzers.config_store import export_config, save_config

    spans = record(genai_chat)
    post(proto_body(spans), ingest_key)
    run = AuditRun.objects.get()
    client.force_login(staff_user)
    trace_id = f"{spans[0].context.trace_id:032x}"
    page = client.get(f"/audits/{run.pk}/").content.decode()
    assert trace_id in page and "trace-link" not in page
    config = export_config()
    config["otel"] = {"trace_url_template": "https://phoenix.example/t/{trace_id}?a=1&s={span_id}"}
    save_config(config, actor="test")
    page = client.get(f"/audits/{run.pk}/").content.decode()
    span_id = f"{spans[0].context.span_id:016x}"
    assert f'href="https://phoenix.example/t/{trace_id}?a=1&amp;s={span_id}"' in page


@pytest.mark.parametrize(
    "template",
    [
        "javascript:alert(1)//{trace_id}",
        "https://x.example/no-placeholder",
        "https://x.example/{trace_id}/{other}",
        "//x.example/{trace_id}",
    ],
)
def test_the_trace_url_template_must_be_an_http_url_with_the_trace_id(
    api_client, make_key, template
):
    admin = make_key("admin")
    config = api_client.get("/api/config", key=admin).json()
    assert config["otel"] == {"trace_url_template": None}
    config["otel"] = {"trace_url_template": template}
    r = api_client.put("/api/config", config, key=admin)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][:3] == ["body", "otel", "trace_url_template"]


def test_the_trace_url_template_round_trips_through_the_api(api_client, make_key):
    admin = make_key("admin")
    config = api_client.get("/api/config", key=admin).json()
    config["otel"] = {"trace_url_template": "https://jaeger.example/trace/{trace_id}"}
    assert api_client.put("/api/config", config, key=admin).status_code == 200
    assert api_client.get("/api/config", key=admin).json()["otel"] == config["otel"]


def test_the_admin_edits_the_trace_url_template(admin_client):
    from analyzers.config_store import load_config

    form = {
        "threshold": "0.3",
        "max_concurrency": "4",
        "analyzer_timeout_s": "10",
        "extra": "{}",
        "otel_trace_url_template": "javascript:alert(1)/{trace_id}",
    }
    r = admin_client.post("/admin/analyzers/globalsettings/add/", form)
    assert r.status_code == 200 and "http" in r.content.decode()
    form["otel_trace_url_template"] = "https://phoenix.example/traces/{trace_id}"
    r = admin_client.post("/admin/analyzers/globalsettings/add/", form)
    assert r.status_code == 302
    assert load_config().otel.trace_url("ab") == "https://phoenix.example/traces/ab"
