"""The headline score of an audit: its highest successful result score (`top_score`).

The mean (`overall_score`) hides one bad finding among good ones; the highest score is
the one that decides surfacing. Threshold-independent, so re-surfacing never changes it.
Stored on the audit by `services.store_reports`; migration 0006 backfilled older audits.
"""

from __future__ import annotations

from collections.abc import Iterable
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
