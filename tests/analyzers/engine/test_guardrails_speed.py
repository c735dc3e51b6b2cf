"""The fast paths of the guardrail scanner agree with the plain algorithm, and stay linear."""

from __future__ import annotations

import gc
import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzers.engine.config import AuditorConfig
from analyzers.engine.guardrails.links import _may_repeat_suffix, strip_suffixes
from analyzers.engine.guardrails.settings import settings_from_config
from analyzers.engine.guardrails.stream import audit_text
from analyzers.engine.guardrails.syntax.markdown import MAX_PAREN_DEPTH, parse_destination
from analyzers.engine.guardrails.syntax.text import has_digit, one_line


def reference_bare_destination(text: str, i: int) -> int | None:
    """The destination scan as specified: left to right with a depth counter."""
    n, depth, j = len(text), 0, i
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "(":
            depth += 1
            if depth > MAX_PAREN_DEPTH:
                return None
        elif c == ")":
            if depth == 0:
                break
            depth -= 1
        elif c <= " ":
            break
        j += 1
    j = min(j, n)
    return None if depth else j


DESTINATIONS = st.text(alphabet="()()\\ ax\n\t", max_size=40) | st.builds(
    lambda d, tail: "(" * d + "a" + ")" * d + tail,
    st.integers(MAX_PAREN_DEPTH - 2, MAX_PAREN_DEPTH + 2),
    st.sampled_from(["", ")", " x", "\\", "(", "))"]),
)


@settings(max_examples=500, deadline=None)
@given(text=DESTINATIONS)
def test_bare_destinations_end_where_the_depth_counting_scan_ends(text):
    full = "x" + text + ")"  # closed, as after a link destination
    end = reference_bare_destination(full, 0)
    parsed = parse_destination(full, 0)
    if end is None:
        assert parsed is None
    elif end < len(full) and full[end] == ")":
        assert parsed == (end + 1, full[:end], 0, end)
    elif parsed is not None:  # stopped at whitespace: a title may follow
        assert parsed[3] == end


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("a1٣ é\n0") | st.characters(), max_size=30))
def test_has_digit_is_the_regex_digit_test(text):
    assert has_digit(text) == bool(re.search(r"\d", text))


@settings(max_examples=300, deadline=None)
@given(
    base=st.text(max_size=10),
    repeats=st.lists(
        st.sampled_from([" | Acme", " | ACME", "|acme", " |  Acme ", " | Acmé"]), max_size=4
    ),
    suffix=st.sampled_from([" | Acme", " | Acmé", " | Σίγμας"]),
)
def test_the_suffix_precheck_never_hides_a_repeated_suffix(base, repeats, suffix):
    if strip_suffixes(base + "".join(repeats), suffix)[1] >= 2:
        assert _may_repeat_suffix(base + "".join(repeats), suffix)


def cpu_seconds(text: str) -> float:
    config = AuditorConfig(
        allowed_hosts=["acme.example", "www.acme.example"],
        known_customers=[
            {
                "name": "Decathlon",
                "slug": "decathlon",
                "facts": ["Decathlon grew conversion by 50%"],
            }
        ],
    )
    settings_ = settings_from_config(config)
    best = float("inf")
    # Without the cyclic collector: its full passes over the test process's heap come in
    # steps (a quarter more survivors each), so they would time the heap, not the scan.
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            started = time.process_time()
            audit_text(text, settings_)
            best = min(best, time.process_time() - started)
    finally:
        gc.enable()
    return best


def test_repeated_link_openers_take_linear_time():
    small = cpu_seconds("[a](" * 12_500)  # 50 KB
    large = cpu_seconds("[a](" * 50_000)  # 200 KB
    # Linear work quadruples; quadratic work would grow sixteenfold.
    assert large < max(small, 0.005) * 9
    assert large < 0.5  # about 4.5 s per MB before the scanner matched destinations in C


def test_deep_and_unclosed_parentheses_take_linear_time():
    small = cpu_seconds("[x](" + "(" * 50_000 + "[a](" * 1_000)
    large = cpu_seconds("[x](" + "(" * 200_000 + "[a](" * 4_000)
    assert large < max(small, 0.005) * 9


