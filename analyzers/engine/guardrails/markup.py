"""Raw HTML in a response: a few harmless inline tags pass (re-written by nh3), the rest goes.

A renderer with raw HTML enabled passes tags through to the browser. Here every `<` that
a browser could read as the start of markup (`<` then a letter, `/`, `!` or `?`) outside
code becomes one of three things:

- an allowed inline tag, re-written by `nh3` with no attribute but `abbr`'s `title`;
- nothing: any other tag, comment, declaration or processing instruction is removed, and
  the elements whose content is code or hidden text (script, style, iframe, ...) go with
  their content; annotated `HTML_UNSAFE_MARKUP`, critical when it could execute;
- `&lt;` when no `>` closes it (it renders the same and can never open a tag).

A tag ends at the first `>`, quotes or not: a browser that sees a quoted `>` reads a longer
tag, but that tag starts with the `<` removed here. Code spans protect their content only
before the first line that can start an HTML block (where a renderer passes whole lines
through, backticks and fences included). URL attributes of removed tags are judged by the
link rules like any link.
"""

from __future__ import annotations

import re
from functools import lru_cache

import nh3

from .context import Ctx
from .links import decide
from .syntax.markdown import _AUTOLINK, _EMAIL_AUTOLINK
from .syntax.text import SpanSet, one_line

ALLOWED_TAGS = frozenset(
    {
        "b",
        "strong",
        "i",
        "em",
        "u",
        "s",
        "del",
        "ins",
        "mark",
        "small",
        "sub",
        "sup",
        "code",
        "kbd",
        "samp",
        "var",
        "abbr",
        "br",
        "wbr",
        "q",
        "cite",
        "dfn",
    }
)
ALLOWED_ATTRIBUTES = {"abbr": {"title"}}
VOID_TAGS = frozenset({"br", "wbr"})
# could run script, navigate, submit, or load and run other documents
EXECUTABLE_TAGS = frozenset(
    {
        "script",
        "iframe",
        "frame",
        "frameset",
        "object",
        "embed",
        "applet",
        "form",
        "meta",
        "base",
        "link",
        "svg",
        "math",
        "portal",
        "fencedframe",
        "template",
        "import",
        "xml",
        "button",
        "input",
        "isindex",
        "set",
        "animate",
        "handler",
        "listener",
    }
)
# removed with their content (code, styles, hidden or foreign documents)
DROP_CONTENT = frozenset(
    {
        "script",
        "style",
        "iframe",
        "object",
        "embed",
        "applet",
        "template",
        "svg",
        "math",
        "noscript",
        "noembed",
        "noframes",
        "xmp",
        "textarea",
        "title",
        "select",
        "frameset",
    }
)
URL_ATTRIBUTES = frozenset(
    {
        "href",
        "src",
        "srcset",
        "action",
        "formaction",
        "poster",
        "background",
        "xlink:href",
        "data",
        "codebase",
        "cite",
        "longdesc",
        "lowsrc",
        "dynsrc",
        "ping",
        "manifest",
        "icon",
        "usemap",
        "archive",
        "classid",
        "imagesrcset",
    }
)
MAX_ROUNDS = 3

_CANDIDATE = re.compile(r"<[A-Za-z/!?]")
_NAME = re.compile(r"</?([A-Za-z][^\s/>]*)")
_ATTR = re.compile(r"""([^\s"'>/=]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s"'=<>`]+))?""")
_CSS_URL = re.compile(r"""url\(\s*(?:"([^"]*)"|'([^']*)'|([^)\s]*))""", re.IGNORECASE)
_SCRIPT_SCHEME = re.compile(r"^\s*(?:javascript|vbscript|data|livescript):", re.IGNORECASE)
_CSS_SCRIPT = re.compile(r"expression\s*\(|javascript:|vbscript:|behavior\s*:", re.IGNORECASE)
# a line where a renderer may start an HTML block (container markers allowed before it)
_BLOCK_START = re.compile(r"^(?:[ \t>*+\-]|\d{1,9}[.)])*<[A-Za-z/!?]", re.MULTILINE)
_CLEANED_CLOSE = re.compile(r"</[a-z]+>\Z")


@lru_cache(maxsize=1024)
def clean_open_tag(tag: str, name: str) -> str:
    """An allowed opening tag as nh3 writes it: only the allowed attributes, quoted."""
    cleaned = nh3.clean(
        tag,
        tags=set(ALLOWED_TAGS),
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https"},
        link_rel=None,
        strip_comments=True,
    )
    if name not in VOID_TAGS:
        cleaned = _CLEANED_CLOSE.sub("", cleaned)  # nh3 closes the element it opened
    return cleaned if cleaned.startswith("<" + name) else f"<{name}>"


