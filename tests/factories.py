"""Build stored audits quickly (tests, demo data, benchmarks) without running the engine.

make_audit(overall_score=0.8, results=[result("redflag", 0.8, [annotation("EMPTY_OUTPUT")])])
make_audits(50)   # varied, deterministic for a given seed
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from django.utils import timezone

from audits.models import (
    AnalyzerRunRecord,
    Annotation,
    AnnotationKind,
    AuditLinks,
    AuditRun,
    TraceLine,
)
from audits.store.link_rows import StoredLink, packed
from audits.store.scoring import top_result

CATEGORIES = {
    "redflag": "structure",
    "links": "links",
    "grounding": "grounding",
    "prompt_leak": "compliance",
    "bias": "metacognition",
    "tone": "communication",
}
TYPES = {
    "redflag": ["EMPTY_OUTPUT", "TOO_MANY_CHARS", "JSON_PARSE_FAILED", "COLLISION_DETECTED"],
    "links": ["LINK_HOST_NOT_ALLOWED", "LINK_LABEL_UPGRADED", "LINK_UNHEALTHY"],
    "grounding": ["UNGROUNDED_CUSTOMER_CLAIM"],
    "prompt_leak": ["PROMPT_LEAK"],
    "bias": ["sycophancy", "anchoring_bias", "false_consensus"],
    "tone": ["condescending", "dismissive"],
}
QUESTIONS = [
    "Which retailers use Acme?",
    "How do I set up faceting?",
    "Is Acme better than the competition?",
    "Where can I read more about the API?",
    "Any results from Decathlon?",
]
RESPONSES = [
    "Acme is easy to set up. See [the docs](https://docs.acme.example/api).",
    "Everyone agrees Acme is the best search engine, obviously.",
    "Namedrop: Decathlon. Decathlon grew conversion by 50%.",
    "Read [this article](https://random-blog.example.org/tips) first.",
    "",
]


def annotation(
    type: str = "EMPTY_OUTPUT",
    severity: str = "warning",
    *,
    label: str | None = None,
    description: str = "",
    evidence: str | None = None,
    start: int | None = None,
    end: int | None = None,
) -> dict[str, Any]:
    return {
        "type": type,
        "label": label or type.replace("_", " ").capitalize(),
        "severity": severity,
        "description": description,
        "evidence": evidence,
        "start": start,
        "end": end,
    }


def result(
    analyzer_id: str = "redflag",
    score: float = 0.0,
    annotations: list[dict[str, Any]] | None = None,
    *,
    status: str = "ok",
    error: str | None = None,
    should_surface: bool = False,
    surfaced: bool | None = None,
    threshold: float = 0.3,
    duration_ms: float = 1.0,
    supplementary: dict[str, Any] | None = None,
    category: str | None = None,
) -> dict[str, Any]:
    if surfaced is None:
        surfaced = status == "ok" and (score >= threshold or should_surface)
    return {
        "analyzer_id": analyzer_id,
        "category": category or CATEGORIES.get(analyzer_id, "custom"),
        "score": score,
        "status": status,
        "error": error,
        "should_surface": should_surface,
        "surfaced": surfaced,
        "duration_ms": duration_ms,
        "supplementary": supplementary or {},
        "annotations": annotations or [],
    }


def make_audit(
    *,
    results: list[dict[str, Any]] | None = None,
    trace: list[str] | None = None,
    links: list[dict[str, Any]] | None = None,
    status: str = "complete",
    **fields: Any,
) -> AuditRun:
    """A stored audit with its results, annotations, trace lines and links.

    `overall_score` and `has_card` default to what the results imply (docs/reference/contract.md section 1).
    """
    results = results if results is not None else [result()]
    ok = [r["score"] for r in results if r["status"] == "ok"]
    now = timezone.now()
    top_score, top_analyzer = top_result(results) if status == "complete" else (None, "")
    defaults: dict[str, Any] = {
        "top_score": top_score,
        "top_analyzer": top_analyzer,
        "user_input": "Which retailers use Acme?",
        "response": "Acme is easy to set up.",
        "status": status,
        "threshold": 0.3,
        "overall_score": (sum(ok) / len(ok) if ok else 0.0) if status == "complete" else None,
        "has_card": any(r["surfaced"] for r in results) if status == "complete" else False,
        "started_at": now if status != "pending" else None,
        "finished_at": now if status in ("complete", "failed") else None,
        "attempts": 0 if status == "pending" else 1,
    }
    defaults.update(fields)
    defaults.setdefault("cleaned_response", defaults["response"])
    run = AuditRun.objects.create(**defaults)
    if status != "complete":
        return run
    annotations = []
    for i, r in enumerate(results):
        data = {k: v for k, v in r.items() if k != "annotations"}
        record = AnalyzerRunRecord.objects.create(audit=run, position=i, **data)
        annotations += Annotation.objects.bulk_create(
            [
                Annotation(audit=run, result=record, position=j, analyzer_id=r["analyzer_id"], **a)
                for j, a in enumerate(r["annotations"])
            ]
        )
    AnnotationKind.objects.bulk_create(  # as audits.store.reports stores them
        AnnotationKind(audit=run, type=type_, severity=severity, count=n)
        for (type_, severity), n in AnnotationKind.counted(annotations).items()
    )
    TraceLine.objects.bulk_create(
        [
            TraceLine(audit=run, position=i, text=t)
            for i, t in enumerate(trace if trace is not None else ["[AUDIT] start", "[AUDIT] done"])
        ]
    )
    if links:
        AuditLinks.objects.create(
            audit=run,
            rows=packed(
                StoredLink(**{"reason": None, "http_status": None, "healthy": None, **link})
                for link in links
            ),
        )
    return run


def make_audits(n: int, *, seed: int = 0, spread: timedelta = timedelta(days=7)) -> list[AuditRun]:
    """`n` varied stored audits: scores, cards, failures, annotation types and severities."""
    rng = random.Random(seed)
    now = timezone.now()
    runs = []
    for i in range(n):
        picked = rng.sample(list(CATEGORIES), k=rng.randint(1, len(CATEGORIES)))
        results = []
        for analyzer_id in picked:
            if rng.random() < 0.05:
                results.append(
                    result(analyzer_id, 0.0, status="failed", error="RuntimeError: boom")
                )
                continue
            score = round(rng.random() ** 2, 3)
            annotations = []
            if score >= 0.2:
                for _ in range(rng.randint(1, 3)):
                    annotations.append(
                        annotation(
                            rng.choice(TYPES[analyzer_id]),
                            rng.choice(["info", "warning", "critical"]),
                            evidence="Acme",
                            start=0,
                            end=4,
                        )
                    )
            results.append(result(analyzer_id, score, annotations))
        response = rng.choice(RESPONSES)
        runs.append(
            make_audit(
                results=results,
                user_input=rng.choice(QUESTIONS),
                response=response,
                created_at=now - spread * rng.random(),
                external_id=f"demo-{seed}-{i}" if rng.random() < 0.5 else None,
                metadata={"session": f"s{rng.randint(1, 20)}"},
                links=[
                    {
                        "url": "https://docs.acme.example/api",
                        "label": "the docs",
                        "decision": "keep",
                        "reason": None,
                        "http_status": 200,
                        "healthy": True,
                    }
                ]
                if "docs" in response
                else [],
            )
        )
    return runs


def fabricated_claim_result() -> dict[str, Any]:
    """A grounding result that flags a fabricated customer claim (critical, surfaced)."""
    return result(
        "grounding",
        0.9,
        [
            annotation(
                "UNGROUNDED_CUSTOMER_CLAIM",
                "critical",
                label="Ungrounded customer claim",
                description="Al-Futtaim is not a known customer.",
                evidence="Al-Futtaim achieved +206% revenue.",
                start=0,
                end=34,
            )
        ],
    )


def fabricated_claim_audit(*, results: list[dict[str, Any]] = (), **fields: Any) -> AuditRun:
    """A stored audit of a response with a fabricated customer claim; more results appended."""
    return make_audit(
        user_input="Which retailers use Acme?",
        response="Al-Futtaim achieved +206% revenue. Acme is easy to set up.",
        cleaned_response="Acme is easy to set up.",
        results=[fabricated_claim_result(), *results],
        trace=["[AUDIT] grounding: UNKNOWN_COMPANY Al-Futtaim", "[AUDIT] done"],
        **fields,
    )
