"""Rules 2-5: HTML anchors, link classification and label upgrade, suffix normalisation,
dangling attributions."""

from __future__ import annotations

import html
import re
from functools import lru_cache

from ..contract import Annotation
from .context import Ctx
from .records import link_record
from .settings import GuardrailSettings
from .syntax.autolinks import (
    DOMAIN,
    EMAIL,
    RUN_START,
    Verdict,
    defang,
    escape_dots,
    find_bare_verdicts,
    inert,
    may_hold_url,
    url_like,
)
from .syntax.markdown import MdLink, escape_label, format_destination, scan_anchors
from .syntax.text import BlankRuns, SpanSet, merge_spans, one_line
from .syntax.urls import (
    USERINFO,
    CanonicalURL,
    canonicalize,
    host_allowed,
    is_tech_doc,
    parse_http_url,
    tech_doc_path_allowed,
)

GENERIC_LABELS = frozenset(
    {
        "here",
        "click here",
        "this",
        "this article",
        "the article",
        "article",
        "this page",
        "the page",
        "page",
        "source",
        "the source",
        "this source",
        "sources",
        "link",
        "this link",
        "the link",
        "read more",
        "learn more",
        "more",
        "see more",
        "this post",
        "the post",
        "this blog post",
        "blog post",
        "blog",
        "this blog",
        "the blog",
        "this study",
        "this report",
        "the report",
        "this resource",
        "this document",
        "this guide",
        "the guide",
        "guide",
        "docs",
        "the docs",
        "documentation",
        "the documentation",
        "website",
        "this website",
        "reference",
        "ref",
        "details",
        "more info",
        "more information",
        "url",
    }
)
_GENERIC_NUMBERED = re.compile(r"(?:source|ref|reference|link|citation)?\s*\d{1,3}")
_NON_WORD = re.compile(r"[^\w\s]+")
_LEFT_ATTRIBUTION = re.compile(
    r"(?:[—–]|(?<=\s)-|\baccording to|\bvia|\bsources?:|\bcourtesy of|\bcited in|\bas reported by)"
    r"[ \t]*$",
    re.IGNORECASE,
)
_TRAILING_PUNCT = ".,;:!?)"
_ATTRIBUTION_LABELS = frozenset(
    {
        "source",
        "sources",
        "the source",
        "this source",
        "link",
        "the link",
        "this link",
        "ref",
        "reference",
        "citation",
        "cite",
        "url",
    }
)


@lru_cache(maxsize=8192)
def canonical(dest: str) -> CanonicalURL:
    return canonicalize(dest)


@lru_cache(maxsize=8192)
def fragmentless(dest: str) -> str:
    """`canonical(dest).without_fragment`, or "" for an unusable URL."""
    return canonical(dest).without_fragment or ""


@lru_cache(maxsize=4096)
def is_generic(label: str, brand: str) -> bool:
    norm = " ".join(_NON_WORD.sub(" ", label.lower()).split())
    if not norm or norm in GENERIC_LABELS or _GENERIC_NUMBERED.fullmatch(norm):
        return True
    brand = brand.lower()
    if norm.startswith(brand + " ") or norm.startswith("the " + brand + " "):
        rest = norm.rpartition(brand + " ")[2]
        return rest in GENERIC_LABELS
    return False


def _suffix_core(suffix: str) -> list[str]:
    return suffix.split()


def strip_suffixes(label: str, suffix: str) -> tuple[str, int]:
    """Remove trailing repeats of the suffix (any case, any spacing); return (rest, count)."""
    tokens = [t.lower() for t in _suffix_core(suffix)]
    if not tokens:
        return label, 0
    end = len(label)
    count = 0
    while True:
        j = end
        for token in reversed(tokens):
            while j > 0 and label[j - 1].isspace():
                j -= 1
            if j < len(token) or label[j - len(token) : j].lower() != token:
                j = -1
                break
            j -= len(token)
        if j < 0:
            break
        end = j
        count += 1
    rest = label[:end].rstrip()
    return (rest, count) if rest else (label, 0)


@lru_cache(maxsize=64)
def _suffix_last_token(suffix: str) -> str:
    tokens = _suffix_core(suffix)
    return tokens[-1].lower() if tokens else ""


def _may_repeat_suffix(label: str, suffix: str) -> bool:
    """False when the suffix cannot be there twice: each repeat holds its last word.

    (Only trusted for an ASCII word: lower-casing a whole label and lower-casing its
    slices agree on ASCII letters, not on every letter, e.g. the Greek final sigma.)
    """
    token = _suffix_last_token(suffix)
    return not token.isascii() or label.lower().count(token) >= 2


