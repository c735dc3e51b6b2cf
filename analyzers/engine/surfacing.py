"""When a result is surfaced: the one rule, used when an audit is analysed and when stored
audits are re-surfaced after a threshold change (audits.surfacing), so the two never drift.

A result is surfaced when its analyzer succeeded and its score reaches the threshold that
applies to it (the analyzer's own, else the global one), or when it is forced
(`should_surface`). docs/reference/contract.md section 1.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import AuditorConfig


def is_surfaced(score: float, should_surface: bool, threshold: float) -> bool:
    """A successful result's surfacing: forced, or the score reaches the threshold."""
    return score >= threshold or should_surface


def decide_surfaced(*, status: str, score: float, should_surface: bool, threshold: float) -> bool:
    """The rule for one stored or fresh result; failed and timed-out runs never surface."""
    return status == "ok" and is_surfaced(score, should_surface, threshold)


@dataclass(frozen=True)
class Thresholds:
    """The global threshold and the analyzers' own thresholds (`own`)."""

    default: float = 0.3
    own: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: AuditorConfig) -> Thresholds:
        return cls(default=float(config.threshold), own=_own(config.analyzers))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Thresholds:
        return cls(
            default=float(data.get("threshold", 0.3)),
            own={str(k): float(v) for k, v in (data.get("analyzers") or {}).items()},
        )

    def as_dict(self) -> dict[str, Any]:
        return {"threshold": self.default, "analyzers": dict(sorted(self.own.items()))}

    def key(self) -> str:
        """A stable digest of these thresholds (equal thresholds, equal keys)."""
        text = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def for_analyzer(self, analyzer_id: str) -> float:
        """The analyzer's own threshold when it has one, else the global one."""
        value = self.own.get(analyzer_id)
        return self.default if value is None else value

    def with_options(self, options: Mapping[str, Any] | None) -> Thresholds:
        """These thresholds with one audit's per-analyzer `options` (their `threshold`s)."""
        if not options:
            return self
        extra = _own(options)
        if not extra:
            return self
        return Thresholds(default=self.default, own={**self.own, **extra})

    def surfaced(
        self, *, analyzer_id: str, status: str, score: float, should_surface: bool
    ) -> bool:
        return decide_surfaced(
            status=status,
            score=score,
            should_surface=should_surface,
            threshold=self.for_analyzer(analyzer_id),
        )


def _own(sections: Mapping[str, Any]) -> dict[str, float]:
    own = {}
    for analyzer_id, section in sections.items():
        if isinstance(section, Mapping) and section.get("threshold") is not None:
            value = section["threshold"]
            if not isinstance(value, bool) and isinstance(value, int | float):
                own[str(analyzer_id)] = float(value)
    return own
