"""The review queue page: one claimed audit at a time, a verdict, then the next.

GET /review/ claims the next audit (audits.review.queue) and shows it; a verdict or a skip is
a POST that answers with the next audit's panel (htmx) or redirects back (no JavaScript).
Skipped audits are remembered in the session so the next claim is a different one.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from audits.cards.highlight import highlight_segments
from audits.models import AuditRun, Review
from audits.permissions import staff_required
from audits.review import queue as review_queue  # `queue` is the page's view below
from audits.store import scoring
from audits.store.verdicts import ReviewError, record_review
from audits.surfacing import policies

SKIPPED_KEY = "review_queue_skipped"
ORDER_KEY = "review_queue_order"
MAX_SKIPPED = 500
VERDICTS = [
    # (value, label, key, button class)
    (Review.Verdict.CONFIRMED, "Confirm", "c", "primary"),
    (Review.Verdict.FALSE_POSITIVE, "False positive", "f", ""),
    (Review.Verdict.UNSURE, "Unsure", "u", ""),
]


def _skipped(request: HttpRequest) -> list[str]:
    value = request.session.get(SKIPPED_KEY, [])
    return [str(v) for v in value] if isinstance(value, list) else []


def _order(request: HttpRequest) -> str:
    """The order asked for in the request, else the one this session used last."""
    asked = request.GET.get("order") or request.POST.get("order")
    if asked in review_queue.ORDERS:
        return asked
    return review_queue.normalize_order(request.session.get(ORDER_KEY))


def _audit_context(run: AuditRun) -> dict[str, Any]:
    results = [r for r in run.results.all() if r.surfaced]
    results.sort(key=lambda r: -r.score)
    annotations = [(f"ann-{a.pk}", a) for r in results for a in r.annotations.all()]
    severities = {a.severity for _, a in annotations}
    return {
        "audit": run,
        "headline": scoring.headline(
            run, results, severities, policies.applied_thresholds(run).for_analyzer
        ),
        "surfaced_results": results,
        "highlights": highlight_segments(run.response, annotations),
    }


def queue_context(request: HttpRequest, order: str) -> dict[str, Any]:
    """Claim the next audit for this user and gather what the panel shows."""
    skipped = _skipped(request)
    can_review = request.user.has_perm("audits.add_review")
    if can_review:
        run = review_queue.claim_next(request.user, order, skipped)
    else:
        # Who may only look claims nothing: a claim would hide the audit from reviewers.
        run = review_queue.candidates(request.user, order, skipped).first()
    context: dict[str, Any] = {
        "nav": "review",
        "order": order,
        "orders": [("oldest", "Oldest first"), ("score", "Highest score first")],
        "verdicts": VERDICTS,
        "skipped_count": len(skipped),
        "can_review": can_review,
        "audit": None,
        "claim_minutes": int(review_queue.CLAIM_TTL.total_seconds() // 60),
    }
    if run is not None:
        run = AuditRun.objects.prefetch_related("results__annotations").get(pk=run.pk)
        context.update(_audit_context(run))
    context["progress"] = review_queue.progress(request.user)
    return context


def _panel(request: HttpRequest, order: str) -> HttpResponse:
    return render(request, "audits/queue.html#panel", queue_context(request, order))


def _back(request: HttpRequest, order: str) -> HttpResponse:
    """After a POST: the next panel for htmx, else a redirect to the page (PRG)."""
    if request.htmx:
        return _panel(request, order)
    return redirect(f"{reverse('audits:queue')}?{urlencode({'order': order})}")


@require_GET
@staff_required
def queue(request: HttpRequest) -> HttpResponse:
    order = _order(request)
    if request.session.get(ORDER_KEY) != order:
        # A new order: the audit held under the old one goes back, the next comes by the new.
        review_queue.release(request.user)
        request.session[ORDER_KEY] = order
    if request.GET.get("restart"):
        request.session[SKIPPED_KEY] = []
    context = queue_context(request, order)
    return render(request, "audits/queue.html", context)


def _get_run(pk: Any) -> AuditRun:
    try:
        return AuditRun.objects.only("pk").get(pk=pk)
    except AuditRun.DoesNotExist:
        raise Http404("No such audit.") from None


@require_POST
@staff_required
def verdict(request: HttpRequest, pk: Any) -> HttpResponse:
    if not request.user.has_perm("audits.add_review"):
        raise PermissionDenied("You may not record verdicts.")
    run = _get_run(pk)
    order = _order(request)
    try:
        record_review(
            audit_id=run.pk,
            verdict=request.POST.get("verdict", ""),
            comment=request.POST.get("comment", ""),
            user=request.user,
        )
    except ReviewError as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain; charset=utf-8")
    except AuditRun.DoesNotExist:
        raise Http404("No such audit.") from None
    return _back(request, order)


@require_POST
@staff_required
def skip(request: HttpRequest, pk: Any) -> HttpResponse:
    run = _get_run(pk)
    order = _order(request)
    review_queue.release(request.user, run.pk)
    skipped = [s for s in _skipped(request) if s != str(run.pk)]
    skipped.append(str(run.pk))
    request.session[SKIPPED_KEY] = skipped[-MAX_SKIPPED:]
    return _back(request, order)
