"""`manage.py setup_demo`: a populated dashboard on first run, the same login every run.

First run: loads the demo configuration (audits/demo/config.json), audits a few hundred
demo responses through the real engine (audits/demo/cases.jsonl, spread over six weeks so
the trends have shape), gives verdicts to about half of those with a card (the rest wait in
the review queue; see `load_demo_reviews`) and creates an `admin` superuser with a generated
password, kept in var/demo-admin.txt. Later runs change nothing and print the login again.
"""

from __future__ import annotations

import json
import random
import secrets
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from analyzers.config_store import load_config, save_config
from analyzers.engine.contract import AuditInput
from analyzers.models import AnalyzerConfig
from audits.execution.execute import build_auditor, store_report
from audits.intake.submit import submit_audit
from audits.models import Annotation, AuditRun, Review

DEMO_DIR = Path(__file__).resolve().parents[2] / "demo"
USERNAME = "admin"


class Command(BaseCommand):
    help = "Load demo configuration, demo audits and an admin login (only on first run)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--audits", type=int, default=360, help="How many demo audits.")
        parser.add_argument("--days", type=int, default=42, help="Spread them over this many days.")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--url", default="http://127.0.0.1:8000/")

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.perf_counter()
        if not AnalyzerConfig.objects.exists():
            self.load_config()
        if not AuditRun.objects.exists():
            count = self.load_audits(options["audits"], options["days"], options["seed"])
            self.stdout.write(
                f"Loaded {count} demo audits in {time.perf_counter() - started:.1f} s."
            )
            reviewed = load_demo_reviews(options["seed"])
            self.stdout.write(f"Reviewed {reviewed} of the demo audits with cards.")
        password = self.ensure_admin()
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"Dashboard: {options['url']}"))
        self.stdout.write(f"User:      {USERNAME}")
        self.stdout.write(f"Password:  {password}")

    def load_config(self) -> None:
        data = json.loads((DEMO_DIR / "config.json").read_text())
        save_config(data, actor="setup_demo", source="demo")
        self.stdout.write("Loaded the demo configuration.")

    def load_audits(self, n: int, days: int, seed: int) -> int:
        cases = [
            json.loads(line)
            for line in (DEMO_DIR / "cases.jsonl").read_text().splitlines()
            if line.strip()
        ]
        rng = random.Random(seed)
        auditor = build_auditor(load_config())
        now = timezone.now()
        span = timedelta(days=days)

        async def audit_all(planned: list[tuple[AuditRun, dict]]) -> list:
            reports = []
            for run, _case in planned:
                reports.append(
                    await auditor.audit(
                        AuditInput(
                            user_input=run.user_input,
                            response=run.response,
                            sources=run.sources,
                            metadata=run.metadata,
                        ),
                        options=run.options or None,
                        collision_key=run.collision_key,
                    )
                )
            return reports

        with transaction.atomic():
            planned = []
            for i, case in enumerate(demo_picks(cases, n, rng)):
                # Each audit its own collision key, but where a case names one: its repeats
                # are the demo's duplicates (COLLISION_DETECTED), and only they.
                key = case.get("collision_key") or f"demo-{seed}-{i}"
                run = submit_audit(
                    user_input=case["user_input"],
                    response=case["response"],
                    sources=case.get("sources") or [],
                    metadata={
                        "demo": True,
                        "case": case["id"],
                        "session": f"s{rng.randint(1, 40)}",
                    },
                    options=case.get("options") or {},
                    collision_key=key,
                    enqueue=False,
                )
                planned.append((run, case))
            reports = async_to_sync(audit_all)(planned)
            for (run, _case), report in zip(planned, reports, strict=True):
                store_report(run, report)
                # Busier recently and on weekdays: the trends page gets some shape.
                while True:
                    ago = span * (rng.random() ** 1.4)
                    created = now - ago
                    if created.weekday() < 5 or rng.random() < 0.35:
                        break
                finished = created + timedelta(milliseconds=rng.randint(40, 900))
                AuditRun.objects.filter(pk=run.pk).update(
                    created_at=created, started_at=created, finished_at=finished, attempts=1
                )
        return n

    def ensure_admin(self) -> str:
        User = get_user_model()
        secret_file = Path(settings.VAR_DIR) / "demo-admin.txt"
        user = User.objects.filter(username=USERNAME).first()
        if user is not None and secret_file.exists():
            return secret_file.read_text().strip()
        if user is not None:
            return "(unchanged: set one with `manage.py changepassword admin`)"
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(USERNAME, "admin@example.com", password)
        secret_file.parent.mkdir(parents=True, exist_ok=True)
        secret_file.write_text(password + "\n")
        secret_file.chmod(0o600)
        return password


