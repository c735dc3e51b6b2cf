"""All guardrail rules applied to one paragraph, in the reference order.

prompt leak -> HTML anchors -> link classification (with label upgrade) -> label suffix
normalisation -> dangling attributions -> customer-claim grounding. Each step edits a
`Doc`, so every annotation keeps offsets into the original response.
"""

from __future__ import annotations

from .context import LABELS, PARAGRAPH_OUT, Ctx, ParagraphResult, PendingClaim
from .grounding import audit_grounding
from .links import audit_links, convert_anchors, strip_dangling
from .prompt_leak import strip_prompt_leaks
from .settings import GuardrailSettings, SourceIndex

__all__ = ["LABELS", "Ctx", "ParagraphResult", "PendingClaim", "audit_paragraph"]


def audit_paragraph(
    text: str, base: int, settings: GuardrailSettings, sources: SourceIndex
) -> ParagraphResult:
    ctx = Ctx(text, base, settings, sources)
    if settings.prompt_leak and settings.patterns:
        strip_prompt_leaks(ctx)
    if settings.links:
        if "<a" in ctx.doc.text or "<A" in ctx.doc.text:  # else there is no anchor
            convert_anchors(ctx)
        stripped_at = audit_links(ctx)
        if stripped_at:
            strip_dangling(ctx, stripped_at)
    if settings.grounding:
        audit_grounding(ctx)
    ctx.out.text = ctx.doc.text
    ctx.out.trace.append(PARAGRAPH_OUT)
    return ctx.out