def with_suffix(title: str, suffix: str) -> str:
    base, _ = strip_suffixes(title.strip(), suffix)
    return base + suffix if suffix.strip() else base


_TAB_NEWLINE = re.compile(r"[\t\n\r]")
_UNSAFE_IN_DESTINATION = re.compile(r"[\x00-\x20\x7f\\<>()]")


def anchor_destination(href: str) -> str:
    """A markdown destination that means what the anchor's href means to a browser.

    The href is read as a browser reads an attribute (entities decoded, tabs and newlines
    dropped: the WHATWG parser); a URL it cannot use is kept percent-encoded, so that the
    markdown link still forms and the link rules judge it.
    """
    value = html.unescape(href) if "&" in href else href
    canon = parse_http_url(value)
    if canon.url is not None:
        return format_destination(canon.url)
    value = _TAB_NEWLINE.sub("", value).strip()
    return _UNSAFE_IN_DESTINATION.sub(lambda m: f"%{ord(m.group(0)):02X}", value) or "%20"


def convert_anchors(ctx: Ctx) -> None:
    if "<a" not in ctx.doc.text and "<A" not in ctx.doc.text:
        return
    code, _ = ctx.code()
    edits = []
    for anchor in scan_anchors(ctx.doc.text, code):
        label = " ".join(anchor.label.split())
        markdown = f"[{escape_label(label)}]({anchor_destination(anchor.href)})"
        ctx.annotate(
            "links",
            "HTML_ANCHOR_CONVERTED",
            "info",
            "An HTML anchor was rewritten as a markdown link.",
            anchor.start,
            anchor.end,
        )
        edits.append((anchor.start, anchor.end, markdown))
    if edits:
        ctx.doc.apply(edits)


def classify(canon: CanonicalURL, ctx: Ctx) -> tuple[str | None, str, str]:
    """(code, severity, description) for a link to strip, or (None, "", "") to keep."""
    return _classify(canon, ctx.settings)


def _classify(canon: CanonicalURL, s: GuardrailSettings) -> tuple[str | None, str, str]:
    if canon.unsafe_scheme:
        what = canon.scheme + ":" if canon.scheme else "a relative URL"
        return "LINK_UNSAFE_SCHEME", "critical", f"Links must be absolute http(s); got {what}"
    if canon.href_host and canon.href_host != canon.host:
        return (
            "LINK_HOST_NOT_ALLOWED",
            "warning",
            f"The rendered link goes to {canon.href_host or '?'}, not to the host it shows"
            f" ({canon.host or '?'}).",
        )
    if canon.url is None:
        return "LINK_HOST_NOT_ALLOWED", "warning", f"Unusable URL ({canon.problem})."
    if canon.problem == USERINFO:
        return (
            "LINK_HOST_NOT_ALLOWED",
            "warning",
            f"The URL hides its real host ({canon.host}) behind userinfo.",
        )
    if not host_allowed(canon.host, s.allowed_hosts):
        return "LINK_HOST_NOT_ALLOWED", "warning", f"Host {canon.host} is not allowed."
    if (
        s.tech_doc_prefixes
        and is_tech_doc(canon, s.tech_doc_prefixes)
        and not tech_doc_path_allowed(canon, s.tech_doc_allowed_paths)
    ):
        return (
            "LINK_TECH_DOC_NOT_ALLOWED",
            "warning",
            "Technical documentation may only be cited from the allowed paths.",
        )
    return _KEEP


_DECISIONS_MAX = 8192
_KEEP = (None, "", "")


def decide(dest: str, settings: GuardrailSettings) -> tuple[str | None, str, str, str]:
    """`classify` of a destination, and its canonical URL (or the destination itself),
    memoised on the settings."""
    decision = settings.link_decisions.get(dest)
    if decision is None:
        canon = canonical(dest)
        decision = (*_classify(canon, settings), canon.url or dest)
        if len(settings.link_decisions) >= _DECISIONS_MAX:
            settings.link_decisions.clear()
        settings.link_decisions[dest] = decision
    return decision