@lru_cache(maxsize=64)
def _closing_tag(name: str) -> re.Pattern[str]:
    return re.compile(r"</" + re.escape(name) + r"[\s/>]", re.IGNORECASE)


def _attributes(region: str, name_end: int) -> list[tuple[str, str]]:
    attrs = []
    for m in _ATTR.finditer(region, name_end, len(region) - 1):
        value = m.group(2) or ""
        if value[:1] in "\"'":
            value = value[1:-1]
        attrs.append((m.group(1).lower(), value))
    return attrs


def _urls(attrs: list[tuple[str, str]]) -> list[str]:
    urls: list[str] = []
    for key, value in attrs:
        if key in URL_ATTRIBUTES:
            if key.endswith("srcset"):
                urls.extend(p.split()[0] for p in value.split(",") if p.split())
            else:
                urls.append(value)
        elif key == "style":
            urls.extend(
                next(g for g in m.groups() if g is not None) for m in _CSS_URL.finditer(value)
            )
    return urls


def _executable(name: str, attrs: list[tuple[str, str]]) -> bool:
    if name in EXECUTABLE_TAGS:
        return True
    for key, value in attrs:
        if key.startswith("on"):
            return True
        if (key in URL_ATTRIBUTES or key == "style") and (
            _SCRIPT_SCHEME.match(value) or (key == "style" and _CSS_SCRIPT.search(value))
        ):
            return True
        if key == "http-equiv":
            return True
    return False


def _protected(ctx: Ctx) -> SpanSet | None:
    """Code that renders inert: fences and code spans before any possible HTML block."""
    code, fences = ctx.code()
    if not code:
        return None
    fence_set = SpanSet(fences) if fences else None
    block = None
    for m in _BLOCK_START.finditer(ctx.doc.text):
        if fence_set is None or fence_set.containing(m.start()) is None:
            block = m  # the first line outside fenced code that may start an HTML block
            break
    if block is None:
        return code
    kept = [span for span in code.spans if span[1] <= block.start()]
    return SpanSet(kept) if kept else None


def sanitize_markup(ctx: Ctx) -> None:
    """Remove or re-write every piece of raw HTML (see the module docstring)."""
    for round_ in range(MAX_ROUNDS):
        if "<" not in ctx.doc.text or ctx.settled.get("markup") is ctx.doc.text:
            return
        if not _one_round(ctx, final=round_ == MAX_ROUNDS - 1):
            return


def _one_round(ctx: Ctx, final: bool) -> bool:
    """One pass; True when it removed something (a removal can join a new tag)."""
    text = ctx.doc.text
    n = len(text)
    protected = _protected(ctx)
    containing = protected.containing if protected else None
    edits: list[tuple[int, int, str]] = []
    removed = False
    pos = 0
    gt = -1  # the first ">" at or after the current candidate, or n when none
    run: _Run | None = None  # identical tags removed back to back: one edit, one record
    annotations = ctx.out.annotations
    kept_urls = False  # whether a tag left as it was holds a URL (see _nothing_formed)
    while pos < n:
        m = _CANDIDATE.search(text, pos)
        if m is None:
            break
        i = m.start()
        span = containing(i) if containing is not None else None
        if run is not None:
            if span is None and MERGE_RUNS and i == run.end and text.startswith(run.region, i):
                # the same tag again, right after the last: the same verdict (its facts
                # and URL decisions are memoised, and no closing tag follows the first)
                run.end = i + len(run.region)
                run.count += 1
                edits[-1] = (edits[-1][0], run.end, "")
                pos = run.end
                continue
            run.close(ctx)
            run = None
        if span is not None:
            pos = span[1]
            continue
        if gt < i:
            gt = text.find(">", i)
            if gt < 0:
                gt = n
        if gt < n:
            end = gt + 1
            region = text[i:end]
            # an autolink ends at the first ">" and holds a ":" or an "@" before it
            if ":" in region or "@" in region:
                auto = _AUTOLINK.match(text, i) or _EMAIL_AUTOLINK.match(text, i)
                if auto is not None:  # a markdown autolink: the link rules judge it
                    pos = auto.end()
                    continue
            if region in _VERBATIM:  # an allowed tag that stays as it is: nothing to record
                pos = end
                continue
        else:
            # no ">" from here on: nothing left can close as a tag, comment or autolink,
            # so every candidate left outside protected code is text (one scan, no checks)
            removed = True
            for later in _CANDIDATE.finditer(text, i):
                j = later.start()
                if containing is None or containing(j) is None:
                    edits.append((j, j + 1, "&lt;"))
            break
        recorded, made = len(annotations), _made(ctx)
        replacement, end = _judge_tag(ctx, text, i, end, region, final)
        if not replacement and (i == 0 or text[i - 1] in " \t\n"):
            while end < n and text[end] in " \t":  # no indent left to make a code block
                end += 1
            if (i == 0 or text[i - 1] == "\n") and end < n and text[end] == "\n":
                end += 1  # nor an empty line that would end the paragraph
        if replacement != region:
            edits.append((i, end, replacement))
            removed = removed or not replacement or replacement == "&lt;"
            if not replacement and end == gt + 1 and _made(ctx) > made:
                run = _Run(region, i, end, annotations[recorded:])
        elif not kept_urls:
            facts = _tag_facts(region)
            kept_urls = facts is not None and bool(facts[3])
        pos = end
    if run is not None:
        run.close(ctx)
    if not edits:
        ctx.settled["markup"] = text  # a round over it changes nothing
        return removed
    positions = ctx.doc.apply(edits)
    if (
        SKIP_SETTLED_ROUND
        and removed
        and protected is None
        and not kept_urls
        and _nothing_formed(ctx, edits, positions)
    ):
        ctx.settled["markup"] = ctx.doc.text  # what the next round would find: nothing
        return False
    return removed


