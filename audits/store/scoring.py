"""The headline score of an audit: its highest successful result score (`top_score`).

The mean (`overall_score`) hides one bad finding among good ones; the highest score is
the one that decides surfacing. Threshold-independent, so re-surfacing never changes it.
Stored on the audit by `services.store_reports`; migration 0006 backfilled older audits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


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
    """What a card or a detail page shows first: the highest score (or "forced"), the
    analyzer behind it, and a colour (`tone`, a CSS class) that follows surfacing and the
    worst surfaced severity, never the mean."""

    score: float | None
    analyzer: str
    forced: bool
    tone: str


def headline(run: Any, surfaced: Iterable[Any], severities: Iterable[str]) -> Headline:
    """`run` an audit; `surfaced` its surfaced results (anything with `analyzer_id`,
    `score`, `should_surface`); `severities` those of its surfaced findings.

    "Forced": every surfaced result surfaced because its analyzer forced it
    (`should_surface`), so no score decided; the analyzer shown is then the forced one."""
    surfaced = sorted(surfaced, key=lambda r: -r.score)
    forced = bool(surfaced) and all(r.should_surface for r in surfaced)
    analyzer = surfaced[0].analyzer_id if forced else run.top_analyzer
    if run.status != "complete":
        tone = "score-none"
    elif not run.has_card:
        tone = "score-low"
    else:
        worst = max(severities, key=lambda s: SEVERITY_RANK.get(s, 0), default="info")
        tone = SEVERITY_TONES.get(worst, "score-info")
    return Headline(run.top_score, analyzer, forced, tone)


SEVERITY_RANK = {"info": 1, "warning": 2, "critical": 3}