def audit_links(ctx: Ctx) -> list[tuple[int, str]]:
    """Classify every link; return (position in the new text, label left) per stripped link."""
    links = ctx.links()
    if not links:
        return []
    text = ctx.doc.text
    edits: list[tuple[int, int, str]] = []
    removed: list[tuple[int, str]] = []  # (index into edits, label left in the text)
    settings = ctx.settings
    brand = settings.brand_name
    suffix = settings.title_suffix
    decisions = settings.link_decisions
    trace = ctx.out.trace
    last_end = -1
    run: _StripRun | None = None  # the same link stripped again and again, blanks between
    for link in links:
        if link.start < last_end:
            continue
        gap_start = last_end
        last_end = link.end
        code_, severity, why, url = decisions.get(link.dest) or decide(link.dest, settings)
        if code_ is not None:
            if (
                run is not None
                and MERGE_RUNS
                and run.end == gap_start
                and link.dest == run.dest
                and link.kind == run.kind
                and link.label == run.label
                and not text[gap_start : link.start].strip(" \t")
            ):
                run.extend(link.end)
                label = kept_label(link)
                removed.append((len(edits), label))
                edits.append((link.start, link.end, label))
                continue
            if run is not None:
                run.close(ctx)
            finding = _strip(ctx, link, url, code_, severity, why, edits, removed)
            run = _StripRun(link, finding)
            continue
        if run is not None:
            run.close(ctx)
            run = None
        label = link.label
        new_label = None
        inline = link.kind == "inline" or link.kind == "image"
        if inline and is_generic(label, brand):
            title = ctx.sources.titles.get(fragmentless(link.dest))
            if title:
                new_label = escape_label(with_suffix(title, suffix))
                ctx.annotate(
                    "links",
                    "LINK_LABEL_UPGRADED",
                    "info",
                    f"Generic label {label!r} replaced by the source title.",
                    link.start,
                    link.end,
                )
                trace.append("[AUDIT] REPLACE | " + one_line(f"{label} -> {new_label}"))
        if new_label is None and inline and suffix.strip() and _may_repeat_suffix(label, suffix):
            base, count = strip_suffixes(label, suffix)
            if count >= 2:
                new_label = base + suffix
                ctx.annotate(
                    "links",
                    "LINK_LABEL_SUFFIX_NORMALIZED",
                    "info",
                    f"The title suffix {suffix.strip()!r} was repeated {count} times.",
                    link.label_start,
                    link.label_end,
                )
                trace.append("[AUDIT] REPLACE | " + one_line(f"{label} -> {new_label}"))
        if new_label is not None:
            edits.append((link.label_start, link.label_end, new_label))
            ctx.link(url, new_label, "replace")
        else:
            if len(trace) < ctx.trace_room:
                trace.append("[AUDIT] KEEP | " + one_line(url))
            else:
                ctx.trace_cut += 1
            ctx.link(url, label, "keep")
    if run is not None:
        run.close(ctx)
    if not edits:
        return []
    positions = ctx.doc.apply(edits)
    if any_unsafe_link(ctx):  # a strip can let brackets around it form a new link
        neutralise_links(ctx)
        return []  # the positions are stale now: leave dangling attributions be
    return [(positions[i], label) for i, label in removed]


MERGE_RUNS = True  # (tests compare with False: the same cleaned text, finding by finding)


class _StripRun:
    """A stripped link and the identical ones right after it (blanks between): each is
    removed, one finding spans them all (100,000 of one autolink make one record)."""

    __slots__ = ("dest", "kind", "label", "start", "end", "finding", "count")

    def __init__(self, link: MdLink, finding) -> None:
        self.dest, self.kind, self.label = link.dest, link.kind, link.label
        self.start, self.end = link.start, link.end
        self.finding = finding
        self.count = 1

    def extend(self, end: int) -> None:
        self.end = end
        self.count += 1

    def close(self, ctx: Ctx) -> None:
        if self.count > 1 and self.finding is not None:  # None: past the limits, not built
            s, e = ctx.doc.orig_span(self.start, self.end)
            fields = self.finding.__dict__  # plain values, as validation sets them
            fields["start"], fields["end"] = s, e
            fields["evidence"] = ctx.original[s - ctx.base : e - ctx.base]
            fields["description"] = fields["description"].rstrip(".") + f" ({self.count} in a row)."
        return None


