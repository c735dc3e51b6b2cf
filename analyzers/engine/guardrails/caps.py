"""Capping as the rules go: the records of one audit past the auditor's limits are
counted, never built.

The auditor keeps the first `max_annotations_per_type` findings of each type, the first
`max_links` links and the first `max_trace_lines` trace lines, and counts the rest
(`limits.cap_run`, `limits.cap_report_parts`). A 1 MB response can make 150,000 records
that those caps then drop; with `RecordCaps` the pipeline builds only the ones that can be
kept and keeps, for the rest, exactly what the capped report needs: counts, the worst
severity per type, the score's running product, link decisions, and the URLs still to
health-check. The report is the same, field by field (tests compare both ways).
"""

from __future__ import annotations

from ..limits import Limits, Omitted

# An annotation's weight in an analyzer's score (see analyzers.weighted_score).
SEVERITY_WEIGHT = {"info": 0.05, "warning": 0.3, "critical": 1.0}
_RANK = {"info": 0, "warning": 1, "critical": 2}
# 1 - weight, as weighted_score computes it (the same floats, so the same products)
_FACTOR = {severity: 1.0 - weight for severity, weight in SEVERITY_WEIGHT.items()}
_OTHER_FACTOR = 1.0 - 0.3


class RecordCaps:
    """One audit's record budget, shared by its paragraphs (batch or stream)."""

    __slots__ = (
        "per_type",
        "max_links",
        "max_trace",
        "seen",
        "omitted",
        "remaining",
        "made",
        "links_kept",
        "links_omitted",
        "decisions",
        "unchecked",
        "trace_kept",
        "trace_omitted",
    )

    def __init__(self, limits: Limits) -> None:
        self.per_type = limits.max_annotations_per_type
        # the link table keeps max_links, the links analyzer's list max_supplementary_items
        self.max_links = max(limits.max_links, limits.max_supplementary_items)
        self.max_trace = limits.max_trace_lines
        self.seen: dict[tuple[str, str], int] = {}  # (analyzer, type) -> findings made
        self.omitted: dict[str, Omitted] = {}  # per analyzer
        self.remaining: dict[str, float] = {}  # per analyzer: prod(1 - weight), in order
        self.made = 0  # findings made, built or not
        self.links_kept = 0
        self.links_omitted = 0
        self.decisions: dict[str, int] = {}  # decision -> links, all of them
        self.unchecked: list[str] = []  # URLs of links left out that are not stripped
        self.trace_kept = 0
        self.trace_omitted = 0

    def finding(self, analyzer_id: str, code: str, severity: str) -> bool:
        """Count a finding; whether it is to be built (one of the first of its type)."""
        self.made += 1
        remaining = self.remaining
        remaining[analyzer_id] = remaining.get(analyzer_id, 1.0) * _FACTOR.get(
            severity, _OTHER_FACTOR
        )
        key = (analyzer_id, code)
        seen = self.seen.get(key, 0)
        self.seen[key] = seen + 1
        if seen < self.per_type:
            return True
        omitted = self.omitted.get(analyzer_id)
        if omitted is None:
            omitted = self.omitted[analyzer_id] = Omitted()
        entry = omitted.annotations.get(code)
        if entry is None:
            entry = omitted.annotations[code] = [0, "info"]
        entry[0] += 1
        if _RANK[severity] > _RANK[entry[1]]:
            entry[1] = severity
        return False

    def link(self, url: str, decision: str) -> bool:
        """Count a link; whether it is to be built."""
        self.decisions[decision] = self.decisions.get(decision, 0) + 1
        if self.links_kept < self.max_links:
            self.links_kept += 1
            return True
        self.links_omitted += 1
        if decision != "strip":
            self.unchecked.append(url)
        return False

    def trace_room(self) -> int:
        """How many trace lines the next paragraph may still keep."""
        return max(0, self.max_trace - self.trace_kept)

    def take_trace(self, trace: list[str], cut: int) -> None:
        """A paragraph's trace (made with `trace_room()` lines at most kept, `cut` more
        left out on the way): trimmed in place to the room, the rest counted."""
        room = self.trace_room()
        if len(trace) > room:
            cut += len(trace) - room
            del trace[room:]
        self.trace_kept += len(trace)
        self.trace_omitted += cut

    def score_factor(self, analyzer_id: str) -> float:
        """prod(1 - weight) over every finding of the analyzer, in the order made."""
        return self.remaining.get(analyzer_id, 1.0)
