"""The Candidates pages: each candidate's comparison with the active configuration, an
audit's two results side by side, replay/promote/discard, and drafting a candidate from a
finding marked false positive (allow its host, add a customer fact, raise a threshold)."""

from __future__ import annotations

import copy
import re
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from analyzers import candidates
from analyzers.config_store import ConfigError, export_config
from analyzers.models import CandidateConfig
from audits.models import AnalyzerRunRecord, Annotation, AuditRun, ShadowResult
from audits.permissions import staff_required
from audits.shadow import control
from audits.shadow.compare import compare

CONFIG_PERMISSION = "analyzers.change_globalsettings"
URL_RE = re.compile(r"(?:https?://|www\.)[^\s<>()\"'\]]+", re.IGNORECASE)
DEFAULT_REPLAY = 200


def _can_change(request: HttpRequest) -> bool:
    return request.user.has_perm(CONFIG_PERMISSION)


def _require_change(request: HttpRequest) -> None:
    if not _can_change(request):
        raise PermissionDenied("You may not change the configuration.")


def _actor(request: HttpRequest) -> str:
    return request.user.get_username()


@require_GET
@staff_required
def candidate_list(request: HttpRequest) -> HttpResponse:
    rows = []
    for candidate in CandidateConfig.objects.all()[:50]:
        counts = compare(candidate)["counts"] if candidate.status == "shadow" else None
        rows.append({"candidate": candidate, "counts": counts})
    return render(
        request,
        "audits/candidates.html",
        {
            "nav": "candidates",
            "rows": rows,
            "can_change": _can_change(request),
        },
    )


@require_GET
@staff_required
def candidate_detail(request: HttpRequest, pk: int) -> HttpResponse:
    candidate = get_object_or_404(CandidateConfig, pk=pk)
    return render(
        request,
        "audits/candidate.html",
        {
            "nav": "candidates",
            "candidate": candidate,
            "diff": compare(candidate),
            "can_change": _can_change(request),
            "replay_default": min(DEFAULT_REPLAY, settings.AUDITOR_REPLAY_MAX),
            "replay_max": settings.AUDITOR_REPLAY_MAX,
        },
    )


def _own_findings(audit: AuditRun) -> list[dict[str, Any]]:
    return [
        {
            "analyzer": a["analyzer_id"],
            **{k: a[k] for k in ("type", "severity", "label", "evidence")},
        }
        for a in Annotation.objects.filter(audit=audit)
        .order_by("result_id", "position", "id")
        .values("analyzer_id", "type", "severity", "label", "evidence")[:500]
    ]


@require_GET
@staff_required
def candidate_audit(request: HttpRequest, pk: int, audit_id) -> HttpResponse:
    """One audit's own results and the candidate's, side by side."""
    candidate = get_object_or_404(CandidateConfig, pk=pk)
    audit = get_object_or_404(AuditRun, pk=audit_id)
    shadow = ShadowResult.objects.filter(candidate=candidate, audit=audit).first()
    if shadow is None:
        raise Http404("the candidate has not analysed this audit")
    own_results = list(
        AnalyzerRunRecord.objects.filter(audit=audit)
        .order_by("position")
        .values("analyzer_id", "status", "score", "surfaced")
    )
    return render(
        request,
        "audits/candidate_audit.html",
        {
            "nav": "candidates",
            "candidate": candidate,
            "audit": audit,
            "shadow": shadow,
            "own_results": own_results,
            "own_findings": _own_findings(audit),
        },
    )


@require_POST
@staff_required
def candidate_replay(request: HttpRequest, pk: int) -> HttpResponse:
    _require_change(request)
    candidate = get_object_or_404(CandidateConfig, pk=pk)
    try:
        limit = max(
            1, min(int(request.POST.get("limit", DEFAULT_REPLAY)), settings.AUDITOR_REPLAY_MAX)
        )
    except ValueError:
        limit = DEFAULT_REPLAY
    try:
        control.start_replay(candidate, limit=limit, judged=request.POST.get("judged") == "on")
        messages.success(request, f"Replaying the latest {limit} audits with “{candidate.name}”.")
    except (control.ReplayBusy, candidates.CandidateClosed) as exc:
        messages.error(request, str(exc))
    return redirect("audits:candidate", pk=pk)


@require_POST
@staff_required
def candidate_promote(request: HttpRequest, pk: int) -> HttpResponse:
    _require_change(request)
    candidate = get_object_or_404(CandidateConfig, pk=pk)
    try:
        control.promote_on_evidence(
            candidate,
            actor=_actor(request),
            user=request.user,
            force=request.POST.get("force") == "on",
            reason=request.POST.get("reason", "")[:2000],
        )
        messages.success(request, f"“{candidate.name}” is now the configuration.")
    except control.WouldLoseConfirmed as exc:
        messages.error(request, f"Not promoted: {exc}. Promote anyway with a reason to override.")
    except (candidates.CandidateClosed, control.ReasonRequired) as exc:
        messages.error(request, f"Not promoted: {exc}.")
    return redirect("audits:candidate", pk=pk)


