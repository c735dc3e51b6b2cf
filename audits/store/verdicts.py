"""Recording reviewers' verdicts (on a whole audit or on one of its annotations).

`record_review(...)` is the one write path, used by the dashboard, the review queue and
`POST /api/audits/{id}/reviews`. A new verdict supersedes the current one on the same
target (its row stays, `is_current=False`), stamps the audit's `reviewed_at`, releases the
audit's review-queue claim and tells the live pages.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from audits.events import publish
from audits.models import Annotation, AuditRun, Review

VERDICTS = tuple(Review.Verdict.values)
MAX_COMMENT = 5000


class ReviewError(ValueError):
    """A verdict that cannot be recorded (unknown verdict, foreign annotation, ...)."""


def record_review(
    *,
    audit_id: Any,
    verdict: str,
    annotation_id: int | None = None,
    comment: str = "",
    user=None,
    api_key=None,
) -> Review:
    if verdict not in VERDICTS:
        raise ReviewError(f"verdict must be one of {', '.join(VERDICTS)}")
    comment = (comment or "").strip()
    if len(comment) > MAX_COMMENT:
        raise ReviewError(f"comment is longer than {MAX_COMMENT} characters")
    if "\x00" in comment:
        raise ReviewError("comment: NUL characters are not allowed")
    with transaction.atomic():
        # Locking the audit row serialises concurrent verdicts on it (PostgreSQL; SQLite
        # serialises writers anyway), so the superseding below never races.
        audit = AuditRun.objects.select_for_update().only("pk").filter(pk=audit_id).first()
        if audit is None:
            raise AuditRun.DoesNotExist(audit_id)
        if (
            annotation_id is not None
            and not Annotation.objects.filter(pk=annotation_id, audit_id=audit.pk).exists()
        ):
            raise ReviewError(f"annotation {annotation_id} is not part of audit {audit.pk}")
        Review.objects.filter(
            audit_id=audit.pk, annotation_id=annotation_id, is_current=True
        ).update(is_current=False)
        now = timezone.now()
        review = Review.objects.create(
            audit_id=audit.pk,
            annotation_id=annotation_id,
            verdict=verdict,
            comment=comment,
            reviewer=user,
            api_key=api_key,
            reviewer_name=reviewer_name(user, api_key),
            created_at=now,
        )
        AuditRun.objects.filter(pk=audit.pk).update(
            reviewed_at=now, claimed_by=None, claimed_until=None
        )
        transaction.on_commit(
            lambda: publish({"type": "audit_reviewed", "audit_id": str(audit.pk)})
        )
    return review


def reviewer_name(user=None, api_key=None) -> str:
    if user is not None and user.is_authenticated:
        return user.get_username()
    if api_key is not None:
        return f"API key {api_key.name}"
    return ""


def current_verdicts(audit_id: Any) -> dict[int | None, Review]:
    """The current verdict per target of one audit: `None` is the whole audit."""
    return {r.annotation_id: r for r in Review.objects.filter(audit_id=audit_id, is_current=True)}


def review_to_dict(review: Review) -> dict[str, Any]:
    return {
        "id": review.pk,
        "annotation_id": review.annotation_id,
        "verdict": review.verdict,
        "comment": review.comment,
        "reviewer": review.reviewer_name,
        "created_at": review.created_at.isoformat(),
        "current": review.is_current,
    }
