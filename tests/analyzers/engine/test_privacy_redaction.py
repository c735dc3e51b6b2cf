"""`privacy.action: redact`: each finding in the cleaned response becomes its placeholder, in
the batch audit and in every streamed chunk alike (the stream still joins to the batch
text), and a placeholder never forms a link with what follows it."""

from __future__ import annotations

import dataclasses
from typing import get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from rendering import problems
from test_privacy import SECRETS
from test_safe_output_property import ALLOWED, STRIP, responses

from analyzers.engine.auditor import Auditor
from analyzers.engine.config import AuditorConfig, PrivacyType
from analyzers.engine.contract import AuditInput
from analyzers.engine.guardrails.settings import settings_from_config
from analyzers.engine.guardrails.stream import BoundedStream, InlineStreamAuditor, audit_text
from analyzers.engine.privacy.detect import DEFAULT_TYPES, TYPES
from analyzers.engine.privacy.redaction import redact_text

CARD = "4242 4242 4242 4242"
KEY = SECRETS["openai"]
REDACT = dataclasses.replace(STRIP, redact=tuple(TYPES))
RAW = [
    CARD,
    KEY,
    "jane.doe@acme.example",
    "+1 415-555-2671",
    "DE89 3704 0044 0532 0130 00",
    "123-45-6789",
]


def _streamed(text: str, settings_, cut: int) -> list[str]:
    auditor = InlineStreamAuditor(settings_)
    pieces = [p.text for i in range(0, len(text), cut) for p in auditor.feed(text[i : i + cut])]
    return pieces + [p.text for p in auditor.finish()]


def test_redact_replaces_each_finding_by_its_placeholder():
    text = (
        f"Card {CARD}, key {KEY}.\n\nMail jane.doe@acme.example or call +1 415-555-2671."
        "\n\nIBAN DE89 3704 0044 0532 0130 00, SSN 123-45-6789."
    )
    cleaned = audit_text(text, REDACT).cleaned_response
    assert cleaned == (
        "Card [CARD], key [SECRET].\n\nMail [EMAIL] or call [PHONE].\n\nIBAN [IBAN], SSN [SSN]."
    )


def test_flag_leaves_the_cleaned_response_alone():
    text = f"Card {CARD} and key {KEY}."
    assert audit_text(text, STRIP).cleaned_response == text


@pytest.mark.parametrize("cut", [1, 3, 7, 40])
def test_every_streamed_chunk_is_redacted_and_the_stream_joins_to_the_batch_text(cut):
    text = f"Intro.\n\nThe card is {CARD}\nand the key {KEY}.\n\n```\n{KEY}\n```\nEnd {CARD}"
    pieces = _streamed(text, REDACT, cut)
    assert "".join(pieces) == audit_text(text, REDACT).cleaned_response
    for piece in pieces:
        assert CARD not in piece and KEY not in piece


@pytest.mark.parametrize(
    "after",
    [
        "(javascript:alert(1))",
        "(https://evil.example/x)",
        "[ref]\n\n[ref]: https://evil.example/",
        ": https://evil.example",
    ],
)
def test_a_placeholder_never_forms_a_link_with_what_follows(after):
    text = f"write to jane.doe@acme.example{after}"
    cleaned = audit_text(text, REDACT).cleaned_response
    assert "jane.doe" not in cleaned
    assert problems(cleaned, ALLOWED) == [], cleaned


@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(text=responses, secret=st.sampled_from(RAW), cut=st.integers(1, 50))
def test_redacted_output_is_safe_holds_no_finding_and_streams_as_batch(text, secret, cut):
    text = f"{secret}({text}) {secret}\n\n{text}"
    cleaned = audit_text(text, REDACT).cleaned_response
    assert problems(cleaned, ALLOWED) == [], repr((text, cleaned))
    assert redact_text(cleaned, TYPES) == cleaned  # nothing left to find
    assert "".join(_streamed(text, REDACT, cut)) == cleaned
    bounded = BoundedStream(InlineStreamAuditor(REDACT), 30)
    joined = [p.text for p in bounded.feed(text)] + [p.text for p in bounded.finish()]
    assert "".join(joined) == audit_text(bounded.text(), REDACT).cleaned_response


@pytest.mark.parametrize("privacy", [{"action": "redact"}, {"store": "redacted"}])
async def test_the_auditor_passes_on_the_redacted_text(privacy):
    config = AuditorConfig.model_validate({"privacy": privacy})
    assert settings_from_config(config).redact
    report = await Auditor(config).audit(AuditInput(response=f"Key: {KEY}", user_input="q"))
    assert report.cleaned_response == "Key: [SECRET]"
    # with no analyzer cleaning the text, the response passed on is still redacted
    off = {k: {"enabled": False} for k in ("links", "grounding", "prompt_leak")}
    config = AuditorConfig.model_validate({"privacy": privacy, "analyzers": off})
    report = await Auditor(config).audit(AuditInput(response=f"Key: {KEY}", user_input="q"))
    assert report.cleaned_response == "Key: [SECRET]"


def test_the_privacy_section_is_validated_and_defaults_to_flag():
    default = AuditorConfig().privacy
    assert get_args(PrivacyType) == TYPES and tuple(default.detect) == DEFAULT_TYPES
    assert (default.action, default.store) == ("flag", "original")
    assert "PII_IP_ADDRESS" not in default.detect
    assert not settings_from_config(AuditorConfig()).redact
    for bad in (
        {"action": "erase"},
        {"store": "nowhere"},
        {"detect": ["PII_SHOE_SIZE"]},
        {"unknown": 1},
    ):
        with pytest.raises(ValidationError):
            AuditorConfig.model_validate({"privacy": bad})
    with pytest.raises(ValidationError):
        AuditorConfig.model_validate({"retention_days": 0})