def test_stripped_autolinks_and_attributions_take_linear_time():
    # Each strip leaves blanks or an attribution next to the previous one's: the blank
    # runs around them must not be rescanned from every stripped link.
    for unit in (
        "<https://evil.test/a> ",
        "Read more, according to [source](https://evil.test/). ",
    ):
        small = cpu_seconds(unit * (50_000 // len(unit)))
        large = cpu_seconds(unit * (200_000 // len(unit)))
        assert large < max(small, 0.005) * 9, unit


def test_many_claims_in_one_paragraph_take_linear_time():
    unit = (
        "PcComponentes lifted revenue by 12%. Decathlon grew conversion by 50% "
        "([case study](https://www.acme.example/customers/decathlon)). "
    )
    small = cpu_seconds(unit * (50_000 // len(unit)))
    large = cpu_seconds(unit * (200_000 // len(unit)))
    assert large < max(small, 0.005) * 9


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab  \t\n\xa0\u2028é…") | st.characters(), max_size=40)
)
def test_one_line_fast_path_agrees_with_the_plain_squeeze(text):
    squeezed = " ".join(text.split())
    expected = squeezed if len(squeezed) <= 20 else squeezed[:19] + "…"
    assert one_line(text, limit=20) == expected


# -- bare URLs: the simple-URL fast paths agree with the marker-by-marker scan ----------

from analyzers.engine.guardrails.syntax import autolinks  # noqa: E402
from tests.analyzers.engine.url_strategies import url_cores  # noqa: E402

ALLOWED = ("acme.example", ".docs.example")
CORES = url_cores()


@settings(max_examples=1000, deadline=None)
@given(core=CORES)
def test_the_simple_url_destination_is_what_the_scan_finds(core):
    if autolinks._SIMPLE_URL.fullmatch(core) is not None:
        assert autolinks._simple_destinations(core, ALLOWED) == autolinks._scan_destinations(
            core, ALLOWED
        )


GAPS = st.sampled_from([" ", "  ", "\n", " <", "> ", " x ", ", ", " (", ") ", "\t"])


@settings(max_examples=500, deadline=None)
@given(parts=st.lists(st.tuples(CORES, GAPS), min_size=1, max_size=12))
def test_one_pass_over_simple_runs_finds_what_the_run_by_run_scan_finds(parts):
    text = "".join(core + gap for core, gap in parts)
    text = text * (autolinks.SIMPLE_RUNS_FROM // len(text) + 1)  # long enough for one pass
    fast = autolinks.find_bare_urls(text, ALLOWED, None, {})
    scanned: list = []
    autolinks._scan_bare_urls(text, 0, len(text), ALLOWED, None, {}, scanned)
    assert fast == scanned


# The regex passes that `_simple_runs` and `RUN_START` replaced, kept as the reference.
_REFERENCE_SIMPLE_RUN = re.compile(r"[\s<>]" + autolinks._SIMPLE_RUN_BODY)
_REFERENCE_RUN_START = re.compile(r"(?:[^\s<>]*[\s<>])*")


def reference_simple_runs(text: str) -> list:
    first = autolinks._SIMPLE_RUN_FIRST.match(text)
    runs = [(0, first.end(), first.group(1), first.group(2))] if first else []
    for m in _REFERENCE_SIMPLE_RUN.finditer(text):
        runs.append((m.start() + 1, m.end(), *m.groups()))
    return runs


RUN_PIECES = st.sampled_from(
    [
        "http://",
        "https://",
        "www.",
        "hhttp://",
        "ahttps://",
        "://",
        "a.example",
        "/p",
        "?q=1",
        "www.www.",
        "x",
        "h",
        "ttps",
        " ",
        "\n",
        "<",
        ">",
        "\u2003",
        ".",
        "-",
        ":8080",
        "é",
    ]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.one_of(RUN_PIECES, CORES, GAPS), max_size=20).map("".join))
def test_simple_runs_by_find_are_the_regex_passes_runs(text):
    assert list(autolinks._simple_runs(text)) == reference_simple_runs(text)


@settings(max_examples=3000, deadline=None)
@given(
    st.lists(st.one_of(RUN_PIECES, GAPS), max_size=20).map("".join),
    st.integers(0, 60),
    st.integers(0, 60),
)
def test_run_start_from_the_end_is_the_forward_match(text, pos, length):
    pos = min(pos, len(text))
    endpos = min(len(text), pos + length)
    fast = autolinks.RUN_START.match(text, pos, endpos)
    assert (fast.end() if fast else pos) == _REFERENCE_RUN_START.match(text, pos, endpos).end()
