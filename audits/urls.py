"""Dashboard pages, mounted at the site root by auditor_site.urls."""

from __future__ import annotations

from django.urls import path

from audits.dashboard import candidates, views
from audits.live import views as live_views
from audits.review import queue_views, verdict_views

app_name = "audits"

urlpatterns = [
    path("", views.audit_list, name="list"),
    path("audits/view/", views.audit_view_choice, name="view_choice"),
    path("audits/<uuid:pk>/", views.audit_detail, name="detail"),
    path("audits/<uuid:pk>.json", views.audit_json, name="json"),
    path("audits/<uuid:pk>/rerun/", views.audit_rerun, name="rerun"),
    path("audits/<uuid:pk>/reviews/", verdict_views.record_verdict, name="review"),
    path("trends/", views.trends, name="trends"),
    path("tuning/", views.tuning, name="tuning"),
    path("tuning/resurfacing/", views.tuning_status, name="tuning_status"),
    path("candidates/", candidates.candidate_list, name="candidates"),
    path("candidates/draft/", candidates.candidate_draft, name="candidate_draft"),
    path("candidates/<int:pk>/", candidates.candidate_detail, name="candidate"),
    path(
        "candidates/<int:pk>/audits/<uuid:audit_id>/",
        candidates.candidate_audit,
        name="candidate_audit",
    ),
    path("candidates/<int:pk>/replay/", candidates.candidate_replay, name="candidate_replay"),
    path("candidates/<int:pk>/promote/", candidates.candidate_promote, name="candidate_promote"),
    path("candidates/<int:pk>/discard/", candidates.candidate_discard, name="candidate_discard"),
    path("live/", live_views.live, name="live"),
    path("review/", queue_views.queue, name="queue"),
    path("review/<uuid:pk>/verdict/", queue_views.verdict, name="queue_verdict"),
    path("review/<uuid:pk>/skip/", queue_views.skip, name="queue_skip"),
]
