"""The dashboard pages (staff only). Each page is one template whose sections are named
partials; an htmx request gets just the partial it asks for (django-htmx example style)."""

from __future__ import annotations

from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from . import dashboard, quality
from .highlight import highlight_segments, side_by_side
from .models import AuditRun
from .serializers import audit_queryset, audit_to_dict

TREND_WINDOWS = (7, 14, 30, 60, 90)
DEFAULT_TREND_DAYS = 60


def staff_required(view):
    """Anonymous users go to the login page; signed-in non-staff users get a 403."""

    @wraps(view)
    @login_required
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("The dashboard is for staff accounts.")
        return view(request, *args, **kwargs)

    return wrapper


def _is_partial(request: HttpRequest) -> bool:
    """An htmx request for a fragment (not a history restore, which needs the page)."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.history_restore_request


# --- audits list --------------------------------------------------------------------------


@require_GET
@staff_required
def audit_list(request: HttpRequest) -> HttpResponse:
    filters = dashboard.ListFilters.from_query(request.GET)
    cursor = request.GET.get("cursor") or None
    page = dashboard.audit_page(filters, cursor)
    context = {
        "nav": "audits",
        "filters": filters,
        "params": filters.as_params(),
        "page": page,
        "is_more": bool(cursor),
        "choices": dashboard.filter_choices(filters),
        "severities": dashboard.SEVERITIES,
        "statuses": AuditRun.Status.values,
    }
    if _is_partial(request):
        # "Load more" appends the next rows; a filter change replaces the whole result list.
        if cursor:
            return render(request, "audits/list.html#rows", context)
        response = render(request, "audits/list.html#results", context)
        # The clean, bookmarkable URL of this view (no empty parameters, no cursor).
        query = urlencode(filters.as_params())
        response["HX-Push-Url"] = reverse("audits:list") + (f"?{query}" if query else "")
        return response
    return render(request, "audits/list.html", context)


# --- audit detail -------------------------------------------------------------------------


def _get_audit(pk: Any) -> AuditRun:
    try:
        return dashboard.detail_queryset().get(pk=pk)
    except AuditRun.DoesNotExist:
        raise Http404("No such audit.") from None


def detail_context(run: AuditRun, request: HttpRequest | None = None) -> dict[str, Any]:
    """What `audits/detail.html` and its partials need (also for live updates)."""
    results = list(run.results.all())
    surfaced = sorted((r for r in results if r.surfaced), key=lambda r: -r.score)
    others = [r for r in results if not r.surfaced]
    # One page of findings (`?page=`), so a response with 27,000 of them stays a page.
    rows = dashboard.detail_rows(run, results, _page_number(request))
    annotations = [(f"ann-{a.pk}", a) for a in rows.annotations]
    reviews = list(run.reviews.all())
    current = {r.annotation_id: r for r in reviews if r.is_current}
    labels = dashboard.review_target_labels(reviews)
    for _, a in annotations:
        a.current_review = current.get(a.pk)
    for review in reviews:
        review.target_label = labels.get(review.annotation_id, "a finding")
    can_rerun = bool(
        request is not None and request.user.has_perm("audits.add_auditrun")
    )
    return {
        "audit": run,
        "results": results,
        "surfaced_results": surfaced,
        "other_results": others,
        "highlights": highlight_segments(run.response, annotations),
        "highlight_count": sum(1 for _, a in annotations if a.evidence or a.start is not None),
        "diff": side_by_side(run.response, run.cleaned_response)
        if run.status == AuditRun.Status.COMPLETE
        else None,
        "links": rows.links,
        "links_total": rows.links_total,
        "trace_lines": rows.trace_lines,
        "trace_total": rows.trace_total,
        "findings_page": rows,
        "can_rerun": can_rerun,
        "reviews": reviews,
        "audit_verdict": current.get(None),
        # The live parts while it runs (audits/live.html#connector, #stream).
        **_stream_context(run),
    }


def _page_number(request: HttpRequest | None) -> int:
    value = request.GET.get("page", "") if request is not None and hasattr(request, "GET") else ""
    return int(value) if value.isdigit() and 0 < len(value) < 7 else 1


def _stream_context(run: AuditRun) -> dict[str, Any]:
    from .stream_render import stream_context

    return {k: v for k, v in stream_context(run).items() if k != "audit"}


@require_GET
@staff_required
def audit_detail(request: HttpRequest, pk: Any) -> HttpResponse:
    run = _get_audit(pk)
    context = {"nav": "audits", **detail_context(run, request)}
    section = request.GET.get("section", "")
    if _is_partial(request) and section in DETAIL_SECTIONS:
        return render(request, f"audits/detail.html#{section}", context)
    return render(request, "audits/detail.html", context)


DETAIL_SECTIONS = frozenset(
    {"header", "results", "reviews", "response", "diff", "links", "trace"}
)


@require_GET
@staff_required
def audit_json(request: HttpRequest, pk: Any) -> HttpResponse:
    try:
        run = audit_queryset().get(pk=pk)
    except AuditRun.DoesNotExist:
        raise Http404("No such audit.") from None
    response = JsonResponse(audit_to_dict(run), json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="audit-{run.pk}.json"'
    return response


@require_POST
@staff_required
def audit_rerun(request: HttpRequest, pk: Any) -> HttpResponse:
    if not request.user.has_perm("audits.add_auditrun"):
        raise PermissionDenied("You may not re-run audits.")
    try:
        original = AuditRun.objects.get(pk=pk)
    except AuditRun.DoesNotExist:
        raise Http404("No such audit.") from None
    from .services import rerun_audit

    new = rerun_audit(original)
    messages.success(request, "Re-run started with the current configuration.")
    url = reverse("audits:detail", args=[new.pk])
    if request.htmx:
        return HttpResponseClientRedirect(url)
    return redirect(url)


# --- trends -------------------------------------------------------------------------------


@require_GET
@staff_required
def trends(request: HttpRequest) -> HttpResponse:
    try:
        days = int(request.GET.get("days", DEFAULT_TREND_DAYS))
    except ValueError:
        days = DEFAULT_TREND_DAYS
    if days not in TREND_WINDOWS:
        days = DEFAULT_TREND_DAYS
    data = dashboard.trends(days)
    measured = quality.trends_quality(days)
    context = {
        "nav": "trends",
        "data": data,
        "quality": measured,
        "windows": TREND_WINDOWS,
        "chart_data": {
            "threshold": data["threshold"],
            "per_day": data["per_day"],
            "histogram": data["histogram"],
            "top_types": data["top_types"],
            "analyzers": data["analyzers"],
            "quality": measured["chart"],
        },
    }
    if _is_partial(request):
        return render(request, "audits/trends.html#trends-body", context)
    return render(request, "audits/trends.html", context)


# --- threshold tuning ---------------------------------------------------------------------


def _threshold_param(value: str | None, default: float) -> float:
    try:
        number = float(value) if value not in (None, "") else default
    except ValueError:
        return default
    if number != number:  # NaN
        return default
    return round(min(1.0, max(0.0, number)), 2)


def _with_threshold(config, analyzer: str, value: float):
    """`config` with the global threshold, or one analyzer's own, set to `value`."""
    if not analyzer:
        return config.model_copy(update={"threshold": value})
    analyzers = dict(config.analyzers)
    analyzers[analyzer] = {**analyzers.get(analyzer, {}), "threshold": value}
    return config.model_copy(update={"analyzers": analyzers})


