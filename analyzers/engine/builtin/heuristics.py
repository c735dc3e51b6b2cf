"""Deterministic phrase rules, the judged analyzers' fallback when no model is configured.

A rule is a regular expression with a type, a weight (how strongly one match suggests the
problem) and a description. Matches become findings with exact offsets; the findings'
weights combine into a score as independent signals: 1 - prod(1 - w).

A rule only scans a text that holds the words it needs (`heuristics_gate`), or, for a rule
that needs no word, a text that passes its cheaper `gate` test.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from analyzers.engine.builtin.heuristics_gate import (
    Clause,
    Probe,
    any_clause,
    may_match,
    required_literals,
)
from analyzers.engine.contract import Annotation, Severity

FLAGS = re.IGNORECASE | re.MULTILINE


@dataclass(frozen=True)
class Rule:
    type: str
    pattern: re.Pattern[str]
    weight: float
    description: str
    severity: Severity = "warning"
    # For a rule that needs no word: a cheap test that is true of every text it matches.
    gate: Callable[[Probe], bool] | None = None
    literals: tuple[Clause, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "literals", required_literals(self.pattern))

    def may_match(self, probe: Probe) -> bool:
        """False only when the pattern cannot match the probed text."""
        if self.literals:
            return may_match(self.literals, probe)
        return self.gate is None or self.gate(probe)


def rule(
    type: str,
    pattern: str,
    weight: float,
    description: str,
    severity: Severity = "warning",
    *,
    flags: int = FLAGS,
    gate: Callable[[Probe], bool] | None = None,
) -> Rule:
    return Rule(type, re.compile(pattern, flags), weight, description, severity, gate)


@dataclass(frozen=True)
class Finding:
    type: str
    start: int
    end: int
    weight: float
    description: str
    severity: Severity = "warning"


def find(text: str, rules: Iterable[Rule], probe: Probe | None = None) -> list[Finding]:
    """Every match of every rule, in text order, overlaps of one type merged (heaviest kept).

    `probe` is `Probe(text)` when the caller has one already.
    """
    if probe is None:
        probe = Probe.of(text)
    gate, wordless = _list_gate(rules)
    if gate is not None and not may_match(gate, probe):
        # no rule that needs a word can match (heuristics_gate.any_clause): only the
        # rules that need none are left to try, in their order
        rules = wordless
    found = [
        Finding(r.type, m.start(), m.end(), r.weight, r.description, r.severity)
        for r in rules
        if r.may_match(probe)
        for m in r.pattern.finditer(text)
        if m.end() > m.start()
    ]
    return dedupe(found) if found else found


# A rule list's combined gate, by the list's identity: (the rules it was made of, the gate,
# the rules it does not cover). The rules are compared on every use, so a list changed
# since is never judged by a stale gate; bounded (the engine has a handful of lists).
_LIST_GATES: dict[int, tuple[tuple[Rule, ...], tuple[Clause, ...] | None, tuple[Rule, ...]]] = {}
_LIST_GATES_MAX = 64


def _list_gate(rules: Iterable[Rule]) -> tuple[tuple[Clause, ...] | None, tuple[Rule, ...]]:
    """(clauses that hold whenever a rule of `rules` that needs words can match, the rules
    that need none, in order); (None, ()) when `rules` is not a list or tuple, or no rule
    needs a word: then every rule is tried."""
    if type(rules) is not list and type(rules) is not tuple:
        return None, ()
    snapshot = tuple(rules)
    entry = _LIST_GATES.get(id(rules))
    if entry is not None and entry[0] == snapshot:
        return entry[1], entry[2]
    worded = [r.literals for r in snapshot if r.literals]
    clause = any_clause(worded) if worded else None
    gate = (clause,) if clause is not None else None
    wordless = tuple(r for r in snapshot if not r.literals)
    if len(_LIST_GATES) >= _LIST_GATES_MAX:
        _LIST_GATES.clear()
    _LIST_GATES[id(rules)] = (snapshot, gate, wordless)
    return gate, wordless


def dedupe(findings: Iterable[Finding]) -> list[Finding]:
    """Heaviest first (then leftmost), drop a finding that overlaps a kept one of its type."""
    ordered = sorted(findings, key=lambda f: (-f.weight, f.start))
    if any(f.end <= f.start for f in ordered):
        return _dedupe_slow(ordered)
    # The kept spans of one type are disjoint, so sorted by start they are sorted by end
    # too, and only the last kept span starting before `f.end` can overlap `f`.
    kept_by_type: dict[str, list[tuple[int, int]]] = {}
    kept: list[Finding] = []
    for f in ordered:
        spans = kept_by_type.setdefault(f.type, [])
        i = bisect_left(spans, (f.end,))
        if i and spans[i - 1][1] > f.start:
            continue
        insort(spans, (f.start, f.end))
        kept.append(f)
    return sorted(kept, key=lambda f: (f.start, f.type))


def _dedupe_slow(ordered: list[Finding]) -> list[Finding]:
    kept: list[Finding] = []
    for f in ordered:
        if not any(k.type == f.type and k.start < f.end and f.start < k.end for k in kept):
            kept.append(f)
    return sorted(kept, key=lambda f: (f.start, f.type))


def combine(weights: Iterable[float]) -> float:
    """Independent signals combined: 1 - prod(1 - w), in [0, 1]."""
    remaining = math.prod(1.0 - min(1.0, max(0.0, w)) for w in weights)
    return round(1.0 - remaining, 4)


def type_label(type_code: str) -> str:
    """`authority_deference` -> `Authority deference`."""
    return type_code.replace("_", " ").capitalize()


def score_label(score: float) -> str:
    """A word for a score: none, low, moderate, high."""
    if score <= 0.0:
        return "none"
    if score < 0.3:
        return "low"
    if score < 0.6:
        return "moderate"
    return "high"


def to_annotations(text: str, findings: Iterable[Finding]) -> list[Annotation]:
    return [
        Annotation(
            type=f.type,
            label=type_label(f.type),
            severity=f.severity,
            description=f.description,
            evidence=text[f.start : f.end],
            start=f.start,
            end=f.end,
        )
        for f in findings
    ]