def _nothing_formed(ctx: Ctx, edits: list[tuple[int, int, str]], positions: list[int]) -> bool:
    """Whether a round over the text these edits made would change nothing, so that it
    need not run. Each `<` that could start markup in the new text is then one the round
    before judged and left as it was (the same region, the same verdict, no finding: the
    caller checks that none held a URL), or one it wrote as a fixed point of the
    judgement (an allowed tag nh3 leaves as it is, or `&lt;`). That holds when no code
    protected anything before or after (code spans can pair differently once text is
    removed) and no `<` stands right before an edit (a removal can join `<` and a
    letter into a new tag, as in `<<x>b>`)."""
    text = ctx.doc.text
    if "<" not in text:
        return True  # no markup can start (the next round would stop at once)
    for p in positions:
        if p > 0 and text[p - 1] == "<":
            return False
    for _, _, replacement in edits:
        if replacement and replacement != "&lt;" and not _fixed_point(replacement):
            return False
    return _protected(ctx) is None


@lru_cache(maxsize=1024)
def _fixed_point(tag: str) -> bool:
    """Whether `_judge_tag` leaves the tag `tag` as it is, with no finding."""
    if tag[:1] != "<" or tag[1:2] in ("!", "?", "") or tag.find(">") != len(tag) - 1:
        return False
    facts = _tag_facts(tag)
    if facts is None:
        return False
    name, closing, _, urls, _ = facts
    if name not in ALLOWED_TAGS or urls:
        return False
    return tag == (f"</{name}>" if closing else clean_open_tag(tag, name))


MERGE_RUNS = True  # (tests compare with False: the same cleaned text, finding by finding)
# A round is not run when the one before left nothing it could change (`_nothing_formed`;
# tests compare with False: the same output, record by record).
SKIP_SETTLED_ROUND = True


class _Run:
    """A tag removed, with the records it made; identical tags right after it join it, so
    100,000 `<script>` in a row make one edit and one finding that spans them all."""

    __slots__ = ("region", "start", "end", "records", "count")

    def __init__(self, region: str, start: int, end: int, records: list) -> None:
        self.region, self.start, self.end = region, start, end
        self.records = [a for _, a in records]
        self.count = 1

    def close(self, ctx: Ctx) -> None:
        """Stretch the first tag's findings over the whole run."""
        if self.count > 1:
            s, e = ctx.doc.orig_span(self.start, self.end)
            evidence = ctx.original[s - ctx.base : e - ctx.base]
            for annotation in self.records:
                fields = annotation.__dict__  # set as validation would: plain values
                fields["start"], fields["end"], fields["evidence"] = s, e, evidence
                fields["description"] = (
                    fields["description"].rstrip(".") + f" ({self.count} in a row)."
                )
        return None


