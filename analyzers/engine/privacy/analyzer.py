"""The `privacy` analyzer: personal data and secrets in the response and in the user input.

Each finding is an annotation with its evidence; findings in the response carry their
offsets there, findings in the user input say where they are in their label and in
`supplementary.findings` (the annotation offsets are the response's, by contract).
Scored as the red flags are: 1.0 when any finding is critical, else findings combine as
independent risks, 0.4 per warning and 0.1 per info (one card surfaces, e-mails alone rarely).
"""

from __future__ import annotations

from typing import get_args

from pydantic import Field

from ..base import Analyzer, AnalyzerSettings, AuditContext
from ..builtin.redflag import score_annotations
from ..config import PrivacyType
from ..contract import AnalyzerResult, Annotation, AuditInput, Severity
from . import detect as d
from .keys import KIND_LABELS
from .redaction import placeholder_findings

LABELS = {
    d.SECRET_API_KEY: "Secret",
    d.PII_CREDIT_CARD: "Payment card number",
    d.PII_IBAN: "IBAN",
    d.PII_US_SSN: "US social security number",
    d.PII_EMAIL: "E-mail address",
    d.PII_PHONE: "Phone number",
    d.PII_IP_ADDRESS: "IP address",
}


class PrivacySettings(AnalyzerSettings):
    detect: list[PrivacyType] = Field(
        default_factory=lambda: [t for t in get_args(PrivacyType) if t in d.DEFAULT_TYPES],
        description="The types looked for (PII_IP_ADDRESS is off unless listed)",
    )
    default_region: str = Field(
        default="US",
        min_length=2,
        max_length=2,
        description="Region (ISO 3166 code) of phone numbers written without a +country code",
    )
    scan_user_input: bool = Field(default=True, description="Look in the user input too")
    max_findings: int = Field(
        default=100, ge=1, le=10000, description="Findings per audit; the scan stops there"
    )
    secret_severity: Severity = Field(default="critical", description="Severity of SECRET_API_KEY")
    card_severity: Severity = Field(default="warning", description="Severity of PII_CREDIT_CARD")
    iban_severity: Severity = Field(default="warning", description="Severity of PII_IBAN")
    ssn_severity: Severity = Field(default="warning", description="Severity of PII_US_SSN")
    email_severity: Severity = Field(default="info", description="Severity of PII_EMAIL")
    phone_severity: Severity = Field(default="info", description="Severity of PII_PHONE")
    ip_severity: Severity = Field(default="info", description="Severity of PII_IP_ADDRESS")

    def severity(self, type_: str) -> Severity:
        return {
            d.SECRET_API_KEY: self.secret_severity,
            d.PII_CREDIT_CARD: self.card_severity,
            d.PII_IBAN: self.iban_severity,
            d.PII_US_SSN: self.ssn_severity,
            d.PII_EMAIL: self.email_severity,
            d.PII_PHONE: self.phone_severity,
            d.PII_IP_ADDRESS: self.ip_severity,
        }[type_]


class PrivacyAnalyzer(Analyzer):
    id = "privacy"
    category = "privacy"
    description = (
        "Personal data and secrets in the response and the user input: e-mail addresses, "
        "phone numbers, Luhn-valid card numbers, checksum-valid IBANs, US SSNs, IP "
        "addresses (off by default) and API keys, private keys and JSON Web Tokens."
    )
    Settings = PrivacySettings
    annotation_types = d.TYPES

    def never_waits(self, settings: PrivacySettings, context: AuditContext) -> bool:
        return True

    async def analyze(
        self, audit: AuditInput, settings: PrivacySettings, context: AuditContext
    ) -> AnalyzerResult:
        return self.scan(audit, settings, redacted=context.config.privacy.redacts_stored)

    def scan(
        self, audit: AuditInput, settings: PrivacySettings, *, redacted: bool = False
    ) -> AnalyzerResult:
        """The result for `audit` (synchronous: no I/O). `redacted`: the texts were stored
        redacted (`privacy.store`), so their placeholders are findings too."""
        region = settings.default_region.upper()
        limit = settings.max_findings
        in_response, truncated = _found(audit.response, settings, region, limit, redacted)
        in_input: list[d.Finding] = []
        if settings.scan_user_input and not truncated and audit.user_input:
            in_input, truncated = _found(
                audit.user_input, settings, region, limit - len(in_response), redacted
            )
        annotations = [_annotation(f, settings, "response") for f in in_response]
        annotations += [_annotation(f, settings, "user_input") for f in in_input]
        score = score_annotations(annotations)
        counts: dict[str, int] = {}
        for annotation in annotations:
            counts[annotation.type] = counts.get(annotation.type, 0) + 1
        return self.result(
            score=score,
            annotations=annotations,
            should_surface=any(a.severity == "critical" for a in annotations),
            supplementary={
                "summary": _summary(counts),
                "counts": counts,
                "findings": [
                    {"type": f.type, "where": where, "start": f.start, "end": f.end}
                    for where, found in (("response", in_response), ("user_input", in_input))
                    for f in found
                ],
                "truncated": truncated,
            },
        )


def _found(
    text: str, settings: PrivacySettings, region: str, limit: int, redacted: bool
) -> tuple[list[d.Finding], bool]:
    found, truncated = d.detect(text, settings.detect, region=region, limit=limit)
    if redacted:
        found = sorted(found + placeholder_findings(text, settings.detect), key=lambda f: f.start)
        truncated = truncated or len(found) > limit
        found = found[:limit]
    return found, truncated


def _annotation(finding: d.Finding, settings: PrivacySettings, where: str) -> Annotation:
    label = LABELS[finding.type]
    if finding.kind == "redacted":
        label = f"{label} (redacted before it was stored)"
    elif finding.type == d.SECRET_API_KEY:
        label = KIND_LABELS.get(finding.kind, label)
    elif finding.kind and finding.type in (d.PII_CREDIT_CARD, d.PII_IBAN):
        label = f"{label} ({finding.kind})"
    in_response = where == "response"
    place = "the response" if in_response else "the user input"
    return Annotation(
        type=finding.type,
        label=label if in_response else f"{label} in the user input",
        severity=settings.severity(finding.type),
        description=f"{label} in {place}, characters {finding.start}-{finding.end}.",
        evidence=finding.evidence,
        start=finding.start if in_response else None,
        end=finding.end if in_response else None,
    )


def _summary(counts: dict[str, int]) -> str:
    if not counts:
        return "No personal data or secret found."
    parts = [f"{count} × {LABELS[type_].lower()}" for type_, count in counts.items()]
    return "Found: " + ", ".join(parts) + "."
