"""Audit runs, read-only, with results, annotations, trace and links inline; re-run action."""

from __future__ import annotations

from django.contrib import admin

from . import services
from .models import AnalyzerRunRecord, Annotation, AuditRun, LinkCheck, TraceLine


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ResultInline(ReadOnlyInline):
    model = AnalyzerRunRecord
    fields = ["analyzer_id", "category", "status", "score", "surfaced", "duration_ms", "error"]
    readonly_fields = fields


class AnnotationInline(ReadOnlyInline):
    model = Annotation
    fields = ["analyzer_id", "type", "severity", "label", "evidence", "start", "end"]
    readonly_fields = fields


class TraceLineInline(ReadOnlyInline):
    model = TraceLine
    fields = ["position", "text"]
    readonly_fields = fields


class LinkCheckInline(ReadOnlyInline):
    model = LinkCheck
    fields = ["url", "label", "decision", "reason", "http_status", "healthy"]
    readonly_fields = fields


@admin.register(AuditRun)
class AuditRunAdmin(admin.ModelAdmin):
    list_display = ["id", "created_at", "status", "overall_score", "has_card", "external_id",
                    "api_key"]
    list_filter = ["status", "has_card", "incomplete"]
    search_fields = ["id", "external_id", "user_input"]
    date_hierarchy = "created_at"
    list_select_related = ["api_key"]
    inlines = [ResultInline, AnnotationInline, TraceLineInline, LinkCheckInline]
    actions = ["rerun"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        # Viewing is allowed (view permission); nothing can be edited.
        return False

    @admin.action(description="Re-run the selected audits with the current configuration")
    def rerun(self, request, queryset):
        count = 0
        for run in queryset:
            services.rerun_audit(run)
            count += 1
        self.message_user(request, f"Queued {count} new run(s), linked to the originals.")
