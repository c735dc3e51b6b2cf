"""Helpers of the OTLP tests: real SDK spans, encoded as the OTLP exporters encode them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from opentelemetry.exporter.otlp.json.common._internal.trace_encoder import (
    encode_spans as encode_json,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def record(build: Callable[[Any], None], service: str = "checkout-bot") -> list:
    """Finished SDK spans of whatever `build(tracer)` does."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    build(provider.get_tracer("tests"))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def proto_body(spans: list) -> bytes:
    return encode_proto(spans).SerializeToString()


def json_body(spans: list) -> bytes:
    return encode_json(spans).to_json().encode()


def genai_chat(
    tracer,
    *,
    question="Which retailers use Acme?",
    answer="Acme is easy to set up.",
    model="gpt-4o-mini",
    name="chat gpt-4o-mini",
    extra: dict | None = None,
) -> None:
    """One GenAI-semconv chat span with its messages as span attributes."""
    with tracer.start_as_current_span(name) as span:
        span.set_attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": model,
                "gen_ai.response.model": model,
                "gen_ai.usage.input_tokens": 12,
                "gen_ai.usage.output_tokens": 34,
                "gen_ai.input.messages": json.dumps(
                    [
                        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
                        {"role": "user", "parts": [{"type": "text", "content": question}]},
                    ]
                ),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": answer}],
                            "finish_reason": "stop",
                        },
                    ]
                ),
                **(extra or {}),
            }
        )


def retriever(tracer, title: str, text: str) -> None:
    with tracer.start_as_current_span("retrieve") as span:
        span.set_attributes(
            {
                "openinference.span.kind": "RETRIEVER",
                "retrieval.documents.0.document.id": title,
                "retrieval.documents.0.document.content": text,
                "retrieval.documents.0.document.metadata": json.dumps(
                    {"title": title, "url": f"https://www.acme.example/{title}"}
                ),
            }
        )


def rag_trace(tracer, titles=("kb-1",), question="Who uses Acme?") -> None:
    """One trace: a root, its retrievals, then the LLM call."""
    with tracer.start_as_current_span("rag"):
        for title in titles:
            retriever(tracer, title, f"{title}: Decathlon grew conversion by 50%.")
        genai_chat(tracer, question=question, answer="Decathlon does.")


def split(spans: list) -> tuple[list, list, list]:
    """(retrieval spans, LLM spans, the others) of recorded spans (to export apart)."""
    kind = {"RETRIEVER": 0, "chat": 1}
    parts: tuple[list, list, list] = ([], [], [])
    for span in spans:
        attrs = span.attributes or {}
        key = attrs.get("openinference.span.kind") or attrs.get("gen_ai.operation.name")
        parts[kind.get(key, 2)].append(span)
    return parts
