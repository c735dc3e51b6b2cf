"""Personal data and secrets in one text: every finding with its type, offsets and evidence.

Each type's detector scans the text once; types run in a fixed order (secrets first, then
the checksummed numbers, then e-mail, phone and IP) and a finding that overlaps an earlier
one is dropped, so a card number is never also a phone number. `limit` stops the scan
after that many findings (the analyzer's bound); redaction scans without one.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from . import keys, pii
from .scan import Scan

SECRET_API_KEY = "SECRET_API_KEY"
PII_CREDIT_CARD = "PII_CREDIT_CARD"
PII_IBAN = "PII_IBAN"
PII_US_SSN = "PII_US_SSN"
PII_EMAIL = "PII_EMAIL"
PII_PHONE = "PII_PHONE"
PII_IP_ADDRESS = "PII_IP_ADDRESS"

# Every type, in the order the detectors run (earlier types win overlaps).
TYPES: tuple[str, ...] = (
    SECRET_API_KEY,
    PII_CREDIT_CARD,
    PII_IBAN,
    PII_US_SSN,
    PII_EMAIL,
    PII_PHONE,
    PII_IP_ADDRESS,
)
DEFAULT_TYPES: tuple[str, ...] = tuple(t for t in TYPES if t != PII_IP_ADDRESS)

# What a redacted finding becomes.
PLACEHOLDERS = {
    SECRET_API_KEY: "[SECRET]",
    PII_CREDIT_CARD: "[CARD]",
    PII_IBAN: "[IBAN]",
    PII_US_SSN: "[SSN]",
    PII_EMAIL: "[EMAIL]",
    PII_PHONE: "[PHONE]",
    PII_IP_ADDRESS: "[IP]",
}


# The fewest digits a finding of each type holds: a text with fewer skips the type's scan.
MIN_DIGITS = {PII_CREDIT_CARD: 13, PII_IBAN: 2, PII_US_SSN: 9, PII_PHONE: 7, PII_IP_ADDRESS: 1}


@dataclass(frozen=True, slots=True)
class Finding:
    """One piece of personal data or one secret: `text[start:end]` is the evidence, `kind`
    says more (the card network, the IBAN's country, the key's issuer)."""

    type: str
    start: int
    end: int
    evidence: str
    kind: str


_DETECTORS: dict[str, Callable[[Scan], Iterator[tuple[int, int, str]]]] = {
    SECRET_API_KEY: keys.find_keys,
    PII_CREDIT_CARD: pii.find_cards,
    PII_IBAN: pii.find_ibans,
    PII_US_SSN: pii.find_ssns,
    PII_EMAIL: pii.find_emails,
    PII_IP_ADDRESS: pii.find_ips,
}


def detect(
    text: str, types: Iterable[str] = DEFAULT_TYPES, *, region: str = "US", limit: int | None = None
) -> tuple[list[Finding], bool]:
    """The findings of `types` in `text`, in text order, and whether `limit` cut the scan."""
    wanted = set(types)
    scan = Scan(text)
    starts: list[int] = []  # the kept findings' spans, sorted, for the overlap check
    ends: list[int] = []
    findings: list[Finding] = []

    def taken(start: int, end: int) -> bool:
        i = bisect.bisect_right(starts, start)
        return bool((i and ends[i - 1] > start) or (i < len(starts) and starts[i] < end))

    for type_ in TYPES:
        if type_ not in wanted or scan.digits < MIN_DIGITS.get(type_, 0):
            continue
        if type_ == PII_PHONE:
            found = pii.find_phones(scan, region, taken)
        else:
            found = _DETECTORS[type_](scan)
        for start, end, kind in found:
            if taken(start, end):
                continue
            i = bisect.bisect_right(starts, start)
            starts.insert(i, start)
            ends.insert(i, end)
            findings.append(Finding(type_, start, end, text[start:end], kind))
            if limit is not None and len(findings) >= limit:
                findings.sort(key=lambda f: f.start)
                return findings, True
    findings.sort(key=lambda f: f.start)
    return findings, False


def redact(text: str, findings: Iterable[Finding]) -> str:
    """`text` with each finding (non-overlapping, in text order) replaced by its
    placeholder."""
    parts = []
    pos = 0
    for finding in findings:
        parts.append(text[pos : finding.start])
        parts.append(PLACEHOLDERS[finding.type])
        pos = finding.end
    parts.append(text[pos:])
    return "".join(parts)
