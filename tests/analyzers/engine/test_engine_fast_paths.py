"""Fast paths added for speed (the engine's throughput target): each finds exactly what the
plain way finds, each gate lets through every case that could match, each cache is
bounded and keyed so one audit cannot change another's result."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import Source
from analyzers.engine.guardrails import settings as guardrail_settings
from analyzers.engine.guardrails.settings import SourceIndex, settings_from_config, source_key
from analyzers.engine.guardrails.syntax import autolinks
from analyzers.engine.guardrails.syntax.urls import canonicalize
from tests.analyzers.engine.url_strategies import url_cores

ALLOWED = ("acme.example", ".docs.example")
CORES = url_cores(extra=("<", ">"))
GAPS = st.sampled_from([" ", "  ", "\n", " <", "> ", " x ", ", ", " (", ") ", "\t"])

# -- bare URLs: short texts are scanned run by run --------------------------------------


@settings(max_examples=700, deadline=None)
@given(
    parts=st.lists(st.tuples(CORES, GAPS), min_size=1, max_size=12),
    prose=st.sampled_from(["", "Read this. ", "a.b ", "x `code` y ", "See: "]),
)
def test_short_texts_find_what_the_run_by_run_scan_finds(parts, prose):
    text = prose + "".join(core + gap for core, gap in parts)
    assert len(text) < autolinks.SIMPLE_RUNS_FROM
    found = autolinks.find_bare_urls(text, ALLOWED, None, {})
    scanned: list = []
    autolinks._scan_bare_urls(text, 0, len(text), ALLOWED, None, {}, scanned)
    assert found == scanned


def test_a_short_text_with_bare_urls_is_judged_whole():
    text = "See https://evil.example/x?d=SECRET and www.acme.example/ok, then evil.com/q."
    found = autolinks.find_bare_urls(text, ("acme.example", "www.acme.example"), None, {})
    assert [(b.url, b.allowed) for b in found] == [
        ("https://evil.example/x?d=SECRET", False),
        ("www.acme.example/ok", True),
        ("evil.com/q", False),
    ]


# -- sources: their keys cached by URL, bounded ---------------------------------------


URLS = st.sampled_from(
    [
        "https://www.acme.example/docs",
        "https://www.acme.example/docs/",
        "HTTPS://WWW.ACME.example/docs#x",
        "https://acme.example/%7Efoo",
        "https://user@acme.example/",
        "http://0x7f.1/",
        "javascript:alert(1)",
        "https://acme.example\\@evil.example/",
        "https://ａｃｍｅ.example/",
        "//acme.example/",
        "",
        "https://acme.example/\t/p",
        "https://xn--e1a.example/",
    ]
)


@settings(max_examples=300, deadline=None)
@given(url=URLS | st.text(max_size=40))
def test_a_source_key_is_the_canonical_url_without_fragment(url):
    assert source_key(url) == canonicalize(url).without_fragment
    assert source_key(url) == canonicalize(url).without_fragment  # (the cached answer too)


def test_the_source_key_cache_is_bounded_and_skips_long_urls():
    cached = guardrail_settings._cached_source_key
    assert cached.cache_info().maxsize == guardrail_settings.SOURCE_KEYS_CACHED
    long_url = "https://acme.example/" + "a" * guardrail_settings.SOURCE_KEY_CACHED_LENGTH
    before = cached.cache_info().currsize
    cached.cache_clear()
    assert source_key(long_url) == canonicalize(long_url).without_fragment
    assert cached.cache_info().currsize == 0
    assert before <= guardrail_settings.SOURCE_KEYS_CACHED


def test_source_titles_are_per_index_even_for_a_cached_url():
    settings_ = settings_from_config(AuditorConfig(allowed_hosts=["acme.example"]))
    first = SourceIndex(settings_, [Source(title="One", url="https://acme.example/a#x")])
    second = SourceIndex(settings_, [Source(title="Two", url="https://acme.example/a/")])
    assert first.titles == {"https://acme.example/a": "One"}
    assert second.titles == {"https://acme.example/a": "Two"}


# -- phrase rules: one gate per rule list ----------------------------------------------

from analyzers.engine.builtin import heuristics  # noqa: E402
from analyzers.engine.builtin.heuristics import Finding, dedupe, find, rule  # noqa: E402
from analyzers.engine.builtin.heuristics_bias import (  # noqa: E402
    CORRECTION,
    OTHER_RULES,
    SYCOPHANCY_RULES,
    corrects_user,
)
from analyzers.engine.builtin.heuristics_gate import Probe, any_clause, may_match  # noqa: E402
from analyzers.engine.builtin.heuristics_tone import TONE_RULES  # noqa: E402

RULE_LISTS = {"other": OTHER_RULES, "sycophancy": SYCOPHANCY_RULES, "tone": TONE_RULES}


def ungated_find(text, rules):
    """`find` as specified: every rule's every match, no gate at all."""
    found = [
        Finding(r.type, m.start(), m.end(), r.weight, r.description, r.severity)
        for r in rules
        for m in r.pattern.finditer(text)
        if m.end() > m.start()
    ]
    return dedupe(found) if found else found


