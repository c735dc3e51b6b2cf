"""The review queue: surfaced audits without a verdict, handed out one at a time.

A reviewer *claims* the audit they are looking at (`AuditRun.claimed_by`/`claimed_until`)
so that two reviewers working at once never get the same one. The claim is taken with a
conditional UPDATE (only while nobody else holds a live claim), which is atomic on SQLite
and PostgreSQL alike: of two reviewers racing for one audit, exactly one UPDATE matches a
row and the other moves on to the next candidate. Claims expire after `CLAIM_TTL`, so an
abandoned tab does not hide an audit for long; recording a verdict releases the claim
(`audits.store.verdicts.record_review`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from audits.models import AuditRun, Review

CLAIM_TTL = timedelta(minutes=10)
ORDERS = {
    "oldest": ("created_at", "id"),
    # The headline score (audits.store.scoring): the highest result score, what decides surfacing.
    "score": ("-top_score", "created_at", "id"),
}
DEFAULT_ORDER = "oldest"
# Candidates fetched per round; a round is only repeated when others won all of them.
BATCH = 20
MAX_ROUNDS = 10


def normalize_order(value: Any) -> str:
    return value if value in ORDERS else DEFAULT_ORDER


def unreviewed() -> QuerySet[AuditRun]:
    """Finished audits with a card (something surfaced) that nobody has judged yet."""
    return AuditRun.objects.filter(
        status=AuditRun.Status.COMPLETE, has_card=True, reviewed_at__isnull=True
    )


def _claimable(user, now: datetime) -> Q:
    """Nobody holds a live claim on it, or this user does."""
    return (
        Q(claimed_by__isnull=True)
        | Q(claimed_until__isnull=True)
        | Q(claimed_until__lte=now)
        | Q(claimed_by=user)
    )


def candidates(
    user, order: str = DEFAULT_ORDER, skip_ids: Iterable[Any] = (), now: datetime | None = None
) -> QuerySet[AuditRun]:
    now = now or timezone.now()
    return (
        unreviewed()
        .filter(_claimable(user, now))
        .exclude(pk__in=list(skip_ids))
        .order_by(*ORDERS[normalize_order(order)])
    )


def current_claim(user, now: datetime | None = None) -> AuditRun | None:
    """The unreviewed audit this user holds a live claim on, if any."""
    now = now or timezone.now()
    return (
        unreviewed().filter(claimed_by=user, claimed_until__gt=now).order_by("created_at").first()
    )


def _try_claim(pk: Any, user, now: datetime) -> bool:
    """Claim one audit if still unreviewed and claimable; drop the user's other claims."""
    with transaction.atomic():
        won = (
            unreviewed()
            .filter(pk=pk)
            .filter(_claimable(user, now))
            .update(claimed_by=user, claimed_until=now + CLAIM_TTL)
        )
        if won:
            # One claim per reviewer: whatever they held before goes back to the queue.
            AuditRun.objects.filter(claimed_by=user).exclude(pk=pk).update(
                claimed_by=None, claimed_until=None
            )
    return bool(won)


def claim_next(user, order: str = DEFAULT_ORDER, skip_ids: Iterable[Any] = ()) -> AuditRun | None:
    """Claim (or renew) the audit this reviewer should look at now; None when none is left.

    The reviewer's own live claim comes first (a reload shows the same audit), unless it was
    skipped; otherwise the first claimable candidate in `order`.
    """
    skip = {str(pk) for pk in skip_ids}
    now = timezone.now()
    held = current_claim(user, now)
    if held is not None and str(held.pk) not in skip and _try_claim(held.pk, user, now):
        return AuditRun.objects.get(pk=held.pk)
    tried: set[Any] = set()
    for _round in range(MAX_ROUNDS):
        pks = [
            pk
            for pk in candidates(user, order, skip | tried, now).values_list("pk", flat=True)[
                :BATCH
            ]
        ]
        if not pks:
            break
        for pk in pks:
            if _try_claim(pk, user, now):
                return AuditRun.objects.get(pk=pk)
            tried.add(str(pk))
    release(user)
    return None


def release(user, audit_id: Any = None) -> int:
    """Give back this user's claim (on one audit, or all of theirs)."""
    claims = AuditRun.objects.filter(claimed_by=user)
    if audit_id is not None:
        claims = claims.filter(pk=audit_id)
    return claims.update(claimed_by=None, claimed_until=None)


@dataclass(frozen=True, slots=True)
class Progress:
    reviewed_today_by_me: int
    reviewed_today: int
    remaining: int
    claimed_by_others: int


def start_of_today(now: datetime | None = None) -> datetime:
    local = timezone.localtime(now or timezone.now())
    return local.replace(hour=0, minute=0, second=0, microsecond=0)


def progress(user) -> Progress:
    """Counters for the queue page: what got done today, and what is left."""
    now = timezone.now()
    today = start_of_today(now)
    left = unreviewed()
    return Progress(
        reviewed_today_by_me=Review.objects.filter(reviewer=user, created_at__gte=today)
        .values("audit_id")
        .distinct()
        .count(),
        reviewed_today=AuditRun.objects.filter(reviewed_at__gte=today).count(),
        remaining=left.count(),
        claimed_by_others=left.filter(claimed_by__isnull=False, claimed_until__gt=now)
        .exclude(claimed_by=user)
        .count(),
    )
