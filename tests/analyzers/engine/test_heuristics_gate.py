"""The word gates of the phrase rules: sound (never skip a rule that would match) and useful."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.engine.builtin import heuristics_bias, heuristics_tone, redflag
from analyzers.engine.builtin.heuristics import Finding, _dedupe_slow, dedupe, find
from analyzers.engine.builtin.heuristics_gate import FOLD, Probe, fold, may_match, required_literals

RULES = heuristics_bias.SYCOPHANCY_RULES + heuristics_bias.OTHER_RULES + heuristics_tone.TONE_RULES
GATED_SEARCHES = [
    *heuristics_bias.CORRECTIONS,
    (redflag._NOT_CERTAIN, redflag._NOT_CERTAIN_WORDS),
    (redflag._THE_ANSWER_IS, redflag._THE_ANSWER_IS_WORDS),
]
ALL_CODE_POINTS = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
# IGNORECASE twins of ASCII letters, to smuggle into generated matches.
TWINS = {"i": ["\u0130", "\u0131", "I"], "s": ["\u017f", "S"], "k": ["\u212a", "K"]}


def test_fold_covers_every_ignorecase_twin_of_an_ascii_letter():
    twins = {}
    for letter in string.ascii_lowercase:
        for m in re.finditer(letter, ALL_CODE_POINTS, re.IGNORECASE):
            if not m.group().isascii():
                twins[m.group()] = letter
    assert twins == FOLD


def test_folding_never_turns_a_non_word_character_into_a_letter():
    non_word = re.sub(r"\w", "", ALL_CODE_POINTS)
    assert not re.search("[a-z]", fold(non_word))


def smuggle_twins(draw_text: str, data: st.DataObject) -> str:
    out = []
    for char in draw_text:
        twins = TWINS.get(char.lower())
        if twins and data.draw(st.booleans()):
            char = data.draw(st.sampled_from(twins))
        out.append(char)
    return "".join(out)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.type}:{r.pattern.pattern[:30]}")
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_rule_is_never_skipped_on_a_text_it_matches(rule, data):
    text = smuggle_twins(data.draw(st.from_regex(rule.pattern)), data)
    text = data.draw(st.text(max_size=20)) + text + data.draw(st.text(max_size=20))
    if rule.pattern.search(text):
        assert rule.may_match(Probe(text))


@pytest.mark.parametrize(("pattern", "words"), GATED_SEARCHES, ids=lambda p: str(p)[:30])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_gated_search_is_never_skipped_on_a_text_it_matches(pattern, words, data):
    text = smuggle_twins(data.draw(st.from_regex(pattern)), data)
    if pattern.search(text):
        assert words and may_match(words, Probe(text))


PHRASES = st.sampled_from(
    [
        "you're absolutely right",
        "I couldn't agree more",
        "what a brilliant idea",
        "as you suspected",
        "as an expert, you're right",
        "experts say",
        "everyone agrees",
        "the newest is always better",
        "as anyone knows",
        "obviously",
        "just google it",
        "that's a stupid question",
        "this is bullshit",
        "damn",
        "lol",
        "!!!",
        "WHY ARE WE HERE NOW",
        "ABCD, EFGH",
        " ,IJKLM",
        "SECRET",
        "ÉCOLE",
        "however",
        "not sure",
        "the answer is 42",
        "certainly",
        "İ",
        "ſ",
        "K",
        "’",
        " ",
        ". ",
        "Decathlon grew 50%",
        "according to [this](https://x.example)",
        "\n",
    ]
)
TEXTS = st.lists(st.one_of(PHRASES, st.text(max_size=8)), max_size=12).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=TEXTS)
def test_gated_find_equals_every_rule_run_on_every_text(text):
    brute = [
        Finding(r.type, m.start(), m.end(), r.weight, r.description, r.severity)
        for r in RULES
        for m in r.pattern.finditer(text)
        if m.end() > m.start()
    ]
    assert find(text, RULES) == _dedupe_slow(sorted(brute, key=lambda f: (-f.weight, f.start)))


FINDINGS = st.lists(
    st.builds(
        lambda t, s, length, w: Finding(t, s, s + length, w, ""),
        st.sampled_from(["a", "b"]),
        st.integers(0, 40),
        st.integers(0, 8),
        st.sampled_from([0.1, 0.3, 0.5]),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(findings=FINDINGS)
def test_fast_dedupe_keeps_the_same_findings_as_the_pairwise_one(findings):
    ordered = sorted(findings, key=lambda f: (-f.weight, f.start))
    assert dedupe(findings) == _dedupe_slow(ordered)


def test_gates_skip_most_rules_on_an_ordinary_answer():
    text = (
        "Acme search answers in milliseconds. Configure facets first, then synonyms; "
        "most teams see better relevance within a week. Shall I send the setup guide?"
    )
    probe = Probe(text)
    skipped = [r for r in RULES if not r.may_match(probe)]
    assert len(skipped) >= len(RULES) - 2
    assert not may_match(required_literals(heuristics_bias.CORRECTION), probe)
    assert not heuristics_bias.corrects_user(probe)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_the_phrase_by_phrase_correction_search_agrees_with_the_whole_pattern(data):
    pieces = [
        "That is ",
        "not ",
        "quite ",
        "right",
        "incorrect",
        "I ",
        "disagree",
        "Not",
        " https://x.example",
        "isn’t ",
        "really ",
        "safe",
        "in fact",
        "nothing",
        "x",
    ]
    text = smuggle_twins("".join(data.draw(st.lists(st.sampled_from(pieces)))), data)
    assert heuristics_bias.corrects_user(Probe(text)) == bool(
        heuristics_bias.CORRECTION.search(text)
    )


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(st.sampled_from(["answer", "answers", "sure", " ", "é", "İ", "-", "x", "Z"])).map(
        "".join
    ),
    word=st.sampled_from(["answer", "sure", "x", "z"]),
)
def test_searching_for_a_token_agrees_with_the_token_set(text, word):
    searched = Probe(text).has_token(word.encode())
    assert searched == (word.encode() in Probe(text).tokens)


# -- anchored searches: the pattern tried only where one of its leading literals is ------

from analyzers.engine.builtin.heuristics_gate import anchored_search, leading_literals  # noqa: E402

ANCHORED = [p for p, _ in GATED_SEARCHES] + [r.pattern for r in RULES]


def test_leading_literals_of_the_correction_phrases():
    starts = [leading_literals(p) for p, _ in heuristics_bias.CORRECTIONS]
    assert starts[2] == ("not ",)
    assert starts[4] == ("that",)
    assert leading_literals(re.compile(r"\b(?:a|\w+)")) is None  # a class starts a match
    assert leading_literals(re.compile(r"(?:x)?y")) is None  # an optional group


@pytest.mark.parametrize("pattern", ANCHORED, ids=lambda p: p.pattern[:30])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_an_anchored_search_finds_what_the_search_finds(pattern, data):
    matched = smuggle_twins(data.draw(st.from_regex(pattern)), data)
    text = data.draw(TEXTS) + matched + data.draw(TEXTS)
    probe = Probe(text)
    assert anchored_search(pattern, leading_literals(pattern), probe) == bool(pattern.search(text))


@settings(max_examples=200, deadline=None)
@given(text=TEXTS)
def test_an_anchored_search_agrees_on_prose(text):
    probe = Probe(text)
    for pattern in ANCHORED:
        assert anchored_search(pattern, leading_literals(pattern), probe) == bool(
            pattern.search(text)
        )


def test_an_anchored_search_gives_up_on_many_candidates():
    pattern = heuristics_bias.CORRECTIONS[2][0]  # "not ..."
    text = "not " * 500 + "not quite"
    assert anchored_search(pattern, leading_literals(pattern), Probe(text))
    assert not anchored_search(pattern, leading_literals(pattern), Probe("not " * 500))


# -- a substring is searched for only when the words inside it are tokens and its runs of
# letters are in the joined tokens

_PIECES = st.sampled_from(
    [
        "did you ",
        "you",
        "your",
        "not worth ",
        "worth",
        "even a ",
        " a",
        "a",
        "this is ",
        "t have time for th",
        "time",
        "for",
        " ",
        "\n",
        ".",
        "'",
        "x",
        "é",
        "\u0130",
        "ﬀ",
        "who cares",
        "can see",
        "whatever",
        "fuck",
        "Did You ",
        "keep up",
        "try to ",
        "who",
        "ca",
        "res",
        "what",
        "ever",
        "uck",
        "f",
        "ſ",
        "s",
        "1",
    ]
)


@settings(max_examples=600, deadline=None)
@given(
    text=st.lists(_PIECES, max_size=20).map("".join),
    subs=st.lists(_PIECES.filter(str.strip), min_size=1, max_size=4, unique=True),
)
def test_inner_tokens_never_skip_a_substring_that_is_there(text, subs):
    """With the token set built, a clause of substrings holds exactly when one of them is
    in the folded text, as a plain search over every substring says."""
    clause = frozenset((False, fold(w)) for w in subs)
    probe = Probe(text)
    assert probe.tokens is not None  # the set-based branch
    plain = any(fold(w) in probe.folded for w in subs)
    assert may_match((clause,), probe) is plain


_GATES = """
import sys
from analyzers.engine.builtin import heuristics_bias, redflag
from analyzers.engine.builtin.heuristics_gate import required_literals
patterns = [redflag._NOT_CERTAIN, redflag._THE_ANSWER_IS, redflag._CERTAIN, redflag._HEDGE]
patterns += [pattern for pattern, _ in heuristics_bias.CORRECTIONS]
print([sorted(map(repr, clause)) for p in patterns for clause in required_literals(p)])
"""


def test_the_words_that_gate_a_pattern_do_not_change_with_the_hash_seed():
    # "the answer is" was gated by "the" in some processes and by "is" in others
    import os
    import subprocess
    import sys

    runs = {
        subprocess.run(
            [sys.executable, "-c", _GATES],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in range(6)
    }
    assert len(runs) == 1 and "answer" in runs.pop()
