"""Bare URLs: what a GFM or linkify renderer turns into a link without any markup.

GFM's autolink extension links scheme URLs, `www.` hosts and e-mail addresses; linkify
renderers (markdown-it's `linkify`, most chat UIs) also link `//host` and bare domains
with a known top-level domain (`evil.com/x`, `setup.py`). This module finds a superset
of those in the plain text of a paragraph (never in code, never inside a markdown link)
and tells each one's host, as `parse_http_url` (the WHATWG parser) reads it.

A candidate is a run of characters without whitespace or angle brackets around one of
the markers `//`, `@`, `www.` or `x.y`; every marker in a run is judged, so an allowed URL
cannot carry a second destination along (`https://ok.example/?u=evil.com`). The work per
run is bounded (`MAX_MARKERS`): a run with more markers is refused whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from linkify_it import LinkifyIt

from .urls import USERINFO, host_allowed, parse_http_url

MAX_MARKERS = 16

# Top-level domains a linkify renderer links without a scheme: linkify-it's default list
# and the two-letter country codes (from linkify-it, MIT licence).
_CC_TLDS = (
    "ac ad ae af ag ai al am an ao aq ar as at au aw ax az ba bb bd be bf bg bh bi bj bm bn "
    "bo br bs bt bv bw by bz ca cc cd cf cg ch ci ck cl cm cn co cr cu cv cw cx cy cz de dj "
    "dk dm do dz ec ee eg er es et eu fi fj fk fm fo fr ga gb gd ge gf gg gh gi gl gm gn gp "
    "gq gr gs gt gu gw gy hk hm hn hr ht hu id ie il im in io iq ir is it je jm jo jp ke kg "
    "kh ki km kn kp kr kw ky kz la lb lc li lk lr ls lt lu lv ly ma mc md me mg mh mk ml mm "
    "mn mo mp mq mr ms mt mu mv mw mx my mz na nc ne nf ng ni nl no np nr nu nz om pa pe pf "
    "pg ph pk pl pm pn pr ps pt pw py qa re ro rs ru rw sa sb sc sd se sg sh si sj sk sl sm "
    "sn so sr st su sv sx sy sz tc td tf tg th tj tk tl tm tn to tr tt tv tw tz ua ug uk us "
    "uy uz va vc ve vg vi vn vu wf ws ye yt za zm zw"
)
KNOWN_TLDS = frozenset(
    _CC_TLDS.split()
    + "biz com edu gov net org pro web xxx aero asia coop info museum name shop рф".split()  # noqa: SIM905
)

# matched as linkify matches them: ignoring case the way `re` does ("cİ" is "ci")
_KNOWN_TLD = re.compile("(?:" + "|".join(sorted(KNOWN_TLDS)) + r")\Z", re.IGNORECASE)
_MARKER = re.compile(r"//|@|[wW][wW][wW]\.|(?:[^\W_]|[$+=^`|~]|[^\x00-\x7f\s])\.[^\W\d_]")
# a cheap pre-scan: every `_MARKER` match has its first "/", "@" or "." (the one after
# "www" or after the "x" of "x.y") within its first four characters, and that character
# is one of these (a "." only before a letter or after a "w")
_PRE_MARKER = re.compile(r"//|@|\.(?:[^\W\d_]|(?<=[wW]\.))")
_RUN_END = re.compile(r"[\s<>]")
_SPACE = re.compile(r"\s")
# matched from where the scan stands, up to a marker: ends where the marker's run starts
# (after the last blank or angle bracket; no match: the run starts where the scan stands).
# `.*` jumps to the end and backs up, so it costs the run's length, not the window's.
RUN_START = re.compile(r".*[\s<>]", re.DOTALL)
_TRAILING = ".,:;!?*_~'\")]}"
_LINKED_SCHEMES = ("https", "http", "ftp")
_SCHEME_BEFORE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):\Z")
# (the local part as linkify reads it: also ; : & = $ , and ")
_EMAIL = re.compile(
    r"(?:mailto:)?[\w.+\-;:&=$,\"]+@((?:[^\W_](?:[\w\-]{0,61}[^\W_])?\.)+[^\W\d_][\w\-]*)",
    re.IGNORECASE,
)
# a domain linkify links without a scheme: not after a letter, digit or one of . : / - _ @
# (a label is made of "pseudo-letters", as linkify reads them: letters, digits and symbols
# such as $ + = ^ ` | ~; every non-ASCII character counts, a superset)
_L = r"[^\W_]|[$+=^`|~]|[^\x00-\x7f\s]"
_FUZZY = re.compile(
    rf"(?<![\w.:/\-@])((?:(?:{_L})(?:(?:{_L})|-){{0,62}}\.)+([^\W\d_]{{2,63}}|xn--[\w\-]{{1,59}}))"
    r"(?![\w\-])"
)
_WWW = re.compile(r"(?<![\w.\-])[^\s/?#@]*?www\.", re.IGNORECASE)

LINK = "link"  # a URL with a scheme, `//`, `www.` or a path: removed or defanged
DOMAIN = "domain"  # a bare domain name: made non-linkable in place
EMAIL = "email"


@dataclass(slots=True)
class BareURL:
    start: int  # offsets of the candidate in the paragraph text
    end: int
    url: str  # what a renderer would link to (first destination of the run)
    host: str
    kind: str  # LINK, DOMAIN or EMAIL
    allowed: bool
    unsafe_scheme: bool = False


def marker_search(text: str, pos: int = 0, endpos: int | None = None) -> re.Match[str] | None:
    """`_MARKER.search(text, pos, endpos)`, found by the cheap pre-scan first: `_MARKER`
    tries every position, which costs far more on prose than looking for the few
    characters every marker holds, then matching `_MARKER` in a window of 7 around them."""
    n = len(text) if endpos is None else endpos
    find = _PRE_MARKER.search
    at = pos
    while True:
        p = find(text, at, n)
        if p is None:
            return None
        s = p.start()
        if text[s] != ".":
            # "//" or "@": a marker itself, and no marker starts before it (each holds
            # a pre-scan match in its first four characters, and none of those is a "/"
            # or an "@" past its start): the same match as `_MARKER` finds
            return p
        m = _MARKER.search(text, s - 3 if s - 3 > pos else pos, s + 3 if s + 3 < n else n)
        if m is not None:
            return m
        at = s + 1


# the "." of `_PRE_MARKER` alone: `re` scans for one literal much faster than for an
# alternation (`//|@` costs ~10 ns a character, a "." and its check ~3)
_DOT_MARKER = re.compile(r"\.(?:[^\W\d_]|(?<=[wW]\.))")


def may_hold_url(text: str) -> bool:
    """False when `text` has none of the markers every candidate holds (cheap)."""
    if "//" not in text and "@" not in text and _DOT_MARKER.search(text) is None:
        return False  # (no `_PRE_MARKER` match, so no marker)
    return marker_search(text) is not None


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """The run without leading wrappers and trailing punctuation (as GFM trims)."""
    while start < end and not (text[start].isalnum() or text[start] == "/"):
        start += 1
    while end > start and text[end - 1] in _TRAILING:
        end -= 1
    return start, end


_PLAIN_AUTHORITY = re.compile(r"(?:[A-Za-z0-9\-]+\.)*[A-Za-z0-9\-]+\.?(?::\d{1,5})?")
_FAST_HOST = re.compile(r"[a-z0-9\-]+(?:\.[a-z0-9\-]+)*")
# where the authority ends in the href a renderer writes (a backslash is percent-encoded
# there, where a browser reading the text ends the authority at it): up to here, both
# readings must see the same plain authority
_HOST_END = re.compile(r"[/?#]")


def _judge(url: str, allowed: tuple[str, ...]) -> tuple[str, bool]:
    """The host a browser reads, and whether the URL may stay: only when its host is
    allowed and written plainly (letters, digits, dots, hyphens, a port), because a
    renderer may cut any other authority somewhere else than the URL parser does
    (`https://acme.exam%70le` is linked as `https://acme.exam`), or write it into the
    href so that it goes elsewhere (`https://acme.example\\@evil.example`, see urls).

    Only the scheme and authority decide, so the verdict is memoised on them."""
    slashes = url.find("//")
    rest = url[slashes + 2 :] if slashes >= 0 else url
    stop = _HOST_END.search(rest)
    authority = rest[: stop.start()] if stop else rest
    return _judge_authority(url[: slashes + 2] if slashes >= 0 else "", authority, allowed)


@lru_cache(maxsize=8192)
def _judge_authority(prefix: str, authority: str, allowed: tuple[str, ...]) -> tuple[str, bool]:
    plain = _PLAIN_AUTHORITY.fullmatch(authority) is not None
    host_text = authority.split(":", 1)[0].lower()
    last = host_text.rstrip(".").rpartition(".")[2]
    if (
        plain
        and prefix.lower() in ("http://", "https://", "//", "")
        and _FAST_HOST.fullmatch(host_text.rstrip("."))
        and not last.isdigit()
        and not last.startswith("0x")
        and "xn--" not in host_text
    ):  # what the WHATWG parser would make of it, without asking it
        host = host_text
        return host, host_allowed(host, allowed)
    canon = parse_http_url((prefix if prefix.startswith("http") else "http://") + authority + "/")
    ok = canon.url is not None and canon.problem != USERINFO and host_allowed(canon.host, allowed)
    return canon.href_host or canon.host, ok and plain


# (`[^\W_]` is what `str.isalnum` accepts)
_HOST_CHARS = re.compile(r"(?:[^\W_]|[.\-:@])*")


def _skip_host(core: str, pos: int) -> int:
    """Past the plainly written host (and userinfo, port) starting at `pos`."""
    m = _HOST_CHARS.match(core, pos)  # (always matches, perhaps nothing)
    return m.end() if m is not None else pos


# A run that is one plainly written http(s) or `www.` URL whose path and query hold no
# other marker (no ".", "@", "//"): its one destination is the run itself, as the scan in
# `_scan_destinations` finds (property-tested against it), without the scan.
_SIMPLE_URL = re.compile(
    r"(?:https?://|www\.)[a-z0-9\-]+(?:\.[a-z0-9\-]+)+(?::\d{1,5})?"
    r"(?:/[A-Za-z0-9=&%+\-]+)*/?(?:\?[A-Za-z0-9=&%+\-]*)?"
)


def _destinations(core: str, allowed: tuple[str, ...]):
    """(url, host, kind, allowed, unsafe_scheme, end in core) of each destination a renderer
    could make of `core`, in order; None when there are too many to judge."""
    if _SIMPLE_URL.fullmatch(core) is not None:
        return _simple_destinations(core, allowed)
    return _scan_destinations(core, allowed)


def _simple_destinations(core: str, allowed: tuple[str, ...]):
    """`_destinations` of a core that `_SIMPLE_URL` matches whole."""
    host, ok = _judge(core if core[0] == "h" else "http://" + core, allowed)
    return [(core, host, LINK, ok, False, len(core))]


def _scan_destinations(core: str, allowed: tuple[str, ...]):
    """`_destinations`, marker by marker."""
    found = []
    pos = 0
    n = len(core)
    markers = 0
    while pos < n:
        m = marker_search(core, pos)
        if m is None:
            break
        markers += 1
        if markers > MAX_MARKERS:
            return None
        k, token = m.start(), m.group(0)
        if token == "//":
            s = _SCHEME_BEFORE.search(core, max(0, k - 33), k)
            scheme, scheme_at = (s.group(1).lower(), s.start()) if s else ("", k)
            if scheme and scheme not in _LINKED_SCHEMES:
                # linkify-it also finds a scheme at the end of a longer word
                # (`path.https://x.example` links `https://x.example`)
                for known in _LINKED_SCHEMES:
                    if scheme.endswith(known):
                        scheme_at += len(scheme) - len(known)
                        scheme = known
                        break
            run_end = _RUN_END.search(core, k)
            end_at = run_end.start() if run_end else n
            linked = _linkified_end(core, scheme_at) if scheme in ("http", "https") else -1
            if linked > scheme_at:  # the link markdown-it makes: judged as its href
                host, ok = _judge(core[scheme_at:linked], allowed)
                if marker_search(core, linked, end_at) is None:  # nothing else after it
                    found.append((core[scheme_at:end_at], host, LINK, ok, False, end_at))
                else:
                    found.append((core[scheme_at:linked], host, LINK, ok, False, linked))
            elif scheme in ("http", "https"):
                url = core[scheme_at:end_at]
                host, ok = _judge(url, allowed)
                found.append((url, host, LINK, ok, False, end_at))
            elif scheme == "ftp":
                found.append((core[scheme_at:end_at], "", LINK, False, True, end_at))
            elif not scheme and not (k > 0 and core[k - 1] in ":/"):
                url = "https:" + core[k:end_at]
                host, ok = _judge(url, allowed)
                found.append((core[k:end_at], host, LINK, ok, False, end_at))
            pos = k + 2
            if scheme in ("http", "https", "ftp") or not scheme:
                pos = _skip_host(core, pos)  # its dots and "@" belong to this destination
            pos = max(pos, linked)  # a domain inside the link is no second destination
            continue
        if token == "@":
            start = k
            while start > 0 and (core[start - 1].isalnum() or core[start - 1] in '._+-;:&=$,"'):
                start -= 1
            e = _EMAIL.match(core, start)
            if e is not None and e.end() > k:
                domain = e.group(1)
                host, ok = _judge("http://" + domain + "/", allowed)
                found.append((core[start : e.end()], host, EMAIL, ok, False, e.end()))
                pos = e.end()
            else:
                pos = k + 1
            continue
        if token.lower() == "www.":
            w = _WWW.search(core, max(0, k - 64), k + 4)
            start = w.start() if w is not None else k
            space = _SPACE.search(core, start)  # (`str.isspace` is what `\s` matches)
            end = space.start() if space else n
            url = "http://" + core[start:end]
            host, ok = _judge(url, allowed)
            found.append((core[start:end], host, LINK, ok, False, end))
            pos = _skip_host(core, k + 4)  # the rest may hold other destinations
            continue
        # "x.y": a bare domain when its top-level domain is one a renderer knows
        f = None
        for f in _FUZZY.finditer(core, max(0, k - 253), min(n, k + 66)):
            if f.end() > k:
                break
        if (
            f is not None
            and f.start() <= k < f.end()
            and _KNOWN_TLD.match(f.group(2)) is not None
            and f.end() > pos
        ):
            end = f.end()
            kind = DOMAIN
            if end < n and core[end] in ":/?#":
                kind = LINK
                space = _SPACE.search(core, end)
                end = space.start() if space else n
            host, ok = _judge("http://" + core[f.start() : end], allowed)
            found.append((core[f.start() : end], host, kind, ok, False, end))
            pos = f.end()  # the path may hold other destinations
            continue
        pos = k + 1
    return found


# linkify-it reads at most this much of a run (its regexes cost more than the scan's); a
# link that may be longer is not trusted as one: every marker in it is judged
LINKIFY_MAX = 4096
# markdown-it's linkify: the same defaults (its `MarkdownIt` makes one `LinkifyIt()`)
_LINKIFY = LinkifyIt()
_NOT_BEFORE_SCHEME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+-")


def _linkified_end(core: str, scheme_at: int) -> int:
    """Where the link markdown-it's linkify makes of the scheme URL at `scheme_at` ends
    (as its inline rule does: a scheme not after a letter, digit or one of . + -, the
    link linkify-it matches from there, without trailing "*"), or `scheme_at` when it
    makes none. Everything up to there is that one link: a domain in its query is no
    second one (`https://ok.example/?labels=a,foo.com`), and what follows it is read
    apart (`https://ok.example,evil.com`)."""
    if scheme_at > 0 and core[scheme_at - 1] in _NOT_BEFORE_SCHEME:
        return scheme_at
    window = core[scheme_at : scheme_at + LINKIFY_MAX]
    match = _LINKIFY.match_at_start(window)
    if match is None or (match.last_index >= len(window) and len(window) == LINKIFY_MAX):
        return scheme_at  # none, or it may go on past the window: every marker judged
    url: str = match.url
    return (
        scheme_at + len(url.rstrip("*"))
        if url == core[scheme_at : scheme_at + len(url)]
        else scheme_at
    )


_cached_destinations = lru_cache(maxsize=8192)(_destinations)


def find_bare_urls(
    text: str, allowed: tuple[str, ...], skip, memo: dict | None = None
) -> list[BareURL]:
    """Candidates in `text` outside the spans `skip` (a SpanSet of code and links), each
    with the verdict on every destination it holds (the worst wins).

    `memo` (for one `allowed`) keeps the destinations of each run: the re-check after
    removals meets the same runs again, and judges them once."""
    return [
        BareURL(s, e, *verdict) for s, e, verdict in find_bare_verdicts(text, allowed, skip, memo)
    ]


Verdict = tuple[str, str, str, bool, bool]  # (url, host, kind, allowed, unsafe scheme)


def find_bare_verdicts(
    text: str, allowed: tuple[str, ...], skip, memo: dict | None = None
) -> list[tuple[int, int, Verdict]]:
    """`find_bare_urls` as (start, end, verdict) tuples: what the rules read, without a
    `BareURL` per candidate. A verdict is shared by every run with the same text."""
    out: list[tuple[int, int, Verdict]] = []
    if skip or len(text) < SIMPLE_RUNS_FROM:
        _scan_runs(text, 0, len(text), allowed, skip, memo, out)
        return out
    # Plain text (no code, no link): the runs that are one simple URL (most, in a text
    # with many) are found in one regex pass, the text between them is scanned.
    pos = 0
    append = out.append
    for start, end, scheme, authority in _simple_runs(text):
        if start > pos and not text[pos:start].isspace():
            _scan_runs(text, pos, start, allowed, None, memo, out)
        host, ok = _judge_authority("h" + scheme if scheme else "http://", authority, allowed)
        append((start, end, (text[start:end], host, LINK, ok, False)))
        pos = end
    if pos < len(text):
        _scan_runs(text, pos, len(text), allowed, None, memo, out)
    return out


# A whole run (between blanks or angle brackets) that `_SIMPLE_URL` matches and that
# `_trim` leaves whole: its only destination is itself (see `_simple_destinations`).
# (Possessive: giving back any part could not make a match, and `www.www.www…` would
# cost a long retreat.)
_SIMPLE_RUN_BODY = (
    r"(?:h(ttps?://)|(?=www\.))([a-z0-9\-]++(?:\.[a-z0-9\-]++)++(?::\d{1,5})?)"
    r"(?:/[A-Za-z0-9=&%+\-]++)*+/?(?:\?[A-Za-z0-9=&%+\-]++)?(?![^\s<>])"
)
_SIMPLE_RUN_FIRST = re.compile(_SIMPLE_RUN_BODY)


def _simple_runs(text: str):
    """(start, end, "ttp://" / "ttps://" / None for `www.`, authority) of each run of
    `text` that `_SIMPLE_RUN_BODY` matches whole, in order.

    Such a run starts at 0 or after a blank or angle bracket, with "http://", "https://"
    or "www.": the places it can start are found from each "://" and "www." by
    `str.find` (a memchr), and only there is the body matched (a regex search would
    test every position of the text)."""
    match = _SIMPLE_RUN_FIRST.match
    blank = _RUN_END.match  # a blank or angle bracket
    last_end = 0
    for p in _simple_run_starts(text):
        if p < last_end or (p > 0 and blank(text, p - 1) is None):
            continue  # inside the run found before, or not where a run starts
        m = match(text, p)
        if m is not None:
            last_end = m.end()
            yield p, last_end, m.group(1), m.group(2)


def _simple_run_starts(text: str) -> list[int]:
    """Where `_SIMPLE_RUN_BODY` can match, sorted: each "http" or "https" right before
    a "://", and each "www."."""
    find = text.find
    starts = []
    k = find("://")
    while k >= 0:
        if k >= 5 and text.startswith("https", k - 5):
            starts.append(k - 5)
        elif k >= 4 and text.startswith("http", k - 4):
            starts.append(k - 4)
        k = find("://", k + 3)
    k = find("www.")
    while k >= 0:
        starts.append(k)
        k = find("www.", k + 1)
    starts.sort()
    return starts


# texts shorter than this are scanned run by run only (with the memoised verdicts of
# runs, cheaper than the one regex pass over simple runs); both ways find the same (see
# tests/analyzers/engine/test_guardrails_speed.py)
SIMPLE_RUNS_FROM = 4096


def _scan_bare_urls(
    text: str,
    pos: int,
    n: int,
    allowed: tuple[str, ...],
    skip,
    memo: dict | None,
    out: list[BareURL],
) -> None:
    """`find_bare_urls` on `text[pos:n]`, run by run (`n` is a run boundary)."""
    found: list[tuple[int, int, Verdict]] = []
    _scan_runs(text, pos, n, allowed, skip, memo, found)
    out.extend(BareURL(s, e, *verdict) for s, e, verdict in found)


def _scan_runs(
    text: str,
    pos: int,
    n: int,
    allowed: tuple[str, ...],
    skip,
    memo: dict | None,
    out: list[tuple[int, int, Verdict]],
) -> None:
    """`find_bare_verdicts` on `text[pos:n]`, run by run (`n` is a run boundary)."""
    containing = skip.containing if skip else None
    append = out.append
    while pos < n:
        m = marker_search(text, pos, n)
        if m is None:
            break
        k = m.start()
        if containing is not None:
            span = containing(k)
            if span is not None:
                pos = span[1]
                continue
        # the run around the marker (text before `pos` is done, or a skipped span)
        b = RUN_START.match(text, pos, k)
        start = b.end() if b is not None else pos
        if containing is not None:
            while start < k and containing(start) is not None:
                start += 1
        # to the next whitespace, over any code span or link: a renderer's linkify reads a
        # URL on through a backtick or a bracket (`https://x.example`code`` links "x`code`")
        end_m = _RUN_END.search(text, m.end())
        end = end_m.start() if end_m else n
        pos = end if end > k else k + 1
        s, e = _trim(text, start, end)
        if s >= e:
            continue
        core = text[s:e]
        if e - s <= CACHED_RUN_MAX:
            verdict = _run_verdict(core, allowed)
        elif memo is None:
            verdict = _verdict(core, allowed)
        elif core in memo:  # a long run: judged once per paragraph
            verdict = memo[core]
        else:
            verdict = memo[core] = _verdict(core, allowed)
        if verdict is not None:
            append((s, e, verdict))


def _verdict(core: str, allowed: tuple[str, ...]) -> tuple[str, str, str, bool, bool] | None:
    """(url, host, kind, allowed, unsafe scheme) of the candidate `core` as a whole (the
    worst of its destinations), or None when it holds none."""
    dests = _destinations(core, allowed)
    if dests is None:  # too many markers to judge: refused whole
        return core, "", LINK, False, False
    if not dests:
        return None
    bad = [d for d in dests if not d[3]]
    url, host, kind, _, unsafe, _ = bad[0] if bad else dests[0]
    if kind == DOMAIN and any(d[2] != DOMAIN for d in dests):
        kind = LINK  # escaping dots would leave the other destinations linkable
    return url, host, kind, not bad, unsafe


# Runs up to this long have their verdicts kept across audits (a bounded LRU: the same
# URLs recur from answer to answer); longer ones only within one paragraph (`memo`).
CACHED_RUN_MAX = 512
_run_verdict = lru_cache(maxsize=8192)(_verdict)


_ESCAPABLE = re.compile(r"[!-/:-@\[-`{-~]")


def inert(text: str) -> str:
    """`text` with every ASCII punctuation character backslash-escaped: it renders the
    same, and no renderer finds a URL in it (each piece between escapes is a bare word)."""
    return _ESCAPABLE.sub(lambda m: "\\" + m.group(0), text)


def escape_dots(text: str) -> str:
    """A bare domain that renders the same but is no link: `setup\\.py`."""
    return text.replace(".", "\\.")


_SCHEME_WORD = re.compile(r"(?i)\b(?:http|ftp)")


def defang(text: str) -> str:
    """`hxxps://evil[.]example/x`: readable, not clickable."""
    out = _SCHEME_WORD.sub(lambda m: "hxxp" if m.group(0).lower() == "http" else "fxp", text)
    return out.replace(".", "[.]").replace("@", "[@]")


def url_like(text: str) -> bool:
    """Whether a renderer could find any URL in `text` (a link label, say)."""
    if marker_search(text) is None:
        return False
    return any(
        (_cached_destinations if e - s <= CACHED_RUN_MAX else _destinations)(text[s:e], ()) != []
        for s, e in _runs(text)
    )


_RUN = re.compile(r"[^\s<>]+")


def _runs(text: str):
    for m in _RUN.finditer(text):
        s, e = _trim(text, m.start(), m.end())
        if s < e and marker_search(text, s, e):
            yield s, e
