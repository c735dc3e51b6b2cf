"""OTLP/HTTP bodies: media type, bounded gzip, protobuf and JSON messages, responses.

The messages are `opentelemetry-proto`'s; the JSON encoding is protobuf's `json_format`
with OTLP's two differences handled here: trace and span ids are hex strings (not
base64), and field names may be lowerCamelCase or snake_case (json_format takes both).
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


class OtlpError(Exception):
    """A request the endpoint refuses with `status` (the body says `message`)."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None):
        self.status, self.message, self.retry_after = status, message, retry_after
        super().__init__(message)


def media_type(content_type: str) -> str:
    """PROTOBUF or JSON from a Content-Type header; 415 for anything else."""
    value = content_type.split(";", 1)[0].strip().lower()
    if value in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    if value == JSON:
        return JSON
    raise OtlpError(415, f"unsupported Content-Type {value or '(none)'!r}: "
                         f"send {PROTOBUF} or {JSON}")


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """The body without its Content-Encoding (gzip or none), never more than `limit` bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        if len(body) > limit:
            raise OtlpError(413, f"request body is larger than {limit} bytes")
        return body
    if encoding not in ("gzip", "x-gzip"):
        raise OtlpError(415, f"unsupported Content-Encoding {encoding!r}: send gzip or none")
    out = bytearray()
    data = body
    try:
        while data:
            # Every member of a (multi-member) gzip stream, each read at most to the limit:
            # a small "gzip bomb" stops here, before it is inflated.
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out += inflater.decompress(data, limit + 1 - len(out))
            if len(out) > limit:
                raise OtlpError(413, f"decompressed body is larger than {limit} bytes")
            if not inflater.eof:
                raise OtlpError(400, "truncated gzip body")
            data = inflater.unused_data
    except zlib.error as exc:
        raise OtlpError(400, f"invalid gzip body: {exc}") from None
    return bytes(out)


def _hex_to_b64(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raw = b""  # an invalid id: the span is rejected as malformed (spans.py)
    return base64.b64encode(raw).decode()


def _fix_ids(node: Any) -> None:
    """OTLP JSON ids (hex) to what json_format expects for bytes (base64), in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ID_FIELDS:
                node[key] = _hex_to_b64(value)
            elif isinstance(value, dict | list):
                _fix_ids(value)
    elif isinstance(node, list):
        for item in node:
            _fix_ids(item)


def parse_request(body: bytes, fmt: str) -> ExportTraceServiceRequest:
    """The request message; 400 when the body is not one."""
    message = ExportTraceServiceRequest()
    if fmt == PROTOBUF:
        try:
            message.ParseFromString(body)
        except (DecodeError, RecursionError, ValueError) as exc:
            raise OtlpError(400, f"invalid protobuf body: {exc}") from None
        return message
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise OtlpError(400, f"invalid JSON body: {exc}") from None
    if not isinstance(data, dict):
        raise OtlpError(400, "invalid JSON body: not an object")
    try:
        _fix_ids(data)
        json_format.ParseDict(data, message, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, ValueError, TypeError) as exc:
        raise OtlpError(400, f"invalid OTLP JSON: {exc}") from None
    return message


def _encode(message: Message, fmt: str) -> bytes:
    if fmt == JSON:
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


def export_response(rejected: int, error_message: str, fmt: str) -> bytes:
    """ExportTraceServiceResponse; `partial_success` only when something was rejected."""
    response = ExportTraceServiceResponse()
    if rejected or error_message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = error_message
    return _encode(response, fmt)


def status_response(code: int, message: str, fmt: str) -> bytes:
    """The `google.rpc.Status` body OTLP/HTTP sends with an error status."""
    return _encode(status_pb2.Status(code=code, message=message), fmt)