def _words_of(rules):
    out = set()
    for r in rules:
        for clause in r.literals:
            for is_token, word in clause:
                out.add(word.decode() if is_token else word)
    return sorted(out)


RULE_WORDS = sorted({w for rules in RULE_LISTS.values() for w in _words_of(rules)})
# phrases that match, as whole sentences: each list's gate must let them through
MATCHING = [
    "You're absolutely right, great question!",
    "This confirms what you suspected all along.",
    "Who am I to question that? I defer to you.",
    "Obviously, as anyone can see, this is basic stuff. Try to keep up.",
    "WHAT THE HELL IS THIS!!! Whatever.",
    "Everyone agrees that the newest version is always the best.",
    "I couldn't agree more, you are so smart.",
]
PROSE = st.sampled_from(
    [
        "",
        " ",
        ". ",
        "!!! ",
        "Acme search is fast. ",
        "İ",
        "ſ",
        "K",
        "\n",
        "YOU ",
        "THIS IS ",
        "n't ",
        "’",
    ]
)


@settings(max_examples=600, deadline=None)
@given(parts=st.lists(st.sampled_from(RULE_WORDS) | PROSE | st.sampled_from(MATCHING), max_size=14))
def test_a_rule_list_finds_what_every_rule_finds_without_any_gate(parts):
    text = " ".join(parts)
    for rules in RULE_LISTS.values():
        assert find(text, rules, Probe(text)) == ungated_find(text, rules)


def test_the_list_gate_lets_every_matching_phrase_through():
    """Each sentence matches some rule; the lists' gates must not skip it."""
    for text in MATCHING:
        expected = {name: ungated_find(text, rules) for name, rules in RULE_LISTS.items()}
        assert any(expected.values()), text  # (the sentence does match something)
        for name, rules in RULE_LISTS.items():
            gate, _ = heuristics._list_gate(rules)
            if expected[name]:
                assert gate is None or may_match(gate, Probe(text)), (name, text)
            assert find(text, rules, Probe(text)) == expected[name]


def test_a_list_changed_in_place_gets_a_new_gate():
    rules = [rule("a", r"\bapple\b", 0.5, "x")]
    assert find("an apple", rules) != []
    rules[0] = rule("b", r"\bpear\b", 0.5, "y")  # same list, same length
    assert find("a pear", rules) == [Finding("b", 2, 6, 0.5, "y", "warning")]
    assert find("an apple", rules) == []


def test_rules_that_need_no_word_are_still_tried_when_the_gate_fails():
    loud = rule("loud", r"[A-Z]{5,}", 0.5, "x", flags=0, gate=lambda probe: b"AAAAA" in probe.shape)
    assert loud.literals == ()
    rules = [rule("a", r"\bapple\b", 0.5, "x"), loud]
    assert heuristics._list_gate(rules)[1] == (loud,)
    assert [f.type for f in find("no fruit HERE NOW", rules)] == []
    assert [f.type for f in find("no fruit, SHOUTING", rules)] == ["loud"]


def test_any_clause_is_none_when_a_pattern_needs_no_word():
    assert any_clause([(frozenset({(True, b"apple")}),), ()]) is None


@settings(max_examples=400, deadline=None)
@given(
    parts=st.lists(
        st.sampled_from(
            _words_of([])
            + [
                "isn't right",
                "that is wrong",
                "actually",
                "in fact",
                "not",
                "correct",
                "I disagree",
                "however",
                "unsafe",
            ]
        )
        | PROSE,
        max_size=10,
    )
)
def test_corrects_user_is_the_correction_search(parts):
    text = " ".join(parts)
    assert corrects_user(Probe(text)) == (CORRECTION.search(text) is not None)


# -- capping: the run with nothing to cut is returned as it is --------------------------

from analyzers.engine.contract import AnalyzerRun, Annotation  # noqa: E402
from analyzers.engine.limits import Limits, Omitted, cap_run  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(
    types=st.lists(st.sampled_from(["A", "B", "C"]), max_size=8),
    severities=st.lists(st.sampled_from(["info", "warning", "critical"]), min_size=8, max_size=8),
    lengths=st.lists(st.integers(0, 6), max_size=3),
    per_type=st.integers(1, 4),
    items=st.integers(1, 5),
)
def test_cap_run_fast_path_is_the_full_cap(types, severities, lengths, per_type, items):
    limits = Limits(max_annotations_per_type=per_type, max_supplementary_items=items)

    def make():
        return AnalyzerRun(
            analyzer_id="x",
            category="c",
            status="ok",
            score=0.5,
            annotations=[
                Annotation(type=t, label=t, severity=s, description="d")
                for t, s in zip(types, severities, strict=False)
            ],
            supplementary={f"list{i}": list(range(n)) for i, n in enumerate(lengths)}
            | {"count": 3},
        )

    fast = cap_run(make(), limits, None)
    full = cap_run(make(), limits, Omitted())  # (an empty Omitted takes the full path)
    assert fast.model_dump() == full.model_dump()