@lru_cache(maxsize=4096)
def _tag_facts(region: str) -> tuple[str, bool, bool, tuple[str, ...], bool] | None:
    """(name, closing, has attributes, URLs, executable) of the tag `region`, or None when
    it is no tag; memoised, since a long response repeats the same tags."""
    nm = _NAME.match(region)
    if nm is None:
        return None
    name = nm.group(1).lower()
    closing = region[1] == "/"
    attrs = [] if closing else _attributes(region, nm.end())
    return name, closing, bool(attrs), tuple(_urls(attrs)), _executable(name, attrs)


def _judge_tag(ctx: Ctx, text: str, i: int, end: int, region: str, final: bool):
    """(replacement, end of what it replaces) for the tag-like `region` at `i`."""
    if region[1] in "!?":
        _annotate(ctx, False, "An HTML comment or declaration was removed.", i, end)
        return "", end
    facts = _tag_facts(region)
    if facts is None:  # "</" then no letter: no tag
        return region, end
    name, closing, has_attrs, urls, executable = facts
    for url in urls:
        _judge_url(ctx, url, i, end)
    if name in ALLOWED_TAGS:
        cleaned = f"</{name}>" if closing else clean_open_tag(region, name)
        if cleaned == region:
            if not urls:
                _remember_verbatim(region)
        elif has_attrs and not closing:
            _annotate(ctx, executable, f"Attributes of an HTML <{name}> tag were removed.", i, end)
        return cleaned, end
    if final:  # a tag formed by earlier removals: make it text
        _annotate(ctx, executable, f"HTML <{name}> tag made inert.", i, end)
        return "&lt;" + region[1:], end
    stop = end
    if not closing and name in DROP_CONTENT:
        close = _find_closing(ctx, text, name, end)
        if close is not None:
            gt = text.find(">", close - 1)
            stop = gt + 1 if gt >= 0 else len(text)
    what = f"</{name}>" if closing else f"<{name}>"
    _annotate(ctx, executable or name in EXECUTABLE_TAGS, f"Raw HTML {what} was removed.", i, stop)
    return "", stop


# Allowed tags that are their own cleaned form and hold no URL (`<b>`, `</i>`): the same
# verdict, no finding, wherever they are; remembered so that each costs a set lookup.
_VERBATIM: set[str] = set()
_VERBATIM_MAX = 4096


def _remember_verbatim(region: str) -> None:
    if len(_VERBATIM) >= _VERBATIM_MAX:
        _VERBATIM.clear()
    _VERBATIM.add(region)


def _find_closing(ctx: Ctx, text: str, name: str, start: int) -> int | None:
    """Where `</name` ends after `start`, or None; remembers, per text, the first position
    after which there is none, so that many unclosed `<script>` cost one scan, not one
    each (linear time)."""
    memo = ctx.closing_memo
    if memo.get("text") is not text:
        memo.clear()
        memo["text"] = text
    key = "none:" + name
    if key in memo and start >= memo[key]:
        return None
    found = memo.get("at:" + name)
    if found is not None and found[0] <= start < found[1]:
        return found[1]
    m = _closing_tag(name).search(text, start)
    if m is None:
        memo[key] = start
        return None
    memo["at:" + name] = (start, m.end())
    return m.end()


def _made(ctx: Ctx) -> int:
    """Findings made so far in this paragraph, built or (past the limits) only counted:
    whether a tag made any must not depend on the limits."""
    if ctx.caps is None:
        return len(ctx.out.annotations)
    return ctx.caps.made


def _annotate(ctx: Ctx, executable: bool, description: str, start: int, end: int) -> None:
    ctx.annotate(
        "links",
        "HTML_UNSAFE_MARKUP",
        "critical" if executable else "warning",
        description,
        start,
        end,
    )
    if ctx.has_trace_room():
        ctx.out.trace.append(_markup_trace(ctx.doc.text[start:end]))
    else:
        ctx.trace_cut += 1


@lru_cache(maxsize=1024)
def _markup_trace(evidence: str) -> str:
    return "[AUDIT] STRIP | HTML_UNSAFE_MARKUP | " + one_line(evidence, 120)


def _judge_url(ctx: Ctx, url: str, start: int, end: int) -> None:
    """A URL attribute of a tag: judged and recorded like a link (the tag goes anyway)."""
    code, severity, why, canonical = decide(url, ctx.settings)
    if code is None:
        return
    ctx.annotate("links", code, severity, why, start, end)
    if ctx.has_trace_room():
        ctx.out.trace.append(_url_trace(code, canonical))
    else:
        ctx.trace_cut += 1
    ctx.link(canonical, "", "strip", code)


@lru_cache(maxsize=1024)
def _url_trace(code: str, canonical: str) -> str:
    return f"[AUDIT] STRIP | {code} | {one_line(canonical)}"
