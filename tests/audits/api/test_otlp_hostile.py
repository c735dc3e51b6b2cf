"""POST /v1/traces with one hostile span beside a good one: the hostile span is rejected alone
(its reason in `partial_success`) or stored in a safe form; the good span is always stored,
the answer is never a 5xx."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError, connection
from django.test import Client
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from audits.models import AuditRun
from tests.otlp_support import genai_chat, json_body, proto_body, record

pytestmark = pytest.mark.django_db

PB = "application/x-protobuf"
JS = "application/json"
MARK = "@@hostile@@"  # a placeholder the tests replace in the encoded body


def post(body: bytes, key: str, fmt: str):
    return Client().post("/v1/traces", body, content_type=fmt, HTTP_AUTHORIZATION=f"Bearer {key}")


def partial(response, fmt: str) -> tuple[int, str]:
    """(rejected_spans, error_message) of a 200 answer."""
    if fmt == JS:
        data = json.loads(response.content).get("partialSuccess", {})
        return int(data.get("rejectedSpans", 0)), data.get("errorMessage", "")
    message = ExportTraceServiceResponse()
    message.ParseFromString(response.content)
    return message.partial_success.rejected_spans, message.partial_success.error_message


def spans_beside_a_good_one(**hostile) -> list:
    """A good chat span ("good") and a chat span ("hostile") with these attributes."""
    return record(
        lambda t: [genai_chat(t, question="good"), genai_chat(t, question="hostile", extra=hostile)]
    )


def body_of(spans: list, fmt: str) -> bytes:
    return json_body(spans) if fmt == JS else proto_body(spans)


def assert_rejected_alone(response, fmt: str, reason: str) -> None:
    assert response.status_code == 200, response.content
    rejected, message = partial(response, fmt)
    assert rejected == 1 and reason in message, message
    assert list(AuditRun.objects.values_list("user_input", flat=True)) == ["good"]


def assert_both_stored(response, fmt: str) -> AuditRun:
    """Both spans stored, nothing rejected: the hostile span's audit."""
    assert response.status_code == 200, response.content
    assert partial(response, fmt) == (0, "")
    assert sorted(AuditRun.objects.values_list("user_input", flat=True)) == ["good", "hostile"]
    return AuditRun.objects.get(user_input="hostile")


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def messages(text_json: str) -> str:
    """gen_ai.output.messages whose one text part is `text_json` (a JSON value, verbatim)."""
    return '[{"role": "assistant", "parts": [{"type": "text", "content": ' + text_json + "}]}]"


# --- non-finite and overflowing numbers ------------------------------------------------------


@pytest.mark.parametrize("fmt", [PB, JS])
@pytest.mark.parametrize(
    "value,stored",
    [(float("nan"), "NaN"), (float("inf"), "Infinity"), (float("-inf"), "-Infinity")],
)
def test_a_non_finite_double_attribute_is_stored_as_a_string(ingest_key, fmt, value, stored):
    r = post(body_of(spans_beside_a_good_one(**{"app.score": value}), fmt), ingest_key, fmt)
    run = assert_both_stored(r, fmt)
    assert run.metadata["attributes"]["app.score"] == stored


@pytest.mark.parametrize("fmt", [PB, JS])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), "1e999", "-5"])
def test_a_token_count_that_is_no_count_is_left_out(ingest_key, fmt, value):
    hostile = {"gen_ai.usage.input_tokens": value}
    run = assert_both_stored(
        post(body_of(spans_beside_a_good_one(**hostile), fmt), ingest_key, fmt), fmt
    )
    assert run.metadata.get("input_tokens") is None and run.metadata.get("total_tokens") is None
    assert run.metadata["output_tokens"] == 34


def test_token_counts_whose_sum_overflows_int64_give_no_total(ingest_key):
    top = 2**63 - 1
    hostile = {"gen_ai.usage.input_tokens": top, "gen_ai.usage.output_tokens": top}
    run = assert_both_stored(
        post(body_of(spans_beside_a_good_one(**hostile), PB), ingest_key, PB), PB
    )
    assert (run.metadata["input_tokens"], run.metadata.get("total_tokens")) == (top, None)


def json_with_value(any_value: str) -> bytes:
    """An OTLP/JSON export whose hostile span has an attribute `app.value` of this AnyValue
    (JSON text, verbatim: what the SDK's encoder would not write)."""
    body = json_body(spans_beside_a_good_one(**{"app.value": MARK}))
    return body.replace(b'{"stringValue": "' + MARK.encode() + b'"}', any_value.encode())


