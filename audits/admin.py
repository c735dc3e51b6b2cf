"""Audit runs, read-only, with results, annotations, trace, links and verdicts inline; re-run
action; verdicts; alert rules and their deliveries."""

from __future__ import annotations

from types import MethodType

from django.contrib import admin
from django.db.models import FloatField, OuterRef, Subquery
from django.utils.html import format_html, format_html_join

from audits.intake import submit
from audits.models import (
    AlertDelivery,
    AlertRule,
    AnalyzerRunRecord,
    Annotation,
    AuditLinks,
    AuditRun,
    DeletionLog,
    Review,
    TraceLine,
)
from audits.review import alert_rules, alert_tasks
from audits.store import erasure
from audits.store.link_rows import stored_links

FLOAT_DIGITS = 3  # scores and durations as people read them (0.05, not 0.049999999999999996)


def _rounded(name: str, label: str):
    @admin.display(description=label, ordering=name)
    def show(self, obj):
        value = getattr(obj, name)
        return None if value is None else round(value, FLOAT_DIGITS)

    return show


class RoundedFloats:
    """Float columns are shown rounded, in lists, change views and inlines: each float
    field `x` is displayed by an `x_rounded` callable of this admin."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for f in self.model._meta.fields:
            if isinstance(f, FloatField) and not hasattr(self, f"{f.name}_rounded"):
                setattr(
                    self, f"{f.name}_rounded", MethodType(_rounded(f.name, f.verbose_name), self)
                )

    def _with_rounded(self, names):
        floats = {f.name for f in self.model._meta.fields if isinstance(f, FloatField)}
        swapped = [f"{n}_rounded" if isinstance(n, str) and n in floats else n for n in names]
        return list(dict.fromkeys(swapped))  # once each, in order

    def get_fields(self, request, obj=None):
        return self._with_rounded(super().get_fields(request, obj))

    def get_readonly_fields(self, request, obj=None):
        return self._with_rounded(super().get_readonly_fields(request, obj))


class ReadOnlyAdmin(RoundedFloats, admin.ModelAdmin):
    """Records of what happened: viewable (view permission), never added or edited here."""

    def get_readonly_fields(self, request, obj=None):
        return self._with_rounded([f.name for f in self.model._meta.fields])

    def get_list_display(self, request):
        return self._with_rounded(super().get_list_display(request))

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ReadOnlyInline(RoundedFloats, admin.TabularInline):
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


class LinkTableInline(ReadOnlyInline):
    model = AuditLinks
    fields = ["table"]
    readonly_fields = fields
    verbose_name_plural = "links"

    @admin.display(description="URL · label · decision · reason · HTTP status · healthy")
    def table(self, obj: AuditLinks) -> str:
        rows = format_html_join(
            "",
            "<tr>{}</tr>",
            (
                (format_html_join("", "<td>{}</td>", ((value,) for value in link)),)
                for link in stored_links(obj.rows)
            ),
        )
        return format_html("<table>{}</table>", rows)


class ReviewInline(ReadOnlyInline):
    model = Review
    fields = ["created_at", "verdict", "annotation", "reviewer_name", "comment", "is_current"]
    readonly_fields = fields


@admin.register(Review)
class ReviewAdmin(ReadOnlyAdmin):
    """Every verdict ever recorded (read-only: verdicts are recorded on the dashboard or API)."""

    list_display = ["created_at", "verdict", "audit", "annotation", "reviewer_name", "is_current"]
    list_filter = ["verdict", "is_current", "annotation__analyzer_id", "annotation__type"]
    search_fields = ["audit__id", "reviewer_name", "comment"]
    date_hierarchy = "created_at"
    list_select_related = ["audit", "annotation"]
    raw_id_fields = ["audit", "annotation"]


@admin.register(AuditRun)
class AuditRunAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "status",
        "overall_score",
        "has_card",
        "external_id",
        "api_key",
    ]
    list_filter = ["status", "has_card", "incomplete", ("reviewed_at", admin.EmptyFieldListFilter)]
    search_fields = ["id", "external_id", "user_input"]
    date_hierarchy = "created_at"
    list_select_related = ["api_key"]
    inlines = [ResultInline, AnnotationInline, TraceLineInline, LinkTableInline, ReviewInline]
    actions = ["rerun"]

    def has_rerun_permission(self, request):
        """A re-run adds an audit run: the permission the dashboard's re-run button needs."""
        return request.user.has_perm("audits.add_auditrun")

    @admin.action(
        description="Re-run the selected audits with the current configuration",
        permissions=["rerun"],
    )
    def rerun(self, request, queryset):
        count = 0
        for run in queryset:
            submit.rerun_audit(run)
            count += 1
        self.message_user(request, f"Queued {count} new run(s), linked to the originals.")

    # Deleting here (the change page's Delete, the "Delete selected" action after its
    # confirmation page) is an erasure: every derived row, secure delete, logged.

    def delete_model(self, request, obj):
        self.delete_queryset(request, AuditRun.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        ids = [str(pk) for pk in queryset.values_list("pk", flat=True)]
        erasure.erase(
            erasure.filtered(ids=ids),
            actor=f"admin:{request.user.get_username()}",
            source="admin",
            filter={"ids": ids[:100], "selected": len(ids)},
        )


@admin.register(DeletionLog)
class DeletionLogAdmin(ReadOnlyAdmin):
    """Every erasure: who, when, the filter, the count (never the audits' content)."""

    list_display = ["created_at", "source", "actor", "count"]
    list_filter = ["source"]
    date_hierarchy = "created_at"

    def has_delete_permission(self, request, obj=None):
        return False


# --- alerts -----------------------------------------------------------------------------


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "enabled",
        "conditions",
        "webhook_host",
        "last_fired_at",
        "last_delivery",
    ]
    list_filter = ["enabled"]
    search_fields = ["name", "webhook_url"]
    readonly_fields = ["last_fired_at", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "enabled", "webhook_url"]}),
        (
            "Conditions (all that are set must hold)",
            {"fields": ["min_overall_score", "annotation_type", "min_severity", "analyzer_id"]},
        ),
        ("Rate", {"fields": ["min_count", "window_minutes"]}),
        ("History", {"fields": ["last_fired_at", "created_at", "updated_at"]}),
    ]
    actions = ["send_test_alert", "enable", "disable"]

    def get_queryset(self, request):
        latest = AlertDelivery.objects.filter(rule=OuterRef("pk")).order_by("-created_at", "-id")
        return (
            super()
            .get_queryset(request)
            .annotate(
                last_status=Subquery(latest.values("status")[:1]),
                last_attempts=Subquery(latest.values("attempts")[:1]),
            )
        )

    @admin.display(description="conditions")
    def conditions(self, obj: AlertRule) -> str:
        return obj.conditions_summary()

    @admin.display(description="webhook host")
    def webhook_host(self, obj: AlertRule) -> str:
        from urllib.parse import urlsplit

        return urlsplit(obj.webhook_url).hostname or "-"

    @admin.display(description="last delivery")
    def last_delivery(self, obj: AlertRule) -> str:
        status = getattr(obj, "last_status", None)
        if not status:
            return "-"
        return f"{status} ({obj.last_attempts} attempt(s))"

    @admin.action(
        description="Send a test alert to the selected rules' webhooks", permissions=["change"]
    )
    def send_test_alert(self, request, queryset):
        count = 0
        for rule in queryset:
            alert_tasks.send_test_alert(rule)
            count += 1
        self.message_user(
            request, f"Queued {count} test alert(s); see Alert deliveries for the outcome."
        )

    @admin.action(description="Enable the selected rules", permissions=["change"])
    def enable(self, request, queryset):
        queryset.update(enabled=True)
        alert_rules.invalidate_rules_cache()

    @admin.action(description="Disable the selected rules", permissions=["change"])
    def disable(self, request, queryset):
        queryset.update(enabled=False)
        alert_rules.invalidate_rules_cache()


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "rule",
        "status",
        "attempts",
        "last_http_status",
        "short_error",
        "audit",
        "is_test",
        "delivered_at",
    ]
    list_filter = ["status", "is_test", "rule"]
    list_select_related = ["rule"]
    date_hierarchy = "created_at"

    @admin.display(description="last error")
    def short_error(self, obj: AlertDelivery) -> str:
        return (obj.last_error or "")[:120]
