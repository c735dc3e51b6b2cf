"""All guardrail rules applied to one paragraph, in the reference order.

prompt leak -> HTML anchors -> raw HTML -> link classification (with label upgrade) ->
label suffix normalisation -> dangling attributions -> bare URLs -> customer-claim
grounding. Each step edits a `Doc`, so every annotation keeps offsets into the original
response.

The rendering model: the cleaned text is safe for CommonMark with the GFM autolink
extension and raw HTML enabled (markdown-it-py with linkify). Everything such a renderer
makes a navigable or fetched URL is judged: links, images, autolinks, definitions, bare
URLs, `www.` hosts, e-mail addresses and bare domains, anchors and URL attributes.
"""

from __future__ import annotations

from .caps import RecordCaps
from .collector import collector_paused
from .context import LABELS, PARAGRAPH_IN, PARAGRAPH_OUT, Ctx, ParagraphResult, PendingClaim
from .grounding import audit_grounding, has_claim_hint
from .links import (
    any_unsafe_link,
    audit_bare_urls,
    audit_links,
    convert_anchors,
    neutralise_links,
    strip_dangling,
)
from .markup import sanitize_markup
from .prompt_leak import may_start_heading, strip_prompt_leaks
from .settings import GuardrailSettings, SourceIndex
from .syntax.autolinks import may_hold_url
from .syntax.text import has_digit

__all__ = ["LABELS", "Ctx", "ParagraphResult", "PendingClaim", "audit_paragraph"]


MAX_SETTLE_ROUNDS = 3


def settle(ctx: Ctx) -> None:
    """Removals can join what was apart: a tag (`<<x>b>`), a link (`[](` + `path)`) or a
    bare URL. Judge what they formed, a bounded number of times, then make any link left
    inert (brackets escaped) and any tag text."""
    for _ in range(MAX_SETTLE_ROUNDS):
        before = ctx.doc.text
        if "<" in before:
            sanitize_markup(ctx)
        if any_unsafe_link(ctx):
            neutralise_links(ctx)
        audit_bare_urls(ctx, record_kept=False)
        if ctx.doc.text is before or ctx.doc.text == before:
            return


# A paragraph this long can make hundreds of thousands of records (one per removed tag or
# URL); they hold no reference cycles, so the cyclic collector finds nothing in them but
# would walk them again and again as they accumulate.
LARGE_PARAGRAPH = 1 << 16


def audit_paragraph(
    text: str,
    base: int,
    settings: GuardrailSettings,
    sources: SourceIndex,
    caps: RecordCaps | None = None,
    open_fence: str | None = None,
    indented_code: bool = False,
) -> ParagraphResult:
    """`caps`: the audit's record budget; records past it are counted, not built.
    `open_fence`: what the cleaned paragraphs before leave open (see
    `text.fence_state_after`); `indented_code`: whether they leave INDENT_CLEAR (see
    `text.indent_state_after`)."""
    if len(text) < LARGE_PARAGRAPH:
        return _audit_paragraph(text, base, settings, sources, caps, open_fence, indented_code)
    with collector_paused():  # scoped, and safe with concurrent threads (see collector)
        return _audit_paragraph(text, base, settings, sources, caps, open_fence, indented_code)


def nothing_to_find(text: str, settings: GuardrailSettings) -> bool:
    """True only when no rule can change or report anything in the paragraph: no NUL
    (read as U+FFFD), no markup or link syntax ("<", "](", "]:"), no claim (grounding's
    own gates), no line that may start a prompt heading and no bare-URL marker. Each
    check is a rule's own first gate, those that fail most paragraphs with links or URLs
    first (a paragraph that fails pays them again in the rules); most prose paragraphs
    pass them all, and then need no `Ctx` and no rule at all."""
    return (
        "\x00" not in text
        and "<" not in text
        and "](" not in text
        and "]:" not in text
        and "//" not in text
        and "@" not in text
        and (not has_digit(text) or not has_claim_hint(text))
        and not (
            settings.prompt_leak
            and settings.patterns
            and may_start_heading(text, settings.patterns)
        )
        and not may_hold_url(text)
    )


def _audit_paragraph(
    text: str,
    base: int,
    settings: GuardrailSettings,
    sources: SourceIndex,
    caps: RecordCaps | None,
    open_fence: str | None,
    indented_code: bool,
) -> ParagraphResult:
    if nothing_to_find(text, settings):  # what the rules below would return for it
        out = ParagraphResult(text, [], [], [PARAGRAPH_IN, PARAGRAPH_OUT], [], [])
        if caps is not None:
            caps.take_trace(out.trace, 0)
        return out
    ctx = Ctx(text, base, settings, sources, caps, open_fence, indented_code)
    if settings.prompt_leak and settings.patterns:
        strip_prompt_leaks(ctx)
    if settings.links:
        if "<a" in ctx.doc.text or "<A" in ctx.doc.text:  # else there is no anchor
            convert_anchors(ctx)
        if "<" in ctx.doc.text:
            sanitize_markup(ctx)
        stripped_at = audit_links(ctx)
        if stripped_at:
            strip_dangling(ctx, stripped_at)
        audit_bare_urls(ctx)
        settle(ctx)
    if settings.grounding:
        audit_grounding(ctx)
    ctx.out.text = ctx.doc.text
    ctx.out.trace.append(PARAGRAPH_OUT)
    if caps is not None:
        caps.take_trace(ctx.out.trace, ctx.trace_cut)
    return ctx.out