def deep_array(depth: int) -> str:
    value = '{"stringValue": "bottom"}'
    for _ in range(depth):
        value = '{"arrayValue": {"values": [' + value + "]}}"
    return value


@pytest.mark.parametrize(
    "any_value,reason",
    [
        ('{"intValue": "99999999999999999999999"}', "out of range"),
        ('{"doubleValue": 1e999}', "Infinity"),
        ('{"stringValue": "\\ud800"}', "surrogate"),
        (deep_array(120), "too deep"),
    ],
    ids=["int-beyond-int64", "double-beyond-float", "lone-surrogate", "nested-past-the-parser"],
)
def test_a_json_value_the_parser_refuses_rejects_its_span(ingest_key, any_value, reason):
    r = post(json_with_value(any_value), ingest_key, JS)
    assert_rejected_alone(r, JS, "invalid OTLP JSON span: ")
    assert reason in partial(r, JS)[1]


# --- text that is not storable ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", [PB, JS])
def test_a_lone_surrogate_in_the_messages_rejects_its_span(ingest_key, fmt):
    hostile = {"gen_ai.output.messages": messages('"\\ud800 broken"')}
    r = post(body_of(spans_beside_a_good_one(**hostile), fmt), ingest_key, fmt)
    assert_rejected_alone(r, fmt, "lone surrogate")


@pytest.mark.parametrize("fmt", [PB, JS])
def test_a_nul_character_in_the_answer_rejects_its_span(ingest_key, fmt):
    hostile = {"gen_ai.output.messages": messages('"before\\u0000after"')}
    r = post(body_of(spans_beside_a_good_one(**hostile), fmt), ingest_key, fmt)
    assert_rejected_alone(r, fmt, "NUL")


def test_invalid_utf8_in_a_protobuf_string_rejects_its_span(ingest_key):
    body = proto_body(spans_beside_a_good_one(**{"app.note": MARK}))
    body = body.replace(MARK.encode(), b"\xff\xfe" + b"x" * (len(MARK) - 2))
    assert_rejected_alone(post(body, ingest_key, PB), PB, "UTF-8")


# --- nesting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [PB, JS])
def test_deeply_nested_messages_reject_their_span(ingest_key, fmt):
    hostile = {"gen_ai.output.messages": nested(100_000)}
    r = post(body_of(spans_beside_a_good_one(**hostile), fmt), ingest_key, fmt)
    assert_rejected_alone(r, fmt, "nested too deeply")


@pytest.mark.parametrize("fmt", [PB, JS])
def test_a_message_text_nested_deeply_rejects_its_span(ingest_key, fmt):
    hostile = {"gen_ai.output.messages": messages(nested(5_000))}
    r = post(body_of(spans_beside_a_good_one(**hostile), fmt), ingest_key, fmt)
    assert_rejected_alone(r, fmt, "nested too deeply")


def _deep_attribute_request(depth: int):
    request = encode_spans(spans_beside_a_good_one(**{"app.deep": "x"}))
    span = request.resource_spans[0].scope_spans[0].spans[1]
    value = next(kv.value for kv in span.attributes if kv.key == "app.deep")
    for _ in range(depth):
        value = value.array_value.values.add()
    value.string_value = "bottom"
    return request


def test_an_attribute_nested_past_the_protobuf_parser_limit_rejects_its_span(ingest_key):
    body = _deep_attribute_request(120).SerializeToString()
    assert_rejected_alone(post(body, ingest_key, PB), PB, "invalid protobuf span")


# --- a real outage ---------------------------------------------------------------------------


def test_only_a_database_outage_is_a_retryable_503(ingest_key):
    """From the key's lookup on: the exporter retries a 503, so only an outage gets one."""

    def unreachable(execute, sql, params, many, context):
        raise OperationalError("unable to open database file")

    body = body_of(spans_beside_a_good_one(**{"app.score": float("nan")}), PB)
    with connection.execute_wrapper(unreachable):
        r = post(body, ingest_key, PB)
    assert r.status_code == 503 and r["Retry-After"] == "5"
    assert (
        r.content
        == status_pb2.Status(
            code=14, message="the database is unavailable; try again later"
        ).SerializeToString()
    )
    assert assert_both_stored(post(body, ingest_key, PB), PB)  # the same export, once it is back
