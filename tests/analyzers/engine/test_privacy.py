"""The privacy analyzer: personal data and secrets found in the response and in the user
input, each with its evidence; look-alikes (numbers failing their checksum, invalid
ranges, key-shaped prose) are not flagged."""

from __future__ import annotations

import base64
import json
import random
import time

import pytest
from pydantic import ValidationError

from analyzers.engine.auditor import Auditor
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AuditInput
from analyzers.engine.privacy.analyzer import PrivacyAnalyzer
from analyzers.engine.privacy.detect import TYPES, detect, redact
from analyzers.engine.registry import build_registry

ALL = list(TYPES)
_RNG = random.Random(0)


def _b64(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


# Secrets are put together at run time so that no complete key sits in the repository.
# The AWS key id is the documented example of the AWS IAM user guide; the JWT header and
# payload are jwt.io's example; the others are made-up bodies in each issuer's format.
SECRETS = {
    "openai": "sk-" + "proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f",
    "openai_legacy": "sk-" + "T3BlbkFJ" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "github": "ghp" + "_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "github_pat": "github" + "_pat_" + "11ABCDEFG0" + "a1B2c3D4e5F6g7H8i9J0_" + "x" * 51 + "9" * 10,
    "slack": "xox" + "b-" + "123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "stripe": "sk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "google": "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "private_key": "-----BEGIN " + "RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq7BFUpkGp3+LQmlQ\nYx2Zk"
    "Q==\n-----END RSA PRIVATE KEY-----",
    "jwt": _b64({"alg": "HS256", "typ": "JWT"})
    + "."
    + _b64({"sub": "1234567890", "name": "John Doe", "iat": 1516239022})
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
}

VALID = [
    # Stripe's test cards (docs.stripe.com/testing), one per network.
    ("PII_CREDIT_CARD", "4242 4242 4242 4242"),  # Visa
    ("PII_CREDIT_CARD", "5555-5555-5555-4444"),  # Mastercard
    ("PII_CREDIT_CARD", "2223003122003222"),  # Mastercard, 2-series
    ("PII_CREDIT_CARD", "3782 822463 10005"),  # American Express
    ("PII_CREDIT_CARD", "6011 1111 1111 1117"),  # Discover
    ("PII_CREDIT_CARD", "3566 0020 2036 0505"),  # JCB
    ("PII_CREDIT_CARD", "3056 9309 0259 04"),  # Diners Club
    ("PII_CREDIT_CARD", "6200 0000 0000 0005"),  # UnionPay
    # Example IBANs of the SWIFT IBAN registry (printed and compact forms).
    ("PII_IBAN", "GB82 WEST 1234 5698 7654 32"),
    ("PII_IBAN", "DE89370400440532013000"),
    ("PII_IBAN", "FR14 2004 1010 0505 0001 3M02 606"),
    ("PII_IBAN", "NL91 ABNA 0417 1643 00"),
    # SSNs in the ranges the SSA issues.
    ("PII_US_SSN", "536-22-1234"),
    ("PII_US_SSN", "536 22 1234"),
    ("PII_EMAIL", "jane.doe+audit@mail.example.co.uk"),
    # Google's public switchboard; Ofcom's drama range (020 7946 0xxx); 555-01xx is
    # reserved for fiction by the North American Numbering Plan.
    ("PII_PHONE", "+1 650-253-0000"),
    ("PII_PHONE", "(202) 555-0173"),
    ("PII_PHONE", "+44 20 7946 0958"),
    *(("SECRET_API_KEY", key) for key in SECRETS.values()),
]

LOOK_ALIKES = [
    "Order 4242 4242 4242 4241 ships today.",  # fails the Luhn check
    "Your order number is 1234 5678 9012 3456.",  # fails the Luhn check
    "Reference 0000 0000 0000 0000.",  # Luhn-valid, but no card network's range
    "Tracking 42424242424242424242 (20 digits: no card inside).",
    "Pay to GB83 WEST 1234 5698 7654 32.",  # an IBAN with a wrong check digit
    "Account DE88370400440532013000.",  # an IBAN with a wrong check digit
    "Numbers 000-12-3456, 666-12-3456, 912-34-5678, 536-00-1234, 536-22-0000.",
    "The Woolworth wallet card number 078-05-1120 was voided.",
    "Parts 1-536-22-1234 and 536-22-1234-9 are longer numbers.",
    "Write to user@localhost or @handle, not a@b.",
    "On 2024-01-15 at 10:30 we shipped 1234567 units, version 1.2.3.4.",
    "sk-learn-is-a-library-for-machine-learning-in-python",  # no digits: prose
    "AKIA1234567890ABCDE is one character short.",
    "sk" + "_test_" + "4eC39HqLyjWDarjtT1zdp7dc is a test key.",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
    _b64({"typ": "JWT", "kid": "1"}) + "." + _b64({"sub": "1"}) + ".c2lnbmF0dXJl",  # no "alg"
]


def run(response: str = "", user_input: str = "", **settings):
    analyzer = PrivacyAnalyzer()
    return analyzer.scan(
        AuditInput(user_input=user_input, response=response), analyzer.parse_settings(settings)
    )


@pytest.mark.parametrize(("kind", "value"), VALID)
def test_it_finds_each_valid_value_in_the_response_with_its_offsets(kind, value):
    response = f"Here it is: {value}. Anything else?"
    result = run(response)
    [annotation] = result.annotations
    assert annotation.type == kind
    assert annotation.evidence == value
    assert response[annotation.start : annotation.end] == value


@pytest.mark.parametrize(("kind", "value"), VALID)
def test_it_finds_each_valid_value_in_the_user_input(kind, value):
    user_input = f"My details: {value}\nplease keep them."
    result = run("No personal data here.", user_input)
    [annotation] = result.annotations
    assert (annotation.type, annotation.evidence) == (kind, value)
    assert annotation.start is None and "user input" in annotation.label
    [found] = result.supplementary["findings"]
    assert found["where"] == "user_input"
    assert user_input[found["start"] : found["end"]] == value


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_are_not_flagged_in_either_position(text):
    result = run(text, text)
    assert result.annotations == [], [(a.type, a.evidence) for a in result.annotations]
    assert result.score == 0.0


def test_severities_follow_the_defaults_and_the_settings():
    text = f"{SECRETS['aws']} 4242424242424242 jane@example.com +1 650-253-0000"
    severities = {a.type: a.severity for a in run(text).annotations}
    assert severities == {
        "SECRET_API_KEY": "critical",
        "PII_CREDIT_CARD": "warning",
        "PII_EMAIL": "info",
        "PII_PHONE": "info",
    }
    result = run(text, card_severity="critical", secret_severity="warning")
    severities = {a.type: a.severity for a in result.annotations}
    assert severities["PII_CREDIT_CARD"] == "critical"
    assert severities["SECRET_API_KEY"] == "warning"


def test_a_secret_surfaces_and_an_email_alone_does_not():
    secret = run(f"Use {SECRETS['stripe']} for payments.")
    assert secret.should_surface and secret.score == 1.0
    email = run("Write to jane@example.com.")
    assert not email.should_surface and email.score < 0.3


def test_ip_addresses_are_looked_for_only_when_listed():
    text = "Server 8.8.8.8 and 2001:4860:4860::8888, office 192.168.1.10 and 127.0.0.1."
    assert run(text).annotations == []
    found = [a.evidence for a in run(text, detect=ALL).annotations]
    assert found == ["8.8.8.8", "2001:4860:4860::8888"]  # private and loopback name no one


def test_detect_lists_the_types_looked_for():
    text = "jane@example.com 4242424242424242"
    assert [a.type for a in run(text, detect=["PII_EMAIL"]).annotations] == ["PII_EMAIL"]
    with pytest.raises(ValidationError):
        PrivacyAnalyzer().parse_settings({"detect": ["PII_SHOE_SIZE"]})


def test_the_phone_region_reads_national_numbers():
    assert run("Call 020 7946 0958.").annotations == []  # not a US number
    [phone] = run("Call 020 7946 0958.", default_region="GB").annotations
    assert phone.evidence == "020 7946 0958"


def test_a_number_found_as_a_card_is_not_also_a_phone_number():
    found = detect("4242 4242 4242 4242 and 536-22-1234", ALL)[0]
    assert [(f.type, f.evidence) for f in found] == [
        ("PII_CREDIT_CARD", "4242 4242 4242 4242"),
        ("PII_US_SSN", "536-22-1234"),
    ]


def test_offsets_count_characters_in_non_ascii_text():
    text = "Grüße — ✓ écrivez à jane@exemple.fr ou payez avec 4242424242424242 ✓"
    for finding in detect(text, ALL)[0]:
        assert text[finding.start : finding.end] == finding.evidence
    assert len(detect(text, ALL)[0]) == 2


def test_findings_per_audit_are_capped():
    response = " ".join(f"user{i}@example.com" for i in range(40))
    result = run(response, "me@example.com", max_findings=5)
    assert len(result.annotations) == 5
    assert result.supplementary["truncated"] is True
    assert len(run(response, "me@example.com").annotations) == 41


def test_redaction_replaces_each_finding_with_its_placeholder():
    text = f"Mail jane@example.com, card 4242 4242 4242 4242, key {SECRETS['github']}."
    findings, _ = detect(text, ALL)
    assert redact(text, findings) == "Mail [EMAIL], card [CARD], key [SECRET]."


@pytest.mark.parametrize(
    "text",
    [
        "1 " * 100_000,  # digits everywhere, never a number
        "4" * 200_000,  # one digit run far longer than any card
        "a" * 200_000 + "@" + "b." * 50_000,  # a huge local part and domain
        "GB82" * 50_000,  # IBAN starts back to back
        "-----BEGIN RSA PRIVATE KEY-----\n" + "A" * 200_000,  # a key without its END line
        "eyJ" + "a" * 5000 + "." * 50_000,  # a token that never completes
        "5" * 12 + " -" * 50_000,  # separators without digits
        # phone-like runs, each different (the matcher's results are cached per run)
        " ".join(str(_RNG.randrange(10, 100)) for _ in range(70_000)),
    ],
)
def test_hostile_texts_take_bounded_time(text):
    started = time.perf_counter()
    detect(text, ALL)
    assert time.perf_counter() - started < 2.0


async def test_the_auditor_runs_privacy_as_a_built_in():
    auditor = Auditor(AuditorConfig(), build_registry(include_entry_points=False))
    report = await auditor.audit(
        AuditInput(user_input="Hi", response=f"Your key is {SECRETS['aws']}.")
    )
    [privacy] = [r for r in report.results if r.analyzer_id == "privacy"]
    assert privacy.status == "ok" and privacy.surfaced
    assert [a.evidence for a in privacy.annotations] == [SECRETS["aws"]]