def _strip(
    ctx: Ctx,
    link: MdLink,
    url: str,
    code: str,
    severity: str,
    why: str,
    edits: list,
    removed: list,
) -> Annotation | None:
    """Strip a link, keeping its label unless the label is itself URL-like; an autolink,
    a definition or an image (fetched without a click) goes entirely. Its finding (None
    when past the audit's limits)."""
    finding = ctx.annotate("links", code, severity, why, link.start, link.end)
    if ctx.has_trace_room():
        ctx.out.trace.append(f"[AUDIT] STRIP | {code} | {one_line(url)}")
    else:
        ctx.trace_cut += 1
    ctx.link(url, link.label, "strip", code)
    if link.kind == "definition":
        edits.append((link.start, link.end, ""))
        return finding
    label = kept_label(link)
    removed.append((len(edits), label))
    edits.append((link.start, link.end, label))
    return finding


def kept_label(link: MdLink) -> str:
    """What a stripped link leaves: its label, unless a renderer could link the label
    itself, or the link was an image or autolink."""
    if link.kind in ("autolink", "image", "definition"):
        return ""
    return "" if url_like(link.label) else link.label


def any_unsafe_link(ctx: Ctx) -> bool:
    settings = ctx.settings
    decisions = settings.link_decisions
    for link in ctx.links():  # noqa: SIM110 - a loop: no generator made per call
        if (decisions.get(link.dest) or decide(link.dest, settings))[0]:
            return True
    return False


def neutralise_links(ctx: Ctx) -> None:
    """Strip links that stripping formed, then, if still needed, escape every bracket."""
    for _ in range(2):
        edits = []
        for link in ctx.links():
            code_, severity, why = classify(canonical(link.dest), ctx)
            if code_ is not None:
                ctx.annotate("links", code_, severity, why, link.start, link.end)
                ctx.trace("STRIP", code_, canonical(link.dest).url or link.dest)
                edits.append((link.start, link.end, kept_label(link)))
        if not edits:
            return
        ctx.doc.apply(edits)
    code, _ = ctx.code()
    text = ctx.doc.text
    edits = [
        (i, i + 1, "\\" + c)
        for i, c in enumerate(text)
        if c in "[]" and not code.containing(i) and not (i > 0 and text[i - 1] == "\\")
    ]
    if edits:
        ctx.doc.apply(edits)


# Where an attribution ending in an ASCII character (any case) starts, back from its end.
_ATTRIBUTION_LENGTHS = {
    "-": (1,),
    "o": (12,),
    "a": (3,),
    ":": (8, 7),
    "f": (11,),
    "n": (8,),
    "y": (14,),
}


def _left_attribution(text: str, left: int) -> re.Match[str] | None:
    """`_LEFT_ATTRIBUTION.search(text, max(0, left - 40), left)`, for a `left` with no
    space or tab before it: the attribution then ends at `left`, so when the character
    there is ASCII (not a newline, before which `$` also matches) its last character
    tells where it can start."""
    if left <= 0:
        return None  # nothing to match in an empty window
    c = text[left - 1]
    if not c.isascii() or c == "\n":
        return _LEFT_ATTRIBUTION.search(text, max(0, left - 40), left)
    for length in _ATTRIBUTION_LENGTHS.get(c.lower(), ()):
        if length <= left:
            m = _LEFT_ATTRIBUTION.match(text, left - length, left)
            if m is not None:
                return m
    return None


@lru_cache(maxsize=4096)
def is_attribution_label(label: str) -> bool:
    """Labels that only say "this came from somewhere": worthless once the link is gone."""
    norm = " ".join(_NON_WORD.sub(" ", label.lower()).split())
    return not norm or norm in _ATTRIBUTION_LABELS or bool(_GENERIC_NUMBERED.fullmatch(norm))