@require_POST
@staff_required
def candidate_discard(request: HttpRequest, pk: int) -> HttpResponse:
    _require_change(request)
    try:
        candidates.discard(get_object_or_404(CandidateConfig, pk=pk))
    except candidates.CandidateClosed as exc:
        messages.error(request, str(exc))
    return redirect("audits:candidate", pk=pk)


# --- drafting a candidate from a false positive ----------------------------------------------


def hosts_in(text: str) -> list[str]:
    """The hosts of the URLs in `text`, in order, once each."""
    hosts: list[str] = []
    for match in URL_RE.findall(text or ""):
        url = match if "://" in match else f"https://{match}"
        try:
            host = (urlsplit(url).hostname or "").rstrip(".")
        except ValueError:
            continue
        if host and host not in hosts:
            hosts.append(host)
    return hosts


def draft_options(annotation: Annotation, config: dict[str, Any]) -> dict[str, Any]:
    """What would keep this finding from being flagged, pre-filled from it."""
    result = annotation.result
    text = " ".join(filter(None, [annotation.evidence, annotation.label, annotation.description]))
    customers = config.get("known_customers") or []
    lowered = text.lower()
    named = next(
        (
            c["slug"]
            for c in customers
            if any(n.lower() in lowered for n in [c["name"], *c.get("aliases", [])] if n)
        ),
        "",
    )
    current = config.get("analyzers", {}).get(result.analyzer_id, {}).get(
        "threshold"
    ) or config.get("threshold", 0.3)
    return {
        "hosts": [h for h in hosts_in(text) if h not in config.get("allowed_hosts", [])],
        "customers": customers,
        "customer": named or (customers[0]["slug"] if customers else ""),
        "fact": (annotation.evidence or "").strip()[:500],
        "analyzer": result.analyzer_id,
        "score": result.score,
        "current_threshold": current,
        "threshold": min(1.0, round(result.score + 0.01, 2)),
    }


def drafted_config(config: dict[str, Any], post: Any) -> tuple[dict[str, Any], str]:
    """The active configuration with the chosen change, and a name for it."""
    data = copy.deepcopy(config)
    kind = post.get("kind", "")
    if kind.startswith("host:"):
        host = kind.removeprefix("host:").strip().lower()
        if not host:
            raise ConfigError({"host": ["choose a host"]})
        data["allowed_hosts"] = [*data.get("allowed_hosts", []), host]
        return data, f"Allow {host}"
    if kind == "fact":
        slug, fact = post.get("customer", ""), post.get("fact", "").strip()
        customer = next((c for c in data.get("known_customers", []) if c["slug"] == slug), None)
        if customer is None or not fact:
            raise ConfigError({"fact": ["choose a known customer and write the fact"]})
        customer["facts"] = [*customer.get("facts", []), fact]
        return data, f"Fact for {customer['name']}"
    if kind == "threshold":
        analyzer = post.get("analyzer", "")
        try:
            value = float(post.get("threshold", ""))
        except ValueError:
            raise ConfigError({"threshold": ["a number from 0 to 1"]}) from None
        section = data.setdefault("analyzers", {}).setdefault(analyzer, {})
        section["threshold"] = value
        return data, f"{analyzer} threshold {value:.2f}"
    raise ConfigError({"kind": ["choose what to change"]})


@require_http_methods(["GET", "POST"])
@staff_required
def candidate_draft(request: HttpRequest) -> HttpResponse:
    params = request.POST if request.method == "POST" else request.GET
    annotation = (
        Annotation.objects.select_related("result", "audit")
        .filter(
            pk=params.get("annotation") if str(params.get("annotation", "")).isdigit() else None
        )
        .first()
    )
    if annotation is None:
        raise Http404("no such finding")
    config = export_config()
    options = draft_options(annotation, config)
    if request.method == "POST":
        _require_change(request)
        try:
            data, name = drafted_config(config, request.POST)
            candidate = candidates.create_candidate(
                name=request.POST.get("name", "").strip() or name,
                config=data,
                actor=_actor(request),
            )
        except ConfigError as exc:
            messages.error(request, f"Not drafted: {exc}")
        except candidates.CandidateLimit as exc:
            messages.error(request, f"Not drafted: {exc}")
        else:
            messages.success(
                request,
                f"Candidate “{candidate.name}” is in shadow. "
                "Replay recent audits to see what it changes.",
            )
            return redirect(reverse("audits:candidate", args=[candidate.pk]))
    return render(
        request,
        "audits/candidate_draft.html",
        {
            "nav": "candidates",
            "annotation": annotation,
            "options": options,
            "can_change": _can_change(request),
        },
    )
