"""OTLP/HTTP trace ingestion (`POST /v1/traces`): every LLM span becomes one audit.

- `decode`: the HTTP body (protobuf or JSON, gzip) to an `ExportTraceServiceRequest`,
  bounded in size;
- `spans`: OTLP spans to plain records, which ones are LLM calls (GenAI semantic
  conventions, OpenInference, OpenLLMetry) and what they said;
- `view`: the endpoint (ingest key, limits, OTLP responses) storing audits through
  `audits.services.submit_audit`.
"""
