"""A candidate's shadow results against the audits' own: what would surface or not, which
findings it would lose or gain, and what reviewers' verdicts say of the difference.

A finding is matched by (audit, analyzer, type, evidence, start, end), as many times as
it occurs. Analyzers the candidate's run left out (judged ones, unless asked) are left
out of both sides. Verdicts are the current ones on the active findings (`Review`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from django.conf import settings

from analyzers.models import CandidateConfig
from audits.models import AnalyzerRunRecord, Annotation, Review, ShadowResult

LIST_LIMIT = 500  # entries per list in a comparison (the counts are whole)
CHUNK = 500

Key = tuple[str, str, str, Any, Any]


def finding_key(analyzer: str, type_: str, evidence: Any, start: Any, end: Any) -> Key:
    return (analyzer, type_, evidence or "", start, end)


def _finding(audit_id: str, f: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "audit_id": audit_id,
        "analyzer": f["analyzer"],
        "type": f["type"],
        "severity": f.get("severity"),
        "label": f.get("label", ""),
        "evidence": f.get("evidence"),
        "start": f.get("start"),
        "end": f.get("end"),
        **extra,
    }


def _active(audit_ids: list[Any]) -> tuple[dict, dict, dict]:
    """Per audit: its findings (with annotation id), the surfaced flag of each result, and
    the current verdict per annotation id."""
    findings: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    surfaced: dict[Any, dict[str, bool]] = defaultdict(dict)
    verdicts: dict[int, str] = {}
    for i in range(0, len(audit_ids), CHUNK):
        ids = audit_ids[i : i + CHUNK]
        for row in (
            Annotation.objects.filter(audit_id__in=ids)
            .values(
                "id",
                "audit_id",
                "analyzer_id",
                "type",
                "severity",
                "label",
                "evidence",
                "start",
                "end",
            )
            .order_by("audit_id", "result_id", "position", "id")
        ):
            findings[row["audit_id"]].append(
                {
                    "annotation_id": row["id"],
                    "analyzer": row["analyzer_id"],
                    "type": row["type"],
                    "severity": row["severity"],
                    "label": row["label"],
                    "evidence": row["evidence"],
                    "start": row["start"],
                    "end": row["end"],
                }
            )
        for audit_id, analyzer_id, flag in AnalyzerRunRecord.objects.filter(
            audit_id__in=ids
        ).values_list("audit_id", "analyzer_id", "surfaced"):
            surfaced[audit_id][analyzer_id] = surfaced[audit_id].get(analyzer_id, False) or flag
        verdicts.update(
            Review.objects.filter(
                audit_id__in=ids, is_current=True, annotation__isnull=False
            ).values_list("annotation_id", "verdict")
        )
    return findings, surfaced, verdicts


def _precision(counts: dict[str, Counter]) -> dict[str, dict[str, Any]]:
    out = {}
    for analyzer, c in sorted(counts.items()):

        def ratio(confirmed: int, false_positive: int) -> float | None:
            total = confirmed + false_positive
            return round(confirmed / total, 4) if total else None

        out[analyzer] = {
            "before": ratio(c["confirmed"], c["false_positive"]),
            "after": ratio(c["confirmed_kept"], c["false_positive_kept"]),
            "verdicts": c["confirmed"] + c["false_positive"],
        }
    return out


def compare(candidate: CandidateConfig) -> dict[str, Any]:
    """The comparison of GET /api/config/candidates/{id}/diff, over the candidate's latest
    `AUDITOR_REPLAY_MAX` shadow results."""
    rows = list(
        ShadowResult.objects.filter(candidate=candidate)
        .order_by("-audit__created_at", "-audit_id")
        .values("audit_id", "surfaced", "findings", "left_out")[: settings.AUDITOR_REPLAY_MAX]
    )
    findings, surfaced, verdicts = _active([r["audit_id"] for r in rows])
    lists: dict[str, list] = {
        k: []
        for k in (
            "newly_surfaced",
            "no_longer_surfaced",
            "findings_lost",
            "findings_gained",
            "confirmed_findings_lost",
            "false_positives_removed",
        )
    }
    counts: Counter = Counter()
    precision: dict[str, Counter] = defaultdict(Counter)

    def add(name: str, item: Any) -> None:
        counts[name] += 1
        if len(lists[name]) < LIST_LIMIT:
            lists[name].append(item)

    for row in rows:
        audit_id, left_out = row["audit_id"], set(row["left_out"] or [])
        key = str(audit_id)
        was = any(flag for a, flag in surfaced[audit_id].items() if a not in left_out)
        if row["surfaced"] and not was:
            add("newly_surfaced", key)
        elif was and not row["surfaced"]:
            add("no_longer_surfaced", key)
        shadow = Counter(
            finding_key(f["analyzer"], f["type"], f.get("evidence"), f.get("start"), f.get("end"))
            for f in row["findings"] or []
            if f["analyzer"] not in left_out
        )
        remaining = Counter(shadow)
        for f in findings[audit_id]:
            if f["analyzer"] in left_out:
                continue
            k = finding_key(f["analyzer"], f["type"], f["evidence"], f["start"], f["end"])
            verdict = verdicts.get(f["annotation_id"])
            kept = remaining[k] > 0
            if kept:
                remaining[k] -= 1
            if verdict in ("confirmed", "false_positive"):
                precision[f["analyzer"]][verdict] += 1
                precision[f["analyzer"]][f"{verdict}_kept"] += int(kept)
            if kept:
                continue
            item = _finding(key, f, annotation_id=f["annotation_id"], verdict=verdict)
            add("findings_lost", item)
            if verdict == "confirmed":
                add("confirmed_findings_lost", item)
            elif verdict == "false_positive":
                add("false_positives_removed", item)
        for f in row["findings"] or []:
            k = finding_key(
                f["analyzer"], f["type"], f.get("evidence"), f.get("start"), f.get("end")
            )
            if f["analyzer"] not in left_out and remaining[k] > 0:
                remaining[k] -= 1
                add("findings_gained", _finding(key, f))
    return {
        "candidate": candidate.pk,
        "compared": len(rows),
        **lists,
        "counts": {name: counts[name] for name in lists},
        "precision": _precision(precision),
    }


def summary(comparison: dict[str, Any]) -> dict[str, Any]:
    """What the change log keeps of a comparison: the counts."""
    return {"compared": comparison["compared"], **comparison["counts"]}
