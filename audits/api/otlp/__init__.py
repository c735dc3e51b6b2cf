"""OTLP/HTTP trace ingestion (`POST /v1/traces`): every LLM span becomes one audit.

- `decode`: the HTTP body (protobuf or JSON, gzip) to an `ExportTraceServiceRequest`,
  bounded in size;
- `spans`: OTLP spans to plain records, which ones are LLM calls (GenAI semantic
  conventions, OpenInference, OpenLLMetry) and what they said;
- `ingest`: a request's LLM spans to audits in bulk (`audits.intake.submit.submit_audits_once`);
- `traces`: retrieval documents joined to LLM spans of their trace across requests;
- `view`: the endpoint (ingest key, limits, OTLP responses).
"""
