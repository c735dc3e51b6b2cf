"""Bias and sycophancy: does the response tell the user what they want to hear?

With a model: detect agreement -> classify (six bias types) -> score -> counterpoint (only
when the score reaches the threshold, which saves a call) -> format. Without one: phrase
rules (`heuristics_bias`), marked `supplementary.method = "heuristic"`.
"""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, field_validator

from analyzers.engine.base import Analyzer, AnalyzerSettings, AuditContext
from analyzers.engine.builtin.heuristics import combine, score_label, to_annotations, type_label
from analyzers.engine.builtin.heuristics_bias import COUNTER_PROMPTS, bias_signals
from analyzers.engine.builtin.judging import JudgedItem, clamp_unit, verify_items
from analyzers.engine.contract import AnalyzerResult, AuditInput
from analyzers.engine.llm import (
    LLMClient,
    Usage,
    format_sources,
    get_llm_client,
    load_prompt,
    locate_quote,
)

BiasType = Literal[
    "sycophancy",
    "confirmation_bias",
    "anchoring_bias",
    "authority_deference",
    "recency_bias",
    "false_consensus",
]
BIAS_TYPES: tuple[str, ...] = get_args(BiasType)
# A heuristic run's usage: no model call (copied per result, never shared).
_NO_USAGE = Usage().as_dict()


class Agreement(BaseModel):
    """Step 1: does the answer agree with what the user asserted?"""

    user_position: str = ""
    agrees: bool = False
    agreement_level: float = Field(default=0.0, ge=0.0, le=1.0)
    evidence: list[str] = Field(default_factory=list)

    @field_validator("agreement_level", mode="before")
    @classmethod
    def _level(cls, value: Any) -> Any:
        return clamp_unit(value)


class BiasItem(JudgedItem):
    type: BiasType


class Classification(BaseModel):
    """Step 2: the biases found, each with a quote."""

    biases: list[BiasItem] = Field(default_factory=list)
    summary: str = ""


class Counterpoints(BaseModel):
    """Step 4: what an honest expert would have said."""

    counter_arguments: list[str] = Field(default_factory=list)


class BiasSettings(AnalyzerSettings):
    # Score from which counter-arguments are generated; default: the audit threshold.
    counterpoint_threshold: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Score from which counter-arguments are written; none: the threshold",
    )
    max_counter_arguments: int = Field(
        default=5, ge=0, le=10, description="At most this many counter-arguments"
    )
    # False forces the heuristic even when a model is configured.
    use_model: bool = Field(
        default=True, description="Off: phrase heuristics even when a model is configured"
    )


class BiasAnalyzer(Analyzer):
    id = "bias"
    category = "metacognition"
    description = (
        "Sycophancy and cognitive biases (confirmation, anchoring, authority deference, "
        "recency, false consensus), judged by the configured model or, without one, "
        "by phrase heuristics."
    )
    Settings = BiasSettings
    annotation_types = BIAS_TYPES

    def never_waits(self, settings: BiasSettings, context: AuditContext) -> bool:
        """Without a model (none configured, or `use_model` off) only the heuristic runs."""
        return not settings.use_model or get_llm_client(context) is None

    async def analyze(
        self, audit: AuditInput, settings: BiasSettings, context: AuditContext
    ) -> AnalyzerResult:
        threshold = (
            context.config.threshold
            if settings.counterpoint_threshold is None
            else settings.counterpoint_threshold
        )
        client = get_llm_client(context) if settings.use_model else None
        if client is None:
            return self.heuristic(audit, threshold, settings.max_counter_arguments)
        return await self.judged(audit, client, threshold, settings.max_counter_arguments)

    # -- with a model -----------------------------------------------------------------------

    async def judged(
        self, audit: AuditInput, client: LLMClient, threshold: float, max_counter: int
    ) -> AnalyzerResult:
        usage = Usage()
        values = {
            "user_input": audit.user_input,
            "response": audit.response,
            "sources": format_sources(audit.sources),
        }
        agreement: Agreement = await client.complete_json(
            load_prompt("bias_detect.v1").messages(**values), Agreement, usage=usage
        )
        agreement_json = agreement.model_dump_json(indent=1)
        classification: Classification = await client.complete_json(
            load_prompt("bias_classify.v1").messages(**values, agreement=agreement_json),
            Classification,
            usage=usage,
        )

        annotations, weights, dropped = verify_items(audit.response, classification.biases)
        score = combine(weights)
        sycophancy_score = combine(
            w for a, w in zip(annotations, weights, strict=True) if a.type == "sycophancy"
        )

        counter_arguments: list[str] = []
        if score >= threshold and annotations and max_counter:
            found = json.dumps(
                [{"type": a.type, "evidence": a.evidence} for a in annotations], indent=1
            )
            counterpoints: Counterpoints = await client.complete_json(
                load_prompt("bias_counterpoint.v1").messages(**values, biases=found),
                Counterpoints,
                usage=usage,
            )
            counter_arguments = [c.strip() for c in counterpoints.counter_arguments if c.strip()]
            counter_arguments = counter_arguments[:max_counter]

        agreement_quotes = [q for q in agreement.evidence if locate_quote(audit.response, q)]
        return self.result(
            score=score,
            annotations=annotations,
            should_surface=any(a.severity == "critical" for a in annotations),
            supplementary={
                "summary": classification.summary.strip() or _summary(annotations),
                "label": score_label(score),
                "sycophancy_score": sycophancy_score,
                "counter_arguments": counter_arguments,
                "method": "llm",
                "model": client.model,
                "agreement": {
                    "agrees": agreement.agrees,
                    "level": agreement.agreement_level,
                    "user_position": agreement.user_position,
                    "evidence": agreement_quotes,
                },
                "dropped_unverified": dropped,
                "usage": usage.as_dict(),
            },
        )

    # -- without a model --------------------------------------------------------------------

    def heuristic(self, audit: AuditInput, threshold: float, max_counter: int) -> AnalyzerResult:
        signals = bias_signals(audit.user_input, audit.response)
        annotations = to_annotations(audit.response, signals.findings)
        score = combine(f.weight for f in signals.findings)
        sycophancy_score = combine(f.weight for f in signals.findings if f.type == "sycophancy")
        counter_arguments: list[str] = []
        if score >= threshold and annotations:
            types = dict.fromkeys(a.type for a in annotations)
            counter_arguments = [COUNTER_PROMPTS[t] for t in types][:max_counter]
        return self.result(
            score=score,
            annotations=annotations,
            supplementary={
                "summary": _summary(annotations),
                "label": score_label(score),
                "sycophancy_score": sycophancy_score,
                "counter_arguments": counter_arguments,
                "method": "heuristic",
                "corrects_user": signals.corrected,
                "usage": dict(_NO_USAGE),
            },
        )


def _summary(annotations: list[Any]) -> str:
    if not annotations:
        return "No sign of bias or sycophancy found."
    counts: dict[str, int] = {}
    for a in annotations:
        counts[a.type] = counts.get(a.type, 0) + 1
    parts = [f"{type_label(t).lower()} ({n})" for t, n in counts.items()]
    return "Signs of " + ", ".join(parts) + "."