@require_http_methods(["GET", "POST"])
@staff_required
def tuning(request: HttpRequest) -> HttpResponse:
    from analyzers.config_store import load_config, save_config

    config = load_config()
    can_save = request.user.has_perm("analyzers.change_globalsettings")
    params = request.POST if request.method == "POST" else request.GET
    # With an analyzer chosen, the slider is that analyzer's own threshold.
    analyzer = params.get("analyzer", "").strip()[:100]
    current = config.threshold_for(analyzer) if analyzer else config.threshold
    if request.method == "POST":
        if not can_save:
            raise PermissionDenied("You may not change the configuration.")
        new = _threshold_param(request.POST.get("threshold"), current)
        scope = f"The {analyzer} threshold" if analyzer else "Threshold"
        if new != current:
            save_config(
                _with_threshold(config, analyzer, new),
                actor=request.user.get_username(),
                source="dashboard",
                user=request.user,
            )
            messages.success(request, f"{scope} saved: {new:.2f} (was {current:.2f}).")
        else:
            messages.info(request, f"{scope} is already {new:.2f}; nothing changed.")
        url = reverse("audits:tuning")
        return redirect(f"{url}?{urlencode({'analyzer': analyzer})}" if analyzer else url)

    threshold = _threshold_param(request.GET.get("threshold"), current)
    try:
        window = int(request.GET.get("window", dashboard.DEFAULT_WINDOW))
    except ValueError:
        window = dashboard.DEFAULT_WINDOW
    if window not in dashboard.WINDOWS:
        window = dashboard.DEFAULT_WINDOW
    preview = dashboard.tuning_preview(
        threshold=threshold,
        current=current,
        analyzer=analyzer,
        window=window,
        own_thresholds={
            a: float(section["threshold"])
            for a, section in config.analyzers.items()
            if section.get("threshold") is not None
        },
        global_threshold=config.threshold,
    )
    evidence = quality.threshold_evidence(
        threshold=threshold, analyzer=analyzer, config=config, bins=dashboard.HISTOGRAM_BINS,
        cache=True,
    )
    context = {
        "nav": "tuning",
        "preview": preview,
        "evidence": evidence,
        "evidence_chart": evidence.chart(),
        "current": current,
        "can_save": can_save,
        "analyzers": sorted(set(dashboard.KNOWN_ANALYZERS) | set(config.analyzers)),
        "windows": dashboard.WINDOWS,
        "chart": {
            "labels": dashboard.bin_labels(),
            "counts": preview.histogram,
            "threshold": threshold,
            "current": current,
        },
    }
    if _is_partial(request):
        return render(request, "audits/tuning.html#preview", context)
    return render(request, "audits/tuning.html", context)


# --- live feed ----------------------------------------------------------------------------


@require_GET
@staff_required
def live(request: HttpRequest) -> HttpResponse:
    """New audits as they arrive (WebSocket /ws/audits/, audits.consumers)."""
    from django.utils import timezone

    from .stream_render import LIVE_ROWS, counters

    filters = dashboard.ListFilters.from_query(request.GET)
    cursor = timezone.now()  # before the reads: whatever commits later is caught up
    page = dashboard.audit_page(filters, None, size=LIVE_ROWS)
    query = urlencode(filters.as_params())
    context = {
        "nav": "live",
        "filters": filters,
        "cards": page.audits,
        "counters": counters(),
        "cursor": cursor.isoformat(),
        "ws_url": "/ws/audits/" + (f"?{query}" if query else ""),
        "cap": LIVE_ROWS,
        "choices": dashboard.filter_choices(filters),
        "severities": dashboard.SEVERITIES,
    }
    return render(request, "audits/live.html", context)
