"""The headline score of an audit: its highest successful result score (`top_score`).

The mean (`overall_score`) hides one bad finding among good ones; the highest score is
the one that decides surfacing. Threshold-independent, so re-surfacing never changes it.
Stored on the audit by `services.store_reports`; migration 0006 backfilled older audits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from analyzers.engine.contract import SEVERITY_RANK


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, dict) else getattr(item, name)


def top_result(results: Iterable[Any]) -> tuple[float | None, str]:
    """(highest score, its analyzer) over the results with status "ok"; (None, "") when
    none succeeded. Ties go to the earlier result. Takes engine results, records or dicts."""
    best: tuple[float | None, str] = (None, "")
    for item in results:
        if _field(item, "status") != "ok":
            continue
        score = float(_field(item, "score"))
        if best[0] is None or score > best[0]:
            best = (score, _field(item, "analyzer_id"))
    return best


SEVERITY_TONES = {"critical": "score-high", "warning": "score-mid", "info": "score-info"}


@dataclass(frozen=True, slots=True)
class Headline:
    """What a card or a detail page shows first: the highest score, the analyzer behind
    it, `forced_by` (the analyzer whose own `should_surface` surfaced the audit with a
    score under its threshold, shown beside the score; "" when none did) and a colour
    (`tone`, a CSS class) that follows surfacing and the worst surfaced severity, never
    the mean."""

    score: float | None
    analyzer: str
    forced_by: str
    tone: str


def forced_by(surfaced: Iterable[Any], threshold_for: Callable[[str], float]) -> str:
    """The analyzer of the highest-scoring surfaced result that only its `should_surface`
    surfaced (its score under the threshold that applied to it); "" when there is none."""
    for result in sorted(surfaced, key=lambda r: -r.score):
        if result.should_surface and result.score < threshold_for(result.analyzer_id):
            return result.analyzer_id
    return ""


def headline(
    run: Any,
    surfaced: Iterable[Any],
    severities: Iterable[str],
    threshold_for: Callable[[str], float],
) -> Headline:
    """`run` an audit; `surfaced` its surfaced results (anything with `analyzer_id`,
    `score`, `should_surface`); `severities` those of its surfaced findings;
    `threshold_for(analyzer_id)` the threshold its surfacing applied."""
    if run.status != "complete":
        tone = "score-none"
    elif not run.has_card:
        tone = "score-low"
    else:
        worst = max(severities, key=lambda s: SEVERITY_RANK.get(s, 0), default="info")
        tone = SEVERITY_TONES.get(worst, "score-info")
    return Headline(run.top_score, run.top_analyzer, forced_by(surfaced, threshold_for), tone)
