"""The red-flag analyzer: every code, edge cases, and properties over any input."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.engine.base import AuditContext
from analyzers.engine.builtin.redflag import (
    RedflagAnalyzer,
    RedflagSettings,
    content_digest,
    has_path,
    parse_json_output,
    score_annotations,
)
from analyzers.engine.collisions import InMemoryCollisionStore
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AuditInput

ANALYZER = RedflagAnalyzer()


def run(response: str, context: AuditContext | None = None, **settings):
    ctx = context or AuditContext(config=AuditorConfig(), collision_key="k")
    return asyncio.run(
        ANALYZER.analyze(AuditInput(response=response), RedflagSettings(**settings), ctx)
    )


def codes(result) -> list[str]:
    return [a.type for a in result.annotations]


def test_defaults_are_the_maker_preset():
    s = RedflagSettings()
    assert (s.max_chars, s.max_tokens, s.token_spike_threshold) == (3000, 750, 700)


def test_clean_text_has_no_flags_and_scores_zero():
    result = run("Canberra is the capital of Australia.")
    assert result.annotations == []
    assert result.score == 0.0
    assert result.supplementary["stats"] == {"chars": 37, "tokens": 6, "is_spike": False}


@pytest.mark.parametrize("text", ["", "   ", "\n\t  \n"])
def test_it_flags_empty_output_as_critical(text):
    result = run(text)
    assert codes(result) == ["EMPTY_OUTPUT"]
    assert result.score == 1.0


def test_it_flags_too_many_chars_only_above_the_limit():
    assert "TOO_MANY_CHARS" not in codes(run("a" * 3000))
    assert "TOO_MANY_CHARS" in codes(run("a" * 3001))
    assert "TOO_MANY_CHARS" in codes(run("abcdef", max_chars=5))


def test_it_flags_too_many_tokens_by_whitespace_split():
    assert "TOO_MANY_TOKENS" not in codes(run("w " * 750))
    result = run("w " * 751)
    assert "TOO_MANY_TOKENS" in codes(result)
    assert result.supplementary["stats"]["tokens"] == 751


def test_it_flags_a_token_spike_even_under_max_tokens():
    result = run("w " * 701)
    assert codes(result) == ["TOKEN_LENGTH_SPIKE"]
    assert result.supplementary["stats"]["is_spike"] is True
    assert result.score < 0.3  # an info flag alone does not surface


def test_limits_can_be_switched_off():
    assert (
        codes(run("w " * 5000, max_chars=None, max_tokens=None, token_spike_threshold=None)) == []
    )


def test_json_is_only_checked_when_required():
    assert "JSON_PARSE_FAILED" not in codes(run("not json"))
    assert "JSON_PARSE_FAILED" in codes(run("not json", require_json=True))
    assert "JSON_PARSE_FAILED" in codes(run("not json", required_fields=["a"]))


def test_a_single_fenced_json_block_counts_as_json():
    text = '```json\n{"move": "A", "next": {"peg": 1}}\n```'
    assert codes(run(text, required_fields=["move", "next.peg"])) == []


def test_two_fenced_blocks_are_not_json():
    text = '```json\n{"a": 1}\n```\n```json\n{"b": 2}\n```'
    assert "JSON_PARSE_FAILED" in codes(run(text, require_json=True))


def test_missing_required_fields_are_each_flagged():
    result = run(
        '{"move": "A", "items": [{"id": 1}]}',
        required_fields=["move", "next.peg", "items.0.id", "items.1.id"],
    )
    missing = [a.description for a in result.annotations if a.type == "REQUIRED_FIELD_MISSING"]
    assert len(missing) == 2
    assert "'next.peg'" in missing[0] and "'items.1.id'" in missing[1]
    assert result.score == 1.0


@pytest.mark.parametrize(
    ("value", "path", "expected"),
    [
        ({"a": {"b": None}}, "a.b", True),
        ({"a": {"b": 1}}, "a.c", False),
        ({"a": [1, 2]}, "a.1", True),
        ({"a": [1, 2]}, "a.2", False),
        ({"a": [1, 2]}, "a.x", False),
        ({"a": "str"}, "a.0", False),
        ([{"id": 3}], "0.id", True),
    ],
)
def test_has_path(value, path, expected):
    assert has_path(value, path) is expected


def test_parse_json_output_rejects_garbage_without_raising():
    from analyzers.engine.builtin.redflag import _NO_JSON

    assert parse_json_output("[" * 100_000) is _NO_JSON
    assert parse_json_output("```\n[1]\n```") == [1]


@pytest.mark.parametrize(
    "text",
    [
        "I am not certain, but it is definitely Paris.",
        "I'm not sure. Clearly the bug is in the parser.",
        "The answer is 42. Maybe it is 43.",
        "The answer is Canberra. Perhaps it is Sydney, I think.",
    ],
)
def test_it_flags_self_contradiction(text):
    result = run(text)
    [annotation] = [a for a in result.annotations if a.type == "SELF_CONTRADICTION"]
    assert text[annotation.start : annotation.end] == annotation.evidence


@pytest.mark.parametrize(
    "text",
    [
        "It is definitely Paris.",
        "I am not certain it is Paris.",
        "The answer is Canberra.",
        "Perhaps we should ask.",
        "Certainty is rare; the sureness of it all.",
    ],
)
def test_it_does_not_flag_one_sided_confidence(text):
    assert "SELF_CONTRADICTION" not in codes(run(text))


def test_self_contradiction_can_be_switched_off():
    assert codes(run("The answer is 4. Maybe 5.", detect_self_contradiction=False)) == []


def test_collisions_are_detected_within_a_scope_only():
    store = InMemoryCollisionStore()
    ctx_a = AuditContext(config=AuditorConfig(), collision_key="a", collision_store=store)
    ctx_b = AuditContext(config=AuditorConfig(), collision_key="b", collision_store=store)
    assert "COLLISION_DETECTED" not in codes(run("Same answer.", ctx_a))
    assert "COLLISION_DETECTED" not in codes(run("Same answer.", ctx_b))
    assert "COLLISION_DETECTED" in codes(run("  same   ANSWER. ", ctx_a))  # normalised
    assert "COLLISION_DETECTED" not in codes(run("Same answer.", ctx_a, track_collisions=False))


def test_digest_normalises_whitespace_and_case():
    assert content_digest("A  b\nC") == content_digest("a b c")
    assert content_digest("a b") != content_digest("ab")


# Validators named by dotted path: these module-level functions are the fixtures.
def passing_validator(*, text, parsed, context):
    return True


def failing_validator(*, text, parsed, context):
    return {"ok": False, "message": "no greeting"}


def false_validator(*, text, parsed, context):
    return False


def raising_validator(*, text, parsed, context):
    raise RuntimeError("boom")


async def async_failing_validator(*, text, parsed, context):
    return {"ok": False}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("passing_validator", []),
        ("failing_validator", ["VALIDATOR_FAILED"]),
        ("false_validator", ["VALIDATOR_FAILED"]),
        ("async_failing_validator", ["VALIDATOR_FAILED"]),
        ("raising_validator", ["EXCEPTION"]),
        ("no_such_validator", ["EXCEPTION"]),
    ],
)
def test_custom_validators(name, expected):
    result = run("hello", validators=[f"{__name__}.{name}"])
    assert codes(result) == expected


def test_failing_validator_message_is_kept():
    result = run("hello", validators=[f"{__name__}.failing_validator"])
    assert "no greeting" in result.annotations[0].description


def test_score_weights():
    from analyzers.engine.contract import Annotation

    warn = Annotation(type="X", label="x", severity="warning")
    info = Annotation(type="Y", label="y", severity="info")
    crit = Annotation(type="Z", label="z", severity="critical")
    assert score_annotations([]) == 0.0
    assert score_annotations([info]) == pytest.approx(0.1)
    assert score_annotations([warn]) == pytest.approx(0.4)
    assert score_annotations([warn, warn]) == pytest.approx(0.64)
    assert score_annotations([info, crit]) == 1.0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(max_size=400),
    require_json=st.booleans(),
    fields=st.lists(st.text(max_size=8), max_size=3),
)
def test_it_never_raises_and_stats_are_consistent(text, require_json, fields):
    result = run(
        text,
        require_json=require_json,
        required_fields=fields,
        max_chars=200,
        max_tokens=30,
        token_spike_threshold=20,
    )
    stats = result.supplementary["stats"]
    assert stats == {
        "chars": len(text),
        "tokens": len(text.split()),
        "is_spike": stats["tokens"] > 20,
    }
    assert ("TOO_MANY_CHARS" in codes(result)) == (len(text) > 200)
    assert ("TOO_MANY_TOKENS" in codes(result)) == (stats["tokens"] > 30)
    assert 0.0 <= result.score <= 1.0
    for a in result.annotations:
        if a.start is not None:
            assert text[a.start : a.end] == a.evidence


@settings(max_examples=200, deadline=None)
@given(value=json_values, fields=st.lists(st.text(alphabet="ab.0", max_size=5), max_size=3))
def test_any_json_value_parses_and_never_raises(value, fields):
    text = json.dumps(value)
    result = run(text, require_json=True, required_fields=fields)
    assert "JSON_PARSE_FAILED" not in codes(result)
    missing = [a for a in result.annotations if a.type == "REQUIRED_FIELD_MISSING"]
    assert len(missing) == sum(not has_path(value, f) for f in fields)


# -- the ASCII fast path: tokens and digest without a string per word ----------

_SPACES_AND_WORDS = st.lists(
    st.sampled_from(
        [
            " ",
            "  ",
            "\t",
            "\n",
            "\r",
            "\x0b",
            "\x0c",
            "\x1c",
            "\x1f",
            "a",
            "B",
            "x.",
            "\x00",
            "\x85",
            "\u00a0",
            "\u2028",
            "\u3000",
            "É",
            "ß",
            "Zq@",
        ]
    ),
    max_size=60,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(text=_SPACES_AND_WORDS)
def test_tokens_and_digest_equal_the_plain_split(text):
    """`count_tokens`, `normalise_for_hash` and the analyzer's stats and digest are what
    `str.split()` gives, for ASCII texts (the fast path) and any other."""
    import hashlib

    from analyzers.engine.builtin.redflag import count_tokens, normalise_for_hash

    words = text.split()
    plain = " ".join(words).casefold()
    assert count_tokens(text) == len(words)
    assert normalise_for_hash(text) == plain
    assert content_digest(text) == hashlib.blake2b(plain.encode(), digest_size=16).hexdigest()
    assert content_digest(text) == content_digest(text, words)
    store = InMemoryCollisionStore()
    ctx = AuditContext(config=AuditorConfig(), collision_key="k", collision_store=store)
    result = run(text, ctx)
    assert result.supplementary["stats"]["tokens"] == len(words)
    again = AuditContext(config=AuditorConfig(), collision_key="k", collision_store=store)
    # the analyzer stored the plain digest: a text with the same words collides with it
    assert ("COLLISION_DETECTED" in codes(run(" ".join(words) + " ", again))) == bool(words)