def demo_picks(cases: list[dict], n: int, rng: random.Random) -> list[dict]:
    """`n` cases drawn at random; a case that names a collision key (one there to show a
    duplicate) is drawn at least twice when `n` allows it."""
    picks = [rng.choice(cases) for _ in range(n)]
    repeated = [case for case in cases if case.get("collision_key")]
    if repeated and n >= 2 * len(repeated):
        step = n // (2 * len(repeated))
        for i, case in enumerate(repeated):
            picks[2 * i * step] = picks[(2 * i + 1) * step] = case
    return picks


# Demo verdicts: how often reviewers reject a finding of each type. Cosmetic link fixes
# and phrase-heuristic judgements are the usual false positives; leaks and fabricated
# customer claims almost never are.
DEMO_FALSE_POSITIVE_RATES = {
    "TOKEN_LENGTH_SPIKE": 0.6,
    "LINK_LABEL_UPGRADED": 0.45,
    "LINK_LABEL_SUFFIX_NORMALIZED": 0.5,
    "HTML_ANCHOR_CONVERTED": 0.4,
    "SELF_CONTRADICTION": 0.35,
    "sycophancy": 0.3,
    "false_consensus": 0.35,
    "anchoring_bias": 0.4,
    "recency_bias": 0.4,
    "authority_deference": 0.35,
    "confirmation_bias": 0.3,
    "condescending": 0.25,
    "dismissive": 0.3,
    "unprofessional": 0.2,
    "PROMPT_LEAK": 0.02,
    "UNGROUNDED_CUSTOMER_CLAIM": 0.05,
    "LINK_UNSAFE_SCHEME": 0.0,
}
DEMO_REVIEWERS = ("alex", "sam", "priya")


def load_demo_reviews(seed: int) -> int:
    """Verdicts on about half of the demo audits with a card (fewer of the newest, which the
    review queue is for), given a few hours after each audit: mostly whole-audit verdicts,
    some per finding, a few unsure, a few changed once (the first stays as history).
    Rows are written as `audits.store.verdicts.record_review` leaves them (one current verdict per
    target, `reviewed_at` = the latest), backdated so the trends have a history."""
    rng = random.Random(seed + 1)
    now = timezone.now()
    findings: dict[Any, list[tuple[int, str, float]]] = {}
    for audit_id, pk, type_, score in Annotation.objects.filter(
        audit__has_card=True, result__surfaced=True
    ).values_list("audit_id", "pk", "type", "result__score"):
        findings.setdefault(audit_id, []).append((pk, type_, score))

    def verdict_for(found: list[tuple[int, str, float]]) -> str:
        if rng.random() < 0.06:
            return str(Review.Verdict.UNSURE)
        # Findings of low-scoring results are rejected more often: tuning has a story.
        rate = min(
            DEMO_FALSE_POSITIVE_RATES.get(t, 0.1) * min(1.6, max(0.3, 1.8 - 1.6 * score))
            for _, t, score in found
        )
        verdict = Review.Verdict.FALSE_POSITIVE if rng.random() < rate else Review.Verdict.CONFIRMED
        return str(verdict)

    reviews: list[Review] = []
    stamps: dict[Any, Any] = {}
    for audit_id, created in (
        AuditRun.objects.filter(has_card=True)
        .order_by("created_at")
        .values_list("id", "created_at")
    ):
        recent = now - created < timedelta(days=2)
        if audit_id not in findings or rng.random() >= (0.15 if recent else 0.55):
            continue
        at = min(now, created + timedelta(minutes=rng.randint(20, 36 * 60)))
        given: list[tuple[str, int | None, Any, bool]] = []  # verdict, annotation, when, current
        if rng.random() < 0.25:
            # Per finding: each surfaced finding judged on its own.
            for finding in findings[audit_id][:4]:
                given.append((verdict_for([finding]), finding[0], at, True))
        else:
            if rng.random() < 0.05:  # changed their mind once
                given.append((Review.Verdict.UNSURE, None, at - timedelta(minutes=5), False))
            given.append((verdict_for(findings[audit_id]), None, at, True))
        who = rng.choice(DEMO_REVIEWERS)
        reviews += [
            Review(
                audit_id=audit_id,
                annotation_id=annotation_id,
                verdict=verdict,
                reviewer_name=who,
                created_at=when,
                is_current=current,
            )
            for verdict, annotation_id, when, current in given
        ]
        stamps[audit_id] = at
    Review.objects.bulk_create(reviews, batch_size=500)
    for audit_id, at in stamps.items():
        AuditRun.objects.filter(pk=audit_id).update(reviewed_at=at)
    return len(stamps)
