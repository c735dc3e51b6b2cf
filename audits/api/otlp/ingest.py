"""One export request's spans to audits, in bulk: one audit per LLM span.

The spans are classified once; the LLM spans become submissions together and are stored
by `submit.submit_audits_once` (the batch path of `POST /api/audits/batch`): one query for
the external ids already stored, one insert, one transaction, analyses enqueued on
commit. Retrieval documents are joined per trace, across requests too (`traces`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from django.conf import settings
from django.db import transaction
from pydantic import ValidationError

from analyzers.config_store import load_config
from analyzers.engine.contract import Source
from audits.api.otlp import spans, traces
from audits.intake import submit
from audits.intake.redaction import redact_sources, stored_redaction
from audits.intake.schemas import AuditIn

MAX_MESSAGES = 5  # distinct rejection reasons quoted in partial_success.error_message


def limits() -> spans.Limits:
    chars = int(getattr(settings, "AUDITOR_OTLP_MAX_TEXT_CHARS", 200_000))
    return spans.Limits(max_text_chars=chars)


@dataclass
class Outcome:
    created: int = 0
    duplicates: int = 0
    ignored: int = 0
    rejected: int = 0
    late: traces.Late = field(default_factory=traces.Late)
    reasons: dict[str, int] = field(default_factory=dict)

    def reject(self, reason: str) -> None:
        self.rejected += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def message(self) -> str:
        if not self.rejected:
            return ""
        top = sorted(self.reasons.items(), key=lambda kv: -kv[1])[:MAX_MESSAGES]
        return f"{self.rejected} span(s) rejected: " + "; ".join(f"{r} ({n})" for r, n in top)


def _unstorable(user_input: str, response: str, sources: list, metadata: dict) -> str | None:
    """Why these fields cannot be stored (what `POST /api/audits` refuses: NUL characters,
    lone surrogates, NaN, invalid sources), else None."""
    try:
        for source in sources:
            Source.model_validate(source)
        AuditIn.model_validate(
            {
                "user_input": user_input,
                "response": response,
                "sources": sources,
                "metadata": metadata,
            }
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        return f"invalid audit: {error['msg'].removeprefix('Value error, ')}"[:300]
    return None


def _readable(retrieved: list[spans.Retrieved], outcome: Outcome) -> list[spans.Retrieved]:
    """The retrievals whose documents can be stored; the others rejected."""
    kept = []
    for item in retrieved:
        if reason := _unstorable("", "", item.sources, {}):
            outcome.reject(f"retrieval span: {reason}")
        else:
            kept.append(item)
    return kept


def ingest(request_message, api_key) -> Outcome:
    """Store one audit per LLM span of an export request (see the module docstring)."""
    bounds = limits()
    outcome = Outcome()
    llm, retrieval = [], []
    for span, error in spans.iter_spans(request_message):
        if span is None:
            outcome.reject(error)
            continue
        kind = spans.kind_of(span)
        if kind == "llm":
            llm.append(span)
        elif kind == "retrieval":
            retrieval.append(span)
        else:
            outcome.ignored += 1
    retrieved, errors = spans.retrievals(retrieval, bounds)
    for _, error in errors:
        outcome.reject(error)
    retrieved = _readable(retrieved, outcome)
    redact = stored_redaction(load_config())
    if redact is not None:  # the documents are remembered (TraceDocuments) as stored
        retrieved = [replace(r, sources=redact_sources(r.sources, redact)) for r in retrieved]
    outcome.ignored += len(retrieved)
    by_trace = traces.recall(api_key, {span.trace_id for span in llm})
    for item in retrieved:
        by_trace.setdefault(item.trace_id, []).append(item)
    calls = []
    for span in llm:
        try:
            call = spans.llm_call(span, by_trace.get(span.trace_id, []), bounds)
        except spans.MalformedSpan as exc:
            outcome.reject(str(exc))
            continue
        if call is None:
            outcome.ignored += 1
        elif reason := _unstorable(call.user_input, call.response, call.sources, call.metadata):
            outcome.reject(reason)
        else:
            calls.append(call)
    # One transaction for the request: one commit (and, with a database queue, one
    # write) for all its audits; the analyses are enqueued when it commits.
    with transaction.atomic():
        if calls:
            results = submit.submit_audits_once(
                [
                    {
                        "user_input": c.user_input,
                        "response": c.response,
                        "sources": c.sources,
                        "metadata": {k: v for k, v in c.metadata.items() if v is not None},
                        "external_id": c.external_id,
                    }
                    for c in calls
                ],
                api_key=api_key,
            )
            for result in results:
                # An ExternalIdConflict: the same span sent again in another grouping
                # (other sources); it is stored already.
                if getattr(result, "was_created", False):
                    outcome.created += 1
                else:
                    outcome.duplicates += 1
        traces.remember(api_key, retrieved)
        outcome.late = traces.join_late(api_key, retrieved, bounds)
    return outcome


__all__ = ["Outcome", "ingest", "limits"]