# -- sentence boundaries: the regex written to start with one character class ------------

_PLAIN_BOUNDARY = re.compile(r"[.!?][.!?]*[\"')\]”’*_]*(?=\s|$)|\n")


@settings(max_examples=1500, deadline=None)
@given(
    text=st.text(alphabet=".!?\n \t\r\"')]”’*_ab\x0b\u2028\u00a0", max_size=40),
    cut=st.tuples(st.integers(0, 40), st.integers(0, 40)),
)
def test_sentence_boundaries_are_those_of_the_plain_regex(text, cut):
    from analyzers.engine.guardrails.grounding import _BOUNDARY

    start, end = sorted(cut)
    start, end = min(start, len(text)), min(end, len(text))
    for args in ((text,), (text, start, end)):
        assert [m.span() for m in _BOUNDARY.finditer(*args)] == [
            m.span() for m in _PLAIN_BOUNDARY.finditer(*args)
        ]


# -- paragraphs with nothing to find skip the rules: the same result as running them ------

_PROSE = st.sampled_from(
    [
        "Hello there",
        "In 2023 most",
        " retailers grew",
        "50%",
        "$4M",
        " 3x ",
        "e.g. this",
        "a.b",
        "www.",
        "//",
        "@",
        "x@y.example",
        "[a](b)",
        "[a]: /x",
        "<b>",
        "<",
        "`c`",
        "~~~",
        "Namedrop: Globex",
        "VALUE SELL:",
        "# Namedrop:",
        "\n",
        "\n\n",
        ". ",
        "\x00",
        "×",
        "Globex lifted revenue by 12%.",
        "acme.example",
        "setup.py",
        "A/B",
        "http:",
        "](",
    ]
)


@settings(max_examples=1500, deadline=None)
@given(parts=st.lists(_PROSE, max_size=8), base=st.integers(0, 50))
def test_a_paragraph_with_nothing_to_find_gets_what_the_rules_give(parts, base):
    from analyzers.engine.guardrails import pipeline
    from analyzers.engine.guardrails.caps import RecordCaps
    from analyzers.engine.limits import Limits

    text = "".join(parts).strip("\n") or "x"
    config = AuditorConfig(
        allowed_hosts=["acme.example"], known_customers=[{"name": "Globex", "slug": "globex"}]
    )
    settings_ = settings_from_config(config)
    sources = SourceIndex(settings_, [])
    limits = Limits(max_trace_lines=3)
    fast_caps, full_caps = RecordCaps(limits), RecordCaps(limits)
    fast = pipeline.audit_paragraph(text, base, settings_, sources, fast_caps)
    original = pipeline.nothing_to_find
    pipeline.nothing_to_find = lambda text, settings: False
    try:
        full = pipeline.audit_paragraph(text, base, settings_, sources, full_caps)
    finally:
        pipeline.nothing_to_find = original
    if original(text, settings_):
        assert (fast.text, fast.annotations, fast.links, fast.trace, fast.claims, fast.pending) == (
            full.text,
            full.annotations,
            full.links,
            full.trace,
            full.claims,
            full.pending,
        )
        assert (fast_caps.trace_kept, fast_caps.trace_omitted) == (
            full_caps.trace_kept,
            full_caps.trace_omitted,
        )
        assert not full.annotations and not full.links and full.text == text


# -- bare URLs: one verdict per run, memoised (bounded) -----------------------------------


def _reference_verdict(core: str):
    """The worst destination of the run, as the scan reported it before verdicts were
    memoised whole."""
    dests = autolinks._destinations(core, ALLOWED)
    if dests is None:
        return core, "", autolinks.LINK, False, False
    if not dests:
        return None
    bad = [d for d in dests if not d[3]]
    url, host, kind, _, unsafe, _ = bad[0] if bad else dests[0]
    if any(d[2] != autolinks.DOMAIN for d in dests) and kind == autolinks.DOMAIN:
        kind = autolinks.LINK
    return url, host, kind, not bad, unsafe


@settings(max_examples=500, deadline=None)
@given(core=st.lists(CORES, min_size=1, max_size=3).map("".join))
def test_a_runs_memoised_verdict_is_its_worst_destination(core):
    assert autolinks._run_verdict(core, ALLOWED) == _reference_verdict(core)
    assert autolinks._verdict(core, ALLOWED) == _reference_verdict(core)


def test_the_run_verdicts_are_a_bounded_cache():
    assert autolinks._run_verdict.cache_info().maxsize == 8192
