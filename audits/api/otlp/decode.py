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

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
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
    raise OtlpError(
        415, f"unsupported Content-Type {value or '(none)'!r}: send {PROTOBUF} or {JSON}"
    )


def decompress(body: bytes, encoding: str, limit: int, hint: str = "") -> bytes:
    """The body without its Content-Encoding (gzip or none), never more than `limit` bytes
    (`hint` ends the 413's message)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        if len(body) > limit:
            raise OtlpError(413, f"request body is larger than {limit} bytes{hint}")
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
                raise OtlpError(413, f"decompressed body is larger than {limit} bytes{hint}")
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


def _short(exc: Exception) -> str:
    """The innermost reason of a protobuf parse error (they nest "Failed to parse x field: ",
    or start "Error parsing message with type 'x': ")."""
    text = str(exc).rsplit("field: ", 1)[-1]
    if text.startswith("Error parsing message"):
        text = text.split("': ", 1)[-1]
    return text[:200]


def _shell_classes():
    """Messages with the wire layout of an export request whose spans, resources and scopes
    stay bytes: the spans of a request the strict parse refused are parsed one by one."""
    file = descriptor_pb2.FileDescriptorProto(
        name="auditor/otlp_shell.proto", package="auditor.otlp_shell", syntax="proto3"
    )
    repeated, optional = (
        descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    as_bytes = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    as_message = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
    for name, fields in (
        ("Request", [("resource_spans", 1, repeated, as_message, ".auditor.otlp_shell.Resource")]),
        (
            "Resource",
            [
                ("resource", 1, optional, as_bytes, None),
                ("scope_spans", 2, repeated, as_message, ".auditor.otlp_shell.Scope"),
            ],
        ),
        ("Scope", [("scope", 1, optional, as_bytes, None), ("spans", 2, repeated, as_bytes, None)]),
    ):
        message = file.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            message.field.add(
                name=field_name,
                number=number,
                label=label,
                type=kind,
                **({"type_name": type_name} if type_name else {}),
            )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("auditor.otlp_shell.Request"))


_Shell = _shell_classes()


def _parse_protobuf(body: bytes) -> tuple[ExportTraceServiceRequest, list[str]]:
    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(body)
        return message, []
    except (DecodeError, RecursionError, ValueError):
        message.Clear()  # e.g. one span's invalid UTF-8: the others are parsed alone
    shell, rejected = _Shell(), []
    try:
        shell.ParseFromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise OtlpError(400, f"invalid protobuf body: {exc}") from None
    for raw_resource in shell.resource_spans:
        resource_spans = message.resource_spans.add()
        try:
            resource_spans.resource.ParseFromString(raw_resource.resource)
        except (DecodeError, RecursionError, ValueError) as exc:
            rejected += [f"invalid protobuf resource: {_short(exc)}"] * sum(
                len(s.spans) for s in raw_resource.scope_spans
            )
            del message.resource_spans[-1]
            continue
        for raw_scope in raw_resource.scope_spans:
            scope_spans = resource_spans.scope_spans.add()
            try:
                scope_spans.scope.ParseFromString(raw_scope.scope)
            except (DecodeError, RecursionError, ValueError) as exc:
                rejected += [f"invalid protobuf scope: {_short(exc)}"] * len(raw_scope.spans)
                del resource_spans.scope_spans[-1]
                continue
            for raw_span in raw_scope.spans:
                try:
                    scope_spans.spans.add().ParseFromString(raw_span)
                except (DecodeError, RecursionError, ValueError) as exc:
                    rejected.append(f"invalid protobuf span: {_short(exc)}")
                    del scope_spans.spans[-1]
    return message, rejected


def _pop_list(data: dict, *names: str) -> list:
    """The list under the first of `names` present (removed from `data`); 400 if not a list."""
    for name in names:
        if name in data:
            value = data.pop(name)
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise OtlpError(400, f"invalid OTLP JSON: {name} is not a list of objects")
            return value
    return []


def _parse_into(data: dict, message: Message) -> str | None:
    """json_format.ParseDict, its error as a short reason (None when it parsed)."""
    try:
        _fix_ids(data)
        json_format.ParseDict(data, message, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, ValueError, TypeError) as exc:
        return _short(exc)
    return None


def _parse_json(body: bytes) -> tuple[ExportTraceServiceRequest, list[str]]:
    """Each resource, scope and span parsed on its own: a bad span is rejected alone."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise OtlpError(400, f"invalid JSON body: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise OtlpError(400, "invalid JSON body: not an object")
    message, rejected = ExportTraceServiceRequest(), []
    for raw_resource in _pop_list(data, "resourceSpans", "resource_spans"):
        raw_scopes = [
            (s, _pop_list(s, "spans")) for s in _pop_list(raw_resource, "scopeSpans", "scope_spans")
        ]
        resource_spans = message.resource_spans.add()
        if error := _parse_into(raw_resource, resource_spans):
            rejected += [f"invalid OTLP JSON resource: {error}"] * sum(
                len(spans) for _, spans in raw_scopes
            )
            del message.resource_spans[-1]
            continue
        for raw_scope, raw_spans in raw_scopes:
            scope_spans = resource_spans.scope_spans.add()
            if error := _parse_into(raw_scope, scope_spans):
                rejected += [f"invalid OTLP JSON scope: {error}"] * len(raw_spans)
                del resource_spans.scope_spans[-1]
                continue
            for raw_span in raw_spans:
                if error := _parse_into(raw_span, scope_spans.spans.add()):
                    rejected.append(f"invalid OTLP JSON span: {error}")
                    del scope_spans.spans[-1]
    return message, rejected


def parse_request(body: bytes, fmt: str) -> tuple[ExportTraceServiceRequest, list[str]]:
    """The request message and why each span that could not be read was left out; 400 when
    the body is not an export request at all."""
    return _parse_protobuf(body) if fmt == PROTOBUF else _parse_json(body)


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
