"""Cheap necessary conditions for phrase rules, so most rules never scan most texts.

Python's `re` tries a case-insensitive pattern that starts with `\\b` at every position of
the text; a dozen such rules over a 2 KB answer cost milliseconds. Yet nearly every rule
needs some literal word ("expert", "google it", ...) to match at all. `required_literals`
reads that out of the compiled pattern as clauses: every match satisfies every clause,
and a clause holds when one of its words is in the text. A word is either a whole token
(a maximal run of letters a-z in the folded text, looked up in a set built once per
text) or, when the pattern does not pin down where the word ends, a substring.

`Probe` holds one text in the form these words are looked for in: lower case, with the
few non-ASCII letters that `re.IGNORECASE` matches to ASCII letters folded to them.
A rule whose clauses fail is skipped: it could not have matched, so nothing changes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

try:  # the parser behind `re.compile`; its shape has been stable since Python 3.0
    # typeshed has no stubs for these private modules of `re` (they exist at runtime)
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a future Python without it: no gates, same results
    _parser = None

# Non-ASCII characters that `re.IGNORECASE` matches to an ASCII letter (checked against
# every code point in tests/analyzers/engine/test_heuristics_gate.py).
FOLD = {"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}
_FOLD_TABLE = str.maketrans(FOLD)
_LETTERS_ONLY = bytes(i if 97 <= i <= 122 else 32 for i in range(256))
_SHAPE = bytes(65 if 65 <= i <= 90 else 33 if i in (33, 63) else 32 for i in range(256))
_NON_LETTER = re.compile(r"[^a-z]")
MAX_CLAUSES = 3

Word = tuple[bool, str | bytes]  # (is_token, word): a bytes token or a str substring
Clause = frozenset[Word]


def fold(text: str) -> str:
    """The text as the words are looked for in: lower case, IGNORECASE twins folded."""
    return (text if text.isascii() else text.translate(_FOLD_TABLE)).lower()


class Probe:
    """One text, folded once, its letter tokens built on first use."""

    __slots__ = ("text", "folded", "_tokens", "_shape", "_lookups", "_joined")

    # Token questions answered by searching the text before the token set is built: a
    # probe asked a few times (the red-flag analyzer alone) never pays for the set.
    SEARCHES_BEFORE_SET = 8

    def __init__(self, text: str) -> None:
        self.text = text
        self.folded = fold(text)
        self._tokens: set[bytes] | None = None
        self._shape: bytes | None = None
        self._joined: str | None = None
        self._lookups = 0

    @property
    def shape(self) -> bytes:
        """The text with capitals A-Z as "A", "!" and "?" as "!", anything else as " "."""
        if self._shape is None:
            self._shape = self.text.encode("ascii", "ignore").translate(_SHAPE)
        return self._shape

    @classmethod
    def of(cls, text: str) -> Probe:
        """The probe of `text`, shared with the previous caller that probed the same object
        (the analyzers of one audit all read one response)."""
        last = _last_probe
        if last is not None and last.text is text:
            return last
        probe = globals()["_last_probe"] = cls(text)
        return probe

    @property
    def joined(self) -> str:
        """The distinct tokens joined by spaces: a text holds a run of letters a-z exactly
        when this (often a third as long) does."""
        if self._joined is None:
            self._joined = b" ".join(self.tokens).decode("ascii")
        return self._joined

    @property
    def tokens(self) -> set[bytes]:
        """Every maximal run of letters a-z in the folded text."""
        if self._tokens is None:
            raw = self.folded.encode("ascii", "replace")  # other characters become "?"
            self._tokens = set(raw.translate(_LETTERS_ONLY).split())
        return self._tokens

    def has_token(self, word: bytes) -> bool:
        """`word in self.tokens`, by searching the text for the first few questions."""
        if self._tokens is not None or self._lookups >= self.SEARCHES_BEFORE_SET:
            return word in self.tokens
        self._lookups += 1
        folded, needle, size = self.folded, word.decode("ascii"), len(word)
        at = folded.find(needle)
        while at >= 0:
            before = folded[at - 1 : at] if at else ""
            after = folded[at + size : at + size + 1]
            if not ("a" <= before <= "z") and not ("a" <= after <= "z"):
                return True
            at = folded.find(needle, at + 1)
        return False


_last_probe: Probe | None = None


def may_match(clauses: Sequence[Clause], probe: Probe) -> bool:
    """False only when a pattern with these clauses cannot match the probed text."""
    if probe._tokens is not None or probe._lookups >= Probe.SEARCHES_BEFORE_SET:
        # the token set is (to be) built: each clause is one set test and a few searches
        tokens, folded = probe.tokens, probe.folded
        for clause in clauses:
            split = _SPLIT.get(clause)
            if split is None:
                split = _SPLIT[clause] = _split(clause)
            token_words, substrings, checks = split
            if tokens.isdisjoint(token_words):
                for w, (inner, runs, letters_only) in zip(substrings, checks, strict=True):
                    # searched for in the text only when the words inside it are tokens
                    # and its runs of letters are in some token (the short `joined`)
                    if not inner <= tokens:
                        continue
                    joined = probe.joined
                    if letters_only:
                        if w in joined:
                            break
                        continue
                    for run in runs:
                        if run not in joined:
                            break
                    else:
                        if w in folded:
                            break
                else:
                    return False
        return True
    for clause in clauses:
        for is_token, word in clause:
            if probe.has_token(word) if is_token else word in probe.folded:  # type: ignore[arg-type,operator]
                break
        else:
            return False
    return True


_Check = tuple[frozenset[bytes], tuple[str, ...], bool]  # (inner tokens, runs, letters only)
_SPLIT: dict[Clause, tuple[frozenset[bytes], tuple[str, ...], tuple[_Check, ...]]] = {}


def any_clause(clause_lists: Sequence[Sequence[Clause]]) -> Clause | None:
    """One clause that holds whenever any of the patterns with these clause lists can
    match: a clause of each, united (a match of one pattern satisfies all its clauses,
    so the one chosen, so the union). None when some pattern has no clause (no word is
    needed for it to match): then no such clause exists.

    `may_match((any_clause(lists),), probe)` is False only when none can match.
    """
    united: set[Word] = set()
    for clauses in clause_lists:
        if not clauses:
            return None
        # the clause cheapest to test with the token set built (fewest substrings, each a
        # scan of the text; tokens are one set test), then the most selective
        cheapest = min(clauses, key=lambda c: (sum(not t for t, _ in c), -_quality(c)[0]))
        united |= cheapest
    return frozenset(united) if united else None


def _split(clause: Clause) -> tuple[frozenset[bytes], tuple[str, ...], tuple[_Check, ...]]:
    """A clause as (its token words, its substrings, how to rule each substring out)."""
    tokens = frozenset(w for is_token, w in clause if is_token)
    substrings = tuple(w for is_token, w in clause if not is_token)
    checks = tuple(
        (inner_tokens(w), tuple(_RUN.findall(w)), _RUN.fullmatch(w) is not None)  # type: ignore[arg-type]
        for w in substrings
    )
    return tokens, substrings, checks  # type: ignore[return-value]


_RUN = re.compile(r"[a-z]+")


def inner_tokens(substring: str) -> frozenset[bytes]:
    """The runs of letters a-z inside `substring` with a character that is no such letter
    on both sides ("you" in "did you "): wherever the substring is in a folded text, each
    of them is a whole token there, so a text without one of them holds no `substring`."""
    return frozenset(
        m.group().encode()
        for m in _RUN.finditer(substring)
        if m.start() > 0 and m.end() < len(substring)
    )


# -- reading the clauses out of a pattern -------------------------------------------------


# Words too frequent to say anything: a clause made of them is a poor gate.
COMMON_WORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "for", "from", "have",
        "i", "if", "in", "is", "it", "its", "of", "on", "or", "so", "that", "the", "their",
        "there", "these", "they", "this", "those", "to", "was", "we", "what", "when", "which",
        "who", "will", "with", "would", "you", "your",
    }
)  # fmt: skip


def _strength(word: Word) -> float:
    """Longer words are rarer in ordinary text (common ones aside); tokens are cheaper."""
    is_token, raw = word
    text = raw.decode() if isinstance(raw, bytes) else raw
    if not any(c.isalnum() for c in text):
        return 0.0
    if text.strip(" '") in COMMON_WORDS:
        return 0.5
    # Past a few letters a word is rare enough; then a set lookup beats a text scan.
    return len(text) + 3.0 if is_token else min(len(text), 8.0)


def _quality(clause: Clause) -> tuple[float, int]:
    return min(map(_strength, clause)), -len(clause)


def _bounding(item: tuple | None) -> bool:
    """Whether this item guarantees that the character next to it is no letter a-z."""
    if item is None:
        return False
    op, av = item
    if op is _c.AT:
        return av in (
            _c.AT_BOUNDARY, _c.AT_BEGINNING, _c.AT_BEGINNING_LINE, _c.AT_BEGINNING_STRING,
            _c.AT_END, _c.AT_END_LINE, _c.AT_END_STRING,
        )  # fmt: skip
    if op is _c.LITERAL:
        return _non_letter(chr(av))
    if op is _c.IN:  # a class of spaces, digits or non-letter characters only
        return all(
            (kind is _c.CATEGORY and value in (_c.CATEGORY_SPACE, _c.CATEGORY_DIGIT))
            or (kind is _c.LITERAL and _non_letter(chr(value)))
            for kind, value in av
        )
    if op in _REPEATS and av[0] >= 1 and len(av[2].data) == 1:
        return _bounding(av[2].data[0])  # e.g. `\s+`: one or more of them
    return False


def _non_letter(char: str) -> bool:
    """Whether `char` (as a pattern literal) only ever matches non-letters of the fold."""
    return char not in FOLD and _NON_LETTER.fullmatch(fold(char)) is not None


_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT)


def _edge_bounded(items: list, last: bool) -> bool:
    """Whether the last (first) character a non-empty match of `items` ends (starts)
    with is no letter."""
    if not items:
        return False
    op, av = items[-1 if last else 0]
    if _bounding(items[-1 if last else 0]) and op is not _c.AT:
        return True
    if op is _c.BRANCH:
        return all(_edge_bounded(alt.data, last) for alt in av[1])
    if op is _c.SUBPATTERN:
        return _edge_bounded(av[-1].data, last)
    return False


def _before(items: list, i: int, left: bool) -> bool:
    """Whether the character before `items[i]` is no letter (or there is none)."""
    while i:
        op, av = items[i - 1]
        if _bounding(items[i - 1]):
            return True
        # an optional group that ends with a non-letter: bounded if what precedes it is
        if op in _REPEATS and av[0] == 0 and _edge_bounded(av[2].data, last=True):
            i -= 1
            continue
        return False
    return left


def _after(items: list, i: int, right: bool) -> bool:
    """Whether the character after `items[i]` is no letter (or there is none)."""
    n = len(items)
    while i + 1 < n:
        op, av = items[i + 1]
        if _bounding(items[i + 1]):
            return True
        if op in _REPEATS and av[0] == 0 and _edge_bounded(av[2].data, last=False):
            i += 1
            continue
        return False
    return right


def _run_clauses(run: str, left: bool, right: bool) -> list[Clause]:
    """A run of literal characters: itself as a substring, and its complete tokens."""
    clauses: list[Clause] = [frozenset([(False, run)])]
    pieces = _NON_LETTER.split(run)
    for i, piece in enumerate(pieces):
        complete = (i > 0 or left) and (i < len(pieces) - 1 or right)
        if piece and complete:
            clauses.append(frozenset([(True, piece.encode())]))
    return clauses


def _branch_clause(alternatives: list[list[Clause]]) -> list[Clause]:
    """One clause for "one of these alternatives matched": a word from each, united."""
    united: set[Word] = set()
    for clauses in alternatives:
        if not clauses:
            return []

        def cost(clause: Clause, united: set[Word] = united) -> tuple[float, int]:
            new = clause - united  # words already in the union cost nothing
            return (-min(map(_strength, new)), len(new)) if new else (float("-inf"), 0)

        chosen = min(clauses, key=cost)
        united |= chosen
    return [frozenset(united)]


def _required(items: list, left: bool, right: bool) -> list[Clause]:
    """Clauses every match of the sequence `items` satisfies.

    `left`/`right`: whether the characters just before/after the sequence are no letters.
    """
    clauses: list[Clause] = []
    run: list[str] = []
    run_left = False
    n = len(items)
    for i, (op, av) in enumerate(items):
        before = _before(items, i, left)
        after = _after(items, i, right)
        if op is _c.LITERAL and chr(av).isascii():
            if not run:
                run_left = before
            run.append(chr(av).lower())
            if i + 1 < n and items[i + 1][0] is _c.LITERAL and chr(items[i + 1][1]).isascii():
                continue
            clauses.extend(_run_clauses("".join(run), run_left, after))
            run = []
        elif op is _c.SUBPATTERN:
            clauses.extend(_required(av[-1].data, before, after))
        elif op is _c.ATOMIC_GROUP:
            clauses.extend(_required(av.data, before, after))
        elif op is _c.BRANCH:
            clauses.extend(_branch_clause([_required(alt.data, before, after) for alt in av[1]]))
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            low, high, body = av
            if low >= 1:
                clauses.extend(_required(body.data, before, after and high == 1))
        # anything else (classes, anchors, lookarounds, ...) requires no word
    return clauses


def required_literals(pattern: re.Pattern[str]) -> tuple[Clause, ...]:
    """The most selective clauses every match of `pattern` satisfies; () when unknown."""
    if _parser is None or not isinstance(pattern.pattern, str):
        return ()
    try:
        parsed = _parser.parse(pattern.pattern, pattern.flags)
        clauses = set(_required(parsed.data, False, False))
    except Exception:  # pragma: no cover - unknown parser shape: no gate, same results
        return ()
    # equals in quality in the order of their words, not of the set, which changes with
    # the hash seed (and with it which words gated a pattern: an audit's cost moved 15%
    # from one process to the next)
    ordered = sorted(clauses, key=lambda clause: sorted(map(repr, clause)))
    best = sorted(ordered, key=_quality, reverse=True)[:MAX_CLAUSES]
    return tuple(_minimal(clause) for clause in best)


def _minimal(clause: Clause) -> Clause:
    """The clause without words implied by others: if "fuck" is there, so is "motherfuck"'s
    requirement met, and a token holding a searched substring implies that substring."""
    substrings = [w for is_token, w in clause if not is_token and isinstance(w, str)]
    kept: set[Word] = set()
    for is_token, word in clause:
        text = word.decode() if isinstance(word, bytes) else word
        if any(other != text and other in text for other in substrings) or (
            is_token and text in substrings
        ):
            continue
        kept.add((is_token, word))
    return frozenset(kept)


# -- where a match can start --------------------------------------------------------------


def leading_literals(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """ASCII prefixes, lower case, one of which the folded text holds wherever a match of
    `pattern` starts; None when the pattern does not start with literal text.

    (An IGNORECASE literal matches a character whose fold is the literal's lower case:
    `FOLD` covers every non-ASCII twin of an ASCII letter.)"""
    if _parser is None or not isinstance(pattern.pattern, str):
        return None
    try:
        found = _leading(_parser.parse(pattern.pattern, pattern.flags).data)
    except Exception:  # pragma: no cover - unknown parser shape: no anchors, same results
        return None
    if not found:
        return None
    # a prefix holding a shorter one finds nothing more
    return tuple(sorted(p for p in found if not any(q != p and p.startswith(q) for q in found)))


def _leading(items: list) -> set[str] | None:
    i = 0
    while i < len(items) and items[i][0] is _c.AT:  # zero-width: `\b`, `^`
        i += 1
    if i == len(items):
        return None
    op, av = items[i]
    if op is _c.LITERAL:
        run = []
        while i < len(items) and items[i][0] is _c.LITERAL and chr(items[i][1]).isascii():
            run.append(chr(items[i][1]).lower())
            i += 1
        return {"".join(run)} if run else None
    if op is _c.SUBPATTERN:
        return _leading(av[-1].data)
    if op is _c.ATOMIC_GROUP:
        return _leading(av.data)
    if op is _c.BRANCH:
        found: set[str] = set()
        for alternative in av[1]:
            lead = _leading(alternative.data)
            if lead is None:
                return None
            found |= lead
        return found
    return None


# Past this many tries at candidate starts, one plain search is cheaper (and bounded).
MAX_ANCHORED_TRIES = 64


def anchored_search(
    pattern: re.Pattern[str], prefixes: tuple[str, ...] | None, probe: Probe
) -> bool:
    """`pattern.search(probe.text) is not None`, trying the pattern only where the folded
    text holds one of its `leading_literals`: `re` tries a pattern that starts with `\\b`
    at every position of the text, `str.find` jumps to the few candidates."""
    text, folded = probe.text, probe.folded
    if prefixes is None or len(folded) != len(text):
        return pattern.search(text) is not None
    match, find = pattern.match, folded.find
    tries = 0
    for prefix in prefixes:
        at = find(prefix)
        while at >= 0:
            if match(text, at) is not None:
                return True
            tries += 1
            if tries > MAX_ANCHORED_TRIES:
                return pattern.search(text) is not None
            at = find(prefix, at + 1)
    return False
