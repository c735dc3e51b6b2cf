"""Tone: is the response condescending, dismissive or unprofessional?

One model call (`tone_detect` prompt) when a model is configured, phrase rules otherwise.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

from analyzers.engine.base import Analyzer, AnalyzerSettings, AuditContext
from analyzers.engine.builtin.heuristics import combine, score_label, to_annotations, type_label
from analyzers.engine.builtin.heuristics_tone import tone_signals
from analyzers.engine.builtin.judging import JudgedItem, verify_items
from analyzers.engine.contract import AnalyzerResult, Annotation, AuditInput
from analyzers.engine.llm import LLMClient, Usage, get_llm_client, load_prompt

ToneType = Literal["condescending", "dismissive", "unprofessional"]
TONE_TYPES: tuple[str, ...] = get_args(ToneType)
# A heuristic run's usage: no model call (copied per result, never shared).
_NO_USAGE = Usage().as_dict()


class ToneIssue(JudgedItem):
    type: ToneType


class ToneReview(BaseModel):
    issues: list[ToneIssue] = Field(default_factory=list)
    tone: str = ""
    summary: str = ""


class ToneSettings(AnalyzerSettings):
    # False forces the heuristic even when a model is configured.
    use_model: bool = Field(
        default=True, description="Off: phrase heuristics even when a model is configured"
    )


class ToneAnalyzer(Analyzer):
    id = "tone"
    category = "communication"
    description = (
        "Condescending, dismissive or unprofessional language, judged by the configured "
        "model or, without one, by phrase heuristics."
    )
    Settings = ToneSettings
    annotation_types = TONE_TYPES

    def never_waits(self, settings: ToneSettings, context: AuditContext) -> bool:
        """Without a model (none configured, or `use_model` off) only the heuristic runs."""
        return not settings.use_model or get_llm_client(context) is None

    async def analyze(
        self, audit: AuditInput, settings: ToneSettings, context: AuditContext
    ) -> AnalyzerResult:
        client = get_llm_client(context) if settings.use_model else None
        if client is None:
            return self.heuristic(audit)
        return await self.judged(audit, client)

    async def judged(self, audit: AuditInput, client: LLMClient) -> AnalyzerResult:
        usage = Usage()
        review: ToneReview = await client.complete_json(
            load_prompt("tone_detect.v1").messages(
                user_input=audit.user_input, response=audit.response
            ),
            ToneReview,
            usage=usage,
        )
        annotations, weights, dropped = verify_items(audit.response, review.issues)
        score = combine(weights)
        return self.result(
            score=score,
            annotations=annotations,
            should_surface=any(a.severity == "critical" for a in annotations),
            supplementary={
                "summary": review.summary.strip() or _summary(annotations),
                "label": score_label(score),
                "tone": review.tone.strip(),
                "method": "llm",
                "model": client.model,
                "dropped_unverified": dropped,
                "usage": usage.as_dict(),
            },
        )

    def heuristic(self, audit: AuditInput) -> AnalyzerResult:
        findings = tone_signals(audit.response)
        annotations = to_annotations(audit.response, findings)
        score = combine(f.weight for f in findings)
        return self.result(
            score=score,
            annotations=annotations,
            should_surface=any(a.severity == "critical" for a in annotations),
            supplementary={
                "summary": _summary(annotations),
                "label": score_label(score),
                "method": "heuristic",
                "usage": dict(_NO_USAGE),
            },
        )


def _summary(annotations: list[Annotation]) -> str:
    if not annotations:
        return "No tone problem found."
    types = dict.fromkeys(type_label(a.type).lower() for a in annotations)
    return "Tone problems: " + ", ".join(types) + "."