def strip_dangling(ctx: Ctx, stripped: list[tuple[int, str]]) -> None:
    """Remove "according to", "via", "— Source 3", "(source)", "()" left by stripped links."""
    text = ctx.doc.text
    n = len(text)
    brand = ctx.settings.brand_name.lower()
    edits: list[tuple[int, int, str]] = []
    # blank runs around the stripped links, and around the spans removed (two monotone
    # sequences of positions each): linear even when the strips left one long run
    around_links, around_spans = BlankRuns(text), BlankRuns(text)
    for p, label in stripped:
        q = p + len(label)
        attribution = is_attribution_label(label)
        weak = attribution or is_generic(label, brand) or label.strip().lower() == brand
        if not weak:
            continue
        left = around_links.start(p)
        right = around_links.end(q)
        span = None
        if left > 0 and text[left - 1] == "(" and right < n and text[right] == ")":
            span = (left - 1, right + 1)
        else:
            m = _left_attribution(text, left)
            if m is not None:
                span = (m.start(), q)
            elif attribution:
                span = (p, q)
        if span is None:
            continue
        start, end = span
        nxt = text[end] if end < n else "\n"
        if nxt in _TRAILING_PUNCT or nxt == "\n":
            start = around_spans.start(start)
            if start > 0 and text[start - 1] == "," and nxt in ".,;:!?\n":
                start -= 1
        else:
            end = around_spans.end(end)
        replacement = ""
        if (
            nxt not in _TRAILING_PUNCT
            and nxt != "\n"
            and start > 0
            and text[start - 1] not in " \t\n"
        ):
            replacement = " "
        if edits and start < edits[-1][1]:
            continue
        if start == end:
            continue
        ctx.annotate(
            "links",
            "DANGLING_ATTRIBUTION",
            "info",
            "An attribution was left without its (removed) link.",
            start,
            end,
        )
        ctx.out.trace.append("[AUDIT] STRIP | DANGLING_ATTRIBUTION | " + one_line(text[start:end]))
        edits.append((start, end, replacement))
    if edits:
        ctx.doc.apply(edits)


def audit_bare_urls(ctx: Ctx, record_kept: bool = True) -> None:
    """Bare URLs, `www.` hosts, `//host`, e-mail addresses and bare domains that a GFM or
    linkify renderer would link: each is judged like a link. One to a host that is not
    allowed is removed (or defanged, `bare_urls: "defang"`); a bare domain name is made
    non-linkable in place (`setup\\.py` renders as setup.py)."""
    text = ctx.doc.text
    if not record_kept and ctx.settled.get("bare_urls") is text:
        return  # judged already, and nothing was to remove: the same verdicts again
    if not may_hold_url(text):
        return
    if not record_kept and ctx.bare_edits is not None and ctx.bare_edits[0] is text:
        _recheck_near_edits(ctx, text, ctx.bare_edits[1])
        return
    code, _ = ctx.code()
    links = ctx.links()
    # a definition may be paragraph text to the renderer (one cannot interrupt a
    # paragraph): its URL is read as a bare URL too
    skip = code
    definitions = []
    if links:
        inline = [(link.start, link.end) for link in links if link.kind != "definition"]
        definitions = [(link.start, link.end) for link in links if link.kind == "definition"]
        if inline:
            skip = SpanSet(merge_spans(code.spans, inline))
    settings = ctx.settings
    edits: list[tuple[int, int, str]] = []
    trace = ctx.out.trace
    caps = ctx.caps
    for s, e, verdict in find_bare_verdicts(text, settings.allowed_hosts, skip, ctx.bare_memo):
        if verdict[3]:  # allowed
            if not record_kept or (definitions and any(a <= s < b for a, b in definitions)):
                continue
            if len(trace) < ctx.trace_room:
                trace.append(_keep_line(verdict[0]))
            else:
                ctx.trace_cut += 1
            # written plainly to an allowed host: its own text is the URL (an e-mail
            # address: no link record)
            if verdict[2] != EMAIL:
                url = _as_url(verdict[0])
                if caps is None or caps.link(url, "keep"):
                    ctx.out.links.append(link_record(url, text[s:e], "keep"))
            continue
        edits.append(_bare_edit(ctx, text, s, e, verdict))
    _apply_bare_edits(ctx, text, edits)


def _bare_edit(ctx: Ctx, text: str, s: int, e: int, verdict: Verdict) -> tuple[int, int, str]:
    """Annotate and record a bare URL that may not stay; the edit that removes it (or
    defangs it, or makes a bare domain non-linkable)."""
    url, host, kind, _, unsafe = verdict
    code_, severity, why = _strip_finding(host, kind, unsafe)
    ctx.annotate("links", code_, severity, why, s, e)
    evidence = text[s:e]
    if len(ctx.out.trace) < ctx.trace_room:
        ctx.out.trace.append(_inert_line(evidence) if kind == DOMAIN else _strip_line(code_, url))
    else:
        ctx.trace_cut += 1
    if kind == DOMAIN:
        return (s, e, escape_dots(evidence))
    ctx.link(url, evidence, "strip", code_)
    if ctx.settings.bare_urls == "defang":
        replacement = defang(evidence)
        if url_like(replacement):
            replacement = inert(replacement)
    elif s > 0 and text[s - 1] == " " and e < len(text) and text[e] == " ":
        return (s - 1, e, "")  # removed from between two spaces: one of them goes too
    else:
        replacement = ""
    return (s, e, replacement)


