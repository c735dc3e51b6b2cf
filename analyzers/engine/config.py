"""The configuration file (docs/reference/contract.md section 5) as pydantic models."""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .limits import Limits


class Brand(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "Acme"
    title_suffix: str = " | Acme"


class KnownCustomer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    slug: str
    aliases: list[str] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)


class LLMConfig(BaseModel):
    """Where the judged analyzers find a model. The key itself lives in the env var named here."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "AUDITOR_LLM_API_KEY"
    timeout_s: float = 30.0
    max_concurrency: int = Field(default=4, ge=1)
    max_retries: int = Field(default=3, ge=0)
    # Optional, additive: backoff base for retries, and whether to ask for
    # `response_format: json_object` (some local servers reject it).
    backoff_base_s: float = Field(default=0.5, ge=0.0)
    json_mode: bool = True
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)

    @property
    def configured(self) -> bool:
        """True when both a base URL and a model are set."""
        return bool(self.base_url and self.model)


class OtelConfig(BaseModel):
    """OpenTelemetry ingestion: where the detail page links an audit's trace.

    `trace_url_template` is an absolute http(s) URL with `{trace_id}` (and optionally
    `{span_id}`), e.g. `https://phoenix.example/projects/default/traces/{trace_id}`.
    """

    model_config = ConfigDict(extra="forbid")

    trace_url_template: str | None = Field(default=None, max_length=2000)

    @field_validator("trace_url_template")
    @classmethod
    def _http_url_with_trace_id(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not re.match(r"^https?://[^/\s?#{}]+", value, re.IGNORECASE) or re.search(r"\s", value):
            raise ValueError("must be an absolute http:// or https:// URL")
        if "{trace_id}" not in value:
            raise ValueError("must contain {trace_id}")
        if set(re.findall(r"\{[^{}]*\}", value)) - {"{trace_id}", "{span_id}"}:
            raise ValueError("the only placeholders are {trace_id} and {span_id}")
        return value

    def trace_url(self, trace_id: str, span_id: str = "") -> str | None:
        """The link to a trace (ids are hex, so they need no quoting), or None."""
        if not self.trace_url_template:
            return None
        return self.trace_url_template.replace("{trace_id}", trace_id).replace("{span_id}", span_id)


class LinksConfig(BaseModel):
    """Link rules for the whole configuration (docs/reference/contract.md section 5)."""

    model_config = ConfigDict(extra="forbid")

    # a bare URL to a host that is not allowed is removed, or defanged (hxxps://evil[.]example)
    bare_urls: Literal["strip", "defang"] = "strip"


# The types of analyzers/engine/privacy/detect.py (the engine's package imports this module).
PrivacyType = Literal[
    "SECRET_API_KEY",
    "PII_CREDIT_CARD",
    "PII_IBAN",
    "PII_US_SSN",
    "PII_EMAIL",
    "PII_PHONE",
    "PII_IP_ADDRESS",
]


class PrivacyConfig(BaseModel):
    """What happens to the personal data and secrets found (docs/guides/privacy.md): `flag`
    leaves the text as it is, `redact` puts a placeholder in the cleaned response;
    `store: redacted` keeps the original out of the database (redacted before the first
    write). `detect`: the types redacted."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["flag", "redact"] = "flag"
    store: Literal["original", "redacted"] = "original"
    detect: list[PrivacyType] = Field(
        default_factory=lambda: [t for t in get_args(PrivacyType) if t != "PII_IP_ADDRESS"]
    )

    @field_validator("detect")
    @classmethod
    def _once_each(cls, types: list[str]) -> list[str]:
        return list(dict.fromkeys(types))

    @property
    def redacts_output(self) -> bool:
        """True when the cleaned response holds placeholders (stored redacted implies it)."""
        return bool(self.detect) and (self.action == "redact" or self.store == "redacted")

    @property
    def redacts_stored(self) -> bool:
        return bool(self.detect) and self.store == "redacted"


def is_valid_threshold(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value <= 1


# Keys of an analyzer's section that the auditor reads, not the analyzer's own settings.
AUDITOR_KEYS = frozenset({"enabled", "threshold"})


class AuditorConfig(BaseModel):
    """The whole configuration; `analyzers` maps analyzer id -> its settings plus `enabled`
    and, optionally, its own surfacing `threshold` (overriding the global one)."""

    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(default=0.3, ge=0.0, le=1.0)
    max_concurrency: int = Field(default=4, ge=1)
    analyzer_timeout_s: float = Field(default=10.0, gt=0)
    analyzers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    allowed_hosts: list[str] = Field(default_factory=list)
    brand: Brand = Field(default_factory=Brand)
    known_customers: list[KnownCustomer] = Field(default_factory=list)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    otel: OtelConfig = Field(default_factory=OtelConfig)
    # Optional, additive: bounded work per audit (see analyzers/engine/limits.py).
    limits: Limits = Field(default_factory=Limits)
    links: LinksConfig = Field(default_factory=LinksConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    # Audits older than this many days are erased (audits.store.erasure); None keeps them.
    retention_days: int | None = Field(default=None, ge=1, le=36500)

    @field_validator("analyzers")
    @classmethod
    def _valid_analyzer_thresholds(
        cls, analyzers: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        for analyzer_id, section in analyzers.items():
            value = section.get("threshold")
            if value is not None and not is_valid_threshold(value):
                raise ValueError(f"{analyzer_id}.threshold must be a number from 0 to 1")
        return analyzers

    def analyzer_section(self, analyzer_id: str) -> dict[str, Any]:
        """The settings of one analyzer, without the keys the auditor reads."""
        section = self.analyzers.get(analyzer_id, {})
        return {k: v for k, v in section.items() if k not in AUDITOR_KEYS}

    def threshold_for(self, analyzer_id: str) -> float:
        """The analyzer's own threshold when it has one, else the global threshold."""
        value = self.analyzers.get(analyzer_id, {}).get("threshold")
        return self.threshold if value is None else float(value)

    def with_options(self, options: dict[str, dict[str, Any]]) -> AuditorConfig:
        """This configuration with one audit's per-analyzer `options` merged in."""
        if not options:
            return self
        analyzers = dict(self.analyzers)
        for analyzer_id, overrides in options.items():
            analyzers[analyzer_id] = {**analyzers.get(analyzer_id, {}), **overrides}
        return self.model_copy(update={"analyzers": analyzers})

    def privacy_region(self) -> str:
        """The region of phone numbers without +country (the privacy analyzer's setting)."""
        region = self.analyzers.get("privacy", {}).get("default_region")
        return region.upper() if isinstance(region, str) and len(region) == 2 else "US"

    def is_enabled(self, analyzer_id: str, default: bool = True) -> bool:
        return bool(self.analyzers.get(analyzer_id, {}).get("enabled", default))
