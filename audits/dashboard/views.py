"""The dashboard pages (staff only). Each page is one template whose sections are named
partials; an htmx request gets just the partial it asks for (django-htmx example style)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    JsonResponse,
    QueryDict,
)
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from analyzers.config_store import current_registry, load_config, save_config
from audits.cards import cards
from audits.cards.detail import detail_context
from audits.dashboard import audit_table, preferences, quality, queries
from audits.intake.submit import rerun_audit
from audits.models import AuditRun
from audits.permissions import staff_required
from audits.store import ordering
from audits.store.serializers import audit_queryset, audit_to_dict
from audits.surfacing import jobs, policies

TREND_WINDOWS = (7, 14, 30, 60, 90)
DEFAULT_TREND_DAYS = 60


def _is_partial(request: HttpRequest) -> bool:
    """An htmx request for a fragment (not a history restore, which needs the page)."""
    htmx = getattr(request, "htmx", None)
    return htmx is not None and bool(htmx) and not htmx.history_restore_request


# --- audits list --------------------------------------------------------------------------


@require_GET
@staff_required
def audit_list(request: HttpRequest) -> HttpResponse:
    filters = cards.ListFilters.from_query(request.GET)
    cursor = request.GET.get("cursor") or None
    view = preferences.audit_view(request.user)
    table = view == preferences.AuditView.TABLE
    page = cards.audit_page(filters, cursor, cards.TABLE_PAGE_SIZE if table else cards.PAGE_SIZE)
    context = {
        "nav": "audits",
        "filters": filters,
        "params": filters.as_params(),
        "page": page,
        "is_more": bool(cursor),
        "choices": cards.filter_choices(filters),
        "severities": cards.SEVERITIES,
        "statuses": AuditRun.Status.values,
        "sorts": ordering.SORT_LABELS,
        "view": view,
        "sort_headers": audit_table.sort_headers(filters) if table else None,
    }
    if _is_partial(request):
        # "Load more" appends the next rows; a filter change replaces the whole result list.
        if cursor:
            rows = "audits/audit_table.html#table-rows" if table else "audits/list.html#rows"
            return render(request, rows, context)
        response = render(request, "audits/list.html#results", context)
        # The clean, bookmarkable URL of this view (no empty parameters, no cursor).
        response["HX-Push-Url"] = audit_table.list_url(filters.as_params())
        return response
    return render(request, "audits/list.html", context)


@require_POST
@staff_required
def audit_view_choice(request: HttpRequest) -> HttpResponse:
    """Switch the list between cards and table for this user; back to the same filters."""
    try:
        preferences.set_audit_view(request.user, request.POST.get("view", ""))
    except ValueError as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain; charset=utf-8")
    # Only known list parameters go back into the URL (no open redirect, no junk).
    filters = cards.ListFilters.from_query(QueryDict(request.POST.get("query", "")[:4000]))
    return redirect(audit_table.list_url(filters.as_params()))


# --- audit detail -------------------------------------------------------------------------


def _get_audit(pk: Any) -> AuditRun:
    try:
        return cards.detail_queryset().get(pk=pk)
    except AuditRun.DoesNotExist:
        raise Http404("No such audit.") from None


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
    {"header", "results", "review_history", "response", "diff", "links", "trace"}
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
    data = queries.trends(days)
    measured = quality.trends_quality(days)
    context = {
        "nav": "trends",
        "data": data,
        "quality": measured,
        "windows": TREND_WINDOWS,
        "chart_data": {
            "threshold": data["threshold"],
            "own_thresholds": data["own_thresholds"],
            "per_day": queries.activity_series(data),
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
        window = int(request.GET.get("window", queries.DEFAULT_WINDOW))
    except ValueError:
        window = queries.DEFAULT_WINDOW
    if window not in queries.WINDOWS:
        window = queries.DEFAULT_WINDOW
    preview = queries.tuning_preview(
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
        threshold=threshold,
        analyzer=analyzer,
        config=config,
        bins=queries.HISTOGRAM_BINS,
        cache=True,
    )
    context = {
        "nav": "tuning",
        "preview": preview,
        "evidence": evidence,
        "evidence_chart": evidence.chart(),
        "current": current,
        "can_save": can_save,
        "analyzers": sorted(set(current_registry().ids()) | set(config.analyzers)),
        "windows": queries.WINDOWS,
        "retention_days": config.retention_days,
        "privacy": config.privacy,
        "chart": {
            "labels": queries.bin_labels(),
            "counts": preview.histogram,
            "threshold": threshold,
            "current": current,
        },
    }
    if _is_partial(request):
        return render(request, "audits/tuning.html#preview", context)
    context.update(_resurface_context())
    return render(request, "audits/tuning.html", context)


def _resurface_context() -> dict[str, Any]:
    """The re-surfacing status: the latest job and the audits still at older thresholds."""
    policy = policies.current_policy()
    job = policies.latest_job()
    return {
        "resurface_job": job,
        "resurface_active": bool(job and job.is_active),
        "resurface_policy": policy,
        "stale": policies.staleness(policy),
    }


@require_http_methods(["GET", "POST"])
@staff_required
def tuning_status(request: HttpRequest) -> HttpResponse:
    """The tuning page's re-surfacing status (htmx polls it while a job runs); POST
    applies the saved thresholds to audits that do not follow them yet."""
    can_save = request.user.has_perm("analyzers.change_globalsettings")
    if request.method == "POST":
        if not can_save:
            raise PermissionDenied("You may not change the configuration.")
        jobs.schedule(force=True)
    context = {"can_save": can_save, **_resurface_context()}
    return render(request, "audits/tuning.html#resurface-status", context)
