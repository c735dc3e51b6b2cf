"""Recording a verdict from the dashboard (detail page, audit cards on the list and Live).

The form is `audits/list.html#verdict`; htmx swaps it for the re-rendered form and the
`verdict-recorded` event lets the detail page refresh its review history.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from audits.models import Annotation, AuditRun
from audits.permissions import staff_required
from audits.store.verdicts import ReviewError, record_review


def verdict_context(audit: AuditRun, current, target: Annotation | None = None) -> dict[str, Any]:
    """What `audits/list.html#verdict` needs for one target (`target` None: the audit)."""
    return {"audit": audit, "current": current, "target": target}


def _annotation_id(raw: str | None) -> int | None:
    if raw in (None, ""):
        return None
    if not (raw.isascii() and raw.isdigit()):  # isdigit() alone passes "²", which int() refuses
        raise ReviewError("annotation_id must be a number")
    return int(raw)


@require_POST
@staff_required
def record_verdict(request: HttpRequest, pk: Any) -> HttpResponse:
    if not request.user.has_perm("audits.add_review"):
        raise PermissionDenied("You may not record verdicts.")
    try:
        annotation_id = _annotation_id(request.POST.get("annotation_id"))
        review = record_review(
            audit_id=pk,
            verdict=request.POST.get("verdict", ""),
            annotation_id=annotation_id,
            comment=request.POST.get("comment", ""),
            user=request.user,
        )
    except AuditRun.DoesNotExist:
        raise Http404("No such audit.") from None
    except ReviewError as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain; charset=utf-8")
    if not request.htmx:
        return redirect(reverse("audits:detail", args=[pk]))
    context = verdict_context(review.audit, review, review.annotation)
    response = render(request, "audits/list.html#verdict", context)
    response["HX-Trigger"] = "verdict-recorded"
    return response