# The finding and trace line of a bare URL depend on a few of its values only: kept for
# the next time (the same hosts and URLs recur from answer to answer; a long text of
# distinct URLs asks for trace lines only while there is room for them).


@lru_cache(maxsize=1024)
def _strip_finding(host: str, kind: str, unsafe: bool) -> tuple[str, str, str]:
    """(code, severity, description) of a bare URL that may not stay."""
    if unsafe:
        return ("LINK_UNSAFE_SCHEME", "critical", "A bare URL with a scheme that is not http(s).")
    if kind == DOMAIN:
        return (
            "LINK_HOST_NOT_ALLOWED",
            "info",
            f"Bare domain {host} made non-linkable (a renderer would link it).",
        )
    return (
        "LINK_HOST_NOT_ALLOWED",
        "warning",
        f"Bare URL to host {host or '?'}, which is not allowed.",
    )


@lru_cache(maxsize=1024)
def _keep_line(url: str) -> str:
    return "[AUDIT] KEEP | " + one_line(url)


@lru_cache(maxsize=1024)
def _strip_line(code: str, url: str) -> str:
    return f"[AUDIT] STRIP | {code} | {one_line(url)}"


@lru_cache(maxsize=1024)
def _inert_line(evidence: str) -> str:
    return "[AUDIT] INERT | bare domain | " + one_line(evidence)


# what can make code spans, links or markup: without any of them, each run of text
# between blanks (and angle brackets) is judged on its own
_STRUCTURE = re.compile(r"[`~\[\]<]")


def _no_structure(text: str) -> bool:
    """`_STRUCTURE.search(text) is None`, by substring tests (no regex scan)."""
    return (
        "`" not in text
        and "~" not in text
        and "[" not in text
        and "]" not in text
        and ("<" not in text)
    )


def _apply_bare_edits(ctx: Ctx, text: str, edits: list[tuple[int, int, str]]) -> None:
    """Apply the removals; when the text had and has no code, link or markup, remember
    where they were, so that the re-check after them (`settle`) judges only the runs
    they touched: every other run is one already judged, and kept."""
    ctx.bare_edits = None
    if not edits:
        ctx.settled["bare_urls"] = text
        return
    positions = ctx.doc.apply(edits)
    new = ctx.doc.text
    # the new text is pieces of the old one and the replacements: without structure in
    # either, it has none (no need to scan it)
    if _no_structure(text) and not any(
        replacement and not _no_structure(replacement) for _, _, replacement in edits
    ):
        # a whole run removed from between two blanks (with the blank before it, see
        # `_bare_edit`) joins nothing: no run to re-check
        n = len(text)
        ctx.bare_edits = (
            new,
            [
                (p, p + len(replacement))
                for p, (start, end, replacement) in zip(positions, edits, strict=True)
                if replacement
                or not (start == 0 or text[start - 1].isspace() or text[start].isspace())
                or not (end == n or text[end].isspace())
            ],
        )


def _recheck_near_edits(ctx: Ctx, text: str, touched: list[tuple[int, int]]) -> None:
    """`audit_bare_urls(ctx, record_kept=False)` on plain text, looking only at the runs
    around the given spans (whole runs: from the blank or angle bracket before to the one
    after). The same verdicts as a scan of the whole text (see `_apply_bare_edits`)."""
    settings = ctx.settings
    n = len(text)
    windows: list[tuple[int, int]] = []
    lo = 0
    for start, end in touched:
        before = RUN_START.match(text, lo, start)  # `lo`: linear time in all
        a = before.end() if before is not None else lo
        lo = end
        m = _RUN_AFTER.search(text, end)
        b = m.start() if m else n
        if windows and a <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(b, windows[-1][1]))
        else:
            windows.append((a, b))
    edits: list[tuple[int, int, str]] = []
    for a, b in windows:
        if b - a < 3:  # no candidate is shorter than `a.b` (an edit between blanks: 0)
            continue
        for s, e, verdict in find_bare_verdicts(
            text[a:b], settings.allowed_hosts, None, ctx.bare_memo
        ):
            if not verdict[3]:
                edits.append(_bare_edit(ctx, text, s + a, e + a, verdict))
    _apply_bare_edits(ctx, text, edits)


_RUN_AFTER = re.compile(r"[\s<>]")


def _as_url(url: str) -> str:
    if url.startswith("//"):
        return "https:" + url
    return url if "://" in url else "http://" + url
