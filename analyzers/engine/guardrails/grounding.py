"""Rule 6: customer claims (a company + a number) must be grounded, or the sentence goes.

A claim is valid only when the company is a known customer (or the company of a request
source), every metric in the sentence appears in a fact or source attributed to that
company, and the sentence links to that company's case study. Health of that link is
checked after the text pipeline (see `PendingClaim`).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from functools import lru_cache
from typing import Any

from wordfreq import zipf_frequency

from .context import Ctx, PendingClaim
from .links import canonical, fragmentless
from .settings import Customer, GuardrailSettings, SourceIndex
from .syntax.text import has_digit, one_line

UNKNOWN_COMPANY = "UNKNOWN_COMPANY"
METRIC_NOT_IN_SOURCES = "METRIC_NOT_IN_SOURCES"
MISSING_CASE_STUDY_LINK = "MISSING_CASE_STUDY_LINK"
CASE_STUDY_LINK_UNHEALTHY = "CASE_STUDY_LINK_UNHEALTHY"

# A sentence ends at a run of ".!?" (closing quotes, brackets or emphasis after it) before
# a blank or the end, or at a line break: `[.!?][.!?]*["')\]”’*_]*(?=\s|$)|\n`, written
# to start with one character class, so the regex engine jumps from candidate to candidate
# instead of trying both alternatives at every position (about twice as fast on prose).
_BOUNDARY = re.compile(r"[.!?\n](?:(?<=\n)|[.!?]*[\"')\]”’*_]*(?=\s|$))")
# A metric: (?<![\w$.]) then [+-]?\d+([.,]\d+)*[ \t]?%, or $[ \t]?\d+([.,]\d+)* with an
# optional K/M/B/million/... unit, or \d+(\.\d+)?[ \t]?x. Written to start with its first
# character (the regex engine then jumps from one candidate character to the next),
# the rest chosen by what that character was.
_METRIC = re.compile(
    r"[+\-$\d](?<![\w$.][+\-$\d])(?:"
    r"(?<=[+\-])\d+(?:[.,]\d+)*[ \t]?%"
    r"|(?<=\$)[ \t]?\d+(?:[.,]\d+)*(?:[ \t]?(?:[KMBkmb]n?|million|billion|thousand)(?![A-Za-z]))?"
    r"|(?<=\d)\d*(?:[.,]\d+)*[ \t]?%"
    r"|(?<=\d)\d*(?:\.\d+)?[ \t]?[x×](?![\w])"
    r")"
)
_PRICE_CONTEXT = re.compile(
    r"[ \t]*(?:/|per\b|a (?:month|year|seat|user)\b|each\b|monthly\b)", re.IGNORECASE
)
_WORD = re.compile(r"(?<!\d)[^\W\d_][\w&'’\-]*")
_DIGIT = re.compile(r"\d")
_METRIC_CHAR = re.compile(r"[%$x×]")  # one of these is in every `_METRIC` match
_DIGIT_X = re.compile(r"\d[ \t]?x")
_NO_METRICS: frozenset[str] = frozenset()


def has_claim_hint(text: str) -> bool:
    """False when the text can hold no claim: no link ("](", "<"), no metric ("%", "$",
    "×", a digit before "x"), and no code span ("`") whose removal could join a metric."""
    return (
        "](" in text
        or "<" in text
        or "`" in text
        or "%" in text
        or "$" in text
        or "×" in text
        or _digit_x(text)
    )


def _digit_x(text: str) -> bool:
    """`_DIGIT_X.search(text) is not None`, looking only at the (few) "x" of the text."""
    i = text.find("x", 1)  # an "x" at 0 has no digit before it
    while i >= 0:
        c = text[i - 1]
        if c.isdecimal() or (c in " \t" and i > 1 and text[i - 2].isdecimal()):
            return True
        i = text.find("x", i + 1)
    return False


# A sentence-initial capitalised word that English uses this often (Zipf scale: 3.5 is
# about 3 uses per million words; "shoppers" 3.6, "typical" 4.6, "most" 6.0) is an ordinary
# word there, not a company. Company names rarer than that (Zalando 1.7, Shopify 2.6) stay
# candidates; famous names that are also frequent words (Amazon, Apple) are recognised
# sentence-initially only as known customers or source companies.
ORDINARY_ZIPF = 3.5


@lru_cache(maxsize=16384)
def is_ordinary_word(lower: str) -> bool:
    """Whether a (lower-cased) word is a common English word, by `wordfreq`'s frequencies
    (its data ships in the package: no network)."""
    return zipf_frequency(lower, "en") >= ORDINARY_ZIPF


# Domain terms that are not companies wherever they stand, capitalised or not: calendar
# words, KPI and plan names, acronyms of the trade. Ordinary English words need no list.
STOP_CAPS = frozenset(
    """i i'm i've i'd january february march april may june july august september october
    november december monday tuesday wednesday thursday friday saturday sunday black friday
    cyber christmas easter q1 q2 q3 q4 h1 h2 fy yoy mom qoq ai api apis seo roi ceo cto cmo
    cfo vp saas b2b b2c d2c dtc kpi kpis ctr aov gmv ux ui us usa eu uk emea apac latam
    arr mrr nps sla sdk cdn json http https html css pdf faq faqs llm llms ml nlp gpu cpu
    url urls id pro plus premium enterprise business starter standard basic free team
    growth essential build grow elevate ecommerce e-commerce omnichannel""".split()  # noqa: SIM905
)


@lru_cache(maxsize=4096)
def metric_norm(token: str) -> str:
    t = token.lower().replace("+", "").replace(",", "").replace(" ", "").replace("\t", "")
    t = t.replace("×", "x").replace("million", "m").replace("billion", "b")
    t = t.replace("thousand", "k").replace("bn", "b")
    return t


def find_metrics(text: str) -> list[str]:
    found = []
    for m in _METRIC.finditer(text):
        token = m.group(0)
        if token.startswith("$") and token[-1].isdigit() and _PRICE_CONTEXT.match(text, m.end()):
            continue  # "$49 per month" is a price, not a result
        found.append(token)
    return found


class _CompanyMatcher:
    """Known customer names and aliases, plus source companies, as one regex."""

    def __init__(self, customers: tuple[Customer, ...], texts: tuple[tuple[str, ...], ...]) -> None:
        self.by_name: dict[str, Customer] = {}
        for customer in customers:
            for name in customer.names:
                self.by_name.setdefault(name, customer)
        names = sorted(self.by_name, key=len, reverse=True)
        self.regex = (
            re.compile(
                r"(?<!\w)(?:" + "|".join(re.escape(n) for n in names) + r")(?!\w)", re.IGNORECASE
            )
            if names
            else None
        )
        self.known_slugs = frozenset(c.slug.lower() for c in customers)
        self.metrics: dict[str, set[str]] = {}
        for customer, company_texts in zip(customers, texts, strict=True):
            self.metrics[customer.slug] = {
                metric_norm(t) for text in company_texts for t in find_metrics(text)
            }


@lru_cache(maxsize=256)
def _build_matcher(
    customers: tuple[Customer, ...], texts: tuple[tuple[str, ...], ...]
) -> _CompanyMatcher:
    """Shared by every audit with the same customers and company texts (most audits)."""
    return _CompanyMatcher(customers, texts)


def _matcher(sources: SourceIndex) -> _CompanyMatcher:
    """The matcher of the customers and company texts the sources know now.

    Only sources with a company change them: until one arrives, the settings' own
    matcher serves.
    """
    cached = sources.matcher
    if cached is not None and cached[0] == sources.company_version:
        return cached[1]
    if sources.company_version == 0:
        matcher = sources.settings.derived.get("matcher")
        if matcher is None:
            matcher = sources.settings.derived["matcher"] = _sources_matcher(sources)
    else:
        matcher = _sources_matcher(sources)
    sources.matcher = (sources.company_version, matcher)
    return matcher


def _sources_matcher(sources: SourceIndex) -> _CompanyMatcher:
    customers = tuple(sources.all_customers())
    texts = tuple(tuple(sources.company_texts.get(c.slug, ())) for c in customers)
    return _build_matcher(customers, texts)


@lru_cache(maxsize=64)
def _brand_tokens(brand: str) -> frozenset[str]:
    return frozenset(t.lower() for t in brand.split())


def unknown_companies(words_text: str, brand: str, skip: list[tuple[int, int]]) -> list[str]:
    return list(_unknown_companies(words_text, brand, skip))


def _unknown_companies(words_text: str, brand: str, skip: list[tuple[int, int]]):
    """Capitalised words that may name a company, in order (see `unknown_companies`)."""
    brand_tokens = _brand_tokens(brand)
    after_brand = False
    last_end = 0
    for m in _WORD.finditer(words_text):
        raw, start = m.group(0), m.start()
        gap = words_text[last_end:start]
        # the first word, or the first after a colon ("Result: Average basket grew 12%")
        is_initial = last_end == 0 or ":" in gap
        last_end = m.end()
        word = raw.rstrip("-'’")
        if word.endswith(("'s", "’s")):
            word = word[:-2]
        lower = word.lower()
        # a word right after the brand names a product ("Acme Search"); after "Acme, " not
        prev_brand = after_brand and gap.isspace()
        after_brand = lower in brand_tokens
        if after_brand or not word or not word[0].isupper():
            continue
        if skip and any(s <= start < e for s, e in skip):
            continue
        if lower in STOP_CAPS or prev_brand:
            continue
        if is_initial and is_ordinary_word(lower):
            continue
        yield word


def case_link(dest: str, settings: GuardrailSettings) -> tuple[str | None, str]:
    """(case-study slug or None, canonical URL or the destination), memoised."""
    found = settings.case_links.get(dest)
    if found is None:
        found = (settings.case_study_slug(fragmentless(dest)), canonical(dest).url or dest)
        if len(settings.case_links) >= 8192:
            settings.case_links.clear()
        settings.case_links[dest] = found
    return found


def audit_grounding(ctx: Ctx) -> None:
    text = ctx.doc.text
    # A sentence without a digit and without "](" is no claim (`_judge`), so neither is
    # a paragraph without them. (The "/" test is the historical gate, kept as it was.)
    linked = "](" in text and "/" in text
    if not linked and not has_digit(text):
        return
    if not has_claim_hint(text):
        return
    settings = ctx.settings
    code, fences = ctx.code()
    links = ctx.links()
    if "]:" in text and any(link.kind == "definition" for link in links):
        links = [link for link in links if link.kind != "definition"]
    matcher = _matcher(ctx.sources)
    known_slugs = matcher.known_slugs
    if linked and not has_digit(text):
        # without a number, only a link to the case study of no known customer is a claim
        for link in links:
            slug = case_link(link.dest, settings)[0]
            if slug is not None and slug not in known_slugs:
                break
        else:
            return
    link_starts = [link.start for link in links]
    link_ends = [link.end for link in links]
    n_links = len(links)
    # the sentences, fenced code left out; a boundary inside a link is none
    spans: list[tuple[int, int]] = []
    segments = [(0, len(text))]
    if fences:
        segments, pos = [], 0
        for fs, fe in fences:
            segments.append((pos, fs))
            pos = fe
        segments.append((pos, len(text)))
    for seg_start, seg_end in segments:
        pos = seg_start
        for m in _BOUNDARY.finditer(text, seg_start, seg_end):
            if n_links:
                b = m.start()
                i = bisect_left(link_ends, b + 1)
                if i < n_links and link_starts[i] <= b:
                    continue
            e = m.end()
            if e > pos:
                spans.append((pos, e))
            pos = e
        if pos < seg_end:
            spans.append((pos, seg_end))
    out = ctx.out
    edits: list[tuple[int, int, str]] = []
    pending: list[tuple[int, int, str, dict[str, Any]]] = []
    for s, e in spans:
        sentence = text[s:e]
        stripped = sentence.strip()
        if not stripped or not has_claim_hint(stripped):
            continue
        if len(stripped) != len(sentence):
            s += len(sentence) - len(sentence.lstrip())
            e = s + len(stripped)
            sentence = stripped
        verdict = _judge(
            settings, code, text, s, e, sentence, links, link_starts, matcher, known_slugs
        )
        if verdict is None:
            continue
        reasons, claim, case_url = verdict
        if reasons:
            claim["reasons"] = reasons
            out.claims.append(claim)
            desc = "Customer claim removed: " + ", ".join(reasons) + "."
            annotation = ctx.annotate(
                "grounding", "UNGROUNDED_CUSTOMER_CLAIM", "critical", desc, s, e
            )
            if annotation is not None:
                claim["start"], claim["end"] = annotation.start, annotation.end
            else:  # past the audit's limits: counted, not built; the claim keeps its place
                claim["start"], claim["end"] = ctx.doc.orig_span(s, e)
            out.trace.append("[AUDIT] STRIP | UNGROUNDED_CUSTOMER_CLAIM | " + one_line(sentence))
            es, ee = _sentence_removal(text, s, e)
            if edits and es < edits[-1][1]:
                es = edits[-1][1]
            edits.append((es, ee, ""))
        else:
            claim["reasons"] = []
            out.claims.append(claim)
            if case_url is not None:
                pending.append((s, e, case_url, claim))
    if edits:
        ctx.doc.apply(edits)
    # both in text order: the removed length before each claim, in one pass
    shift, k = 0, 0
    for s, e, url, claim in pending:
        while k < len(edits) and edits[k][1] <= s:
            shift += edits[k][1] - edits[k][0]
            k += 1
        out.pending.append(PendingClaim(s - shift, e - shift, url, claim))


def _sentence_removal(text: str, s: int, e: int) -> tuple[int, int]:
    n = len(text)
    end = e
    while end < n and text[end] in " \t":
        end += 1
    if end < n and text[end] != "\n":
        return s, end
    start = s
    while start > 0 and text[start - 1] in " \t":
        start -= 1
    return start, end


def _judge(
    settings, code, text, s, e, sentence, links, link_starts, matcher, known_slugs
) -> tuple[list[str], dict[str, Any], str | None] | None:
    """None when the sentence (`text[s:e]`) is no claim; else (reasons, claim record,
    case-study url)."""
    digit = has_digit(sentence)
    if not digit and "](" not in sentence:
        return None  # no number and no link: cannot be a claim
    inside = []
    if links:
        i, n_links = bisect_left(link_starts, s), len(links)
        while i < n_links:
            link = links[i]
            if link.start >= e:
                break
            if link.end <= e:
                inside.append(link)
            i += 1
    case_links: dict[str, str] = {}  # slug -> canonical url
    for link in inside:
        slug, url = case_link(link.dest, settings)
        if slug is not None and slug not in case_links:
            case_links[slug] = url
    if not case_links and not digit:
        return None
    unknown_slugs = [slug for slug in case_links if slug not in known_slugs] if case_links else ()
    if not unknown_slugs and not _METRIC_CHAR.search(sentence):
        return None  # every metric has a "%", "$" or "x": no claim
    # the words of the sentence: links reduced to their labels, code spans left out
    if not inside and not code:
        words_text = sentence
    else:
        cuts = [
            (link.start, link.end, link.label if link.kind != "autolink" else "") for link in inside
        ]
        if code:
            cuts.extend((cs, ce, " ") for cs, ce in code.spans if cs < e and ce > s)
            cuts.sort()
        parts, pos = [], s
        for cs, ce, keep in cuts:
            if cs < pos:
                continue
            parts.append(text[pos:cs])
            parts.append(keep)
            pos = min(ce, e)
        parts.append(text[pos:e])
        words_text = "".join(parts)
    metrics = find_metrics(words_text)
    claim: dict[str, Any] = {"sentence": sentence, "metrics": metrics}
    if unknown_slugs:
        claim["company"] = unknown_slugs[0]
        return [UNKNOWN_COMPANY], claim, None
    if not metrics:
        return None
    known: list[Customer] = []
    spans: list[tuple[int, int]] = []
    if matcher.regex is not None:
        for m in matcher.regex.finditer(words_text):
            customer = matcher.by_name.get(m.group(0).lower())
            if customer is not None and customer not in known:
                known.append(customer)
            spans.append(m.span())
    if known:
        best: tuple[list[str], Customer, str | None] | None = None
        norms = {metric_norm(m) for m in metrics}
        for customer in known:
            reasons = []
            if not norms <= matcher.metrics.get(customer.slug, _NO_METRICS):
                reasons.append(METRIC_NOT_IN_SOURCES)
            case_url = case_links.get(customer.slug.lower())
            if case_url is None:
                reasons.append(MISSING_CASE_STUDY_LINK)
            if best is None or len(reasons) < len(best[0]):
                best = (reasons, customer, case_url)
        assert best is not None
        claim["company"] = best[1].name
        return best[0], claim, best[2]
    unknown = next(_unknown_companies(words_text, settings.brand_name, spans), None)
    if unknown is None:
        return None
    claim["company"] = unknown
    reasons = [UNKNOWN_COMPANY, METRIC_NOT_IN_SOURCES]
    if not case_links:
        reasons.append(MISSING_CASE_STUDY_LINK)
    return reasons, claim, None
