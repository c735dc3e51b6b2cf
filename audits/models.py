"""What happened: audit runs, one result per analyzer, annotations, trace lines, links.

Child rows (results, annotations, trace lines, links) carry an autoincrement `id` and a
`position` within their run, so a live feed can catch up from the database in order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from analyzers.engine.linkcheck import static_url_problem
from audits.ids import new_audit_id


class AuditRun(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        COMPLETE = "complete"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=new_audit_id, editable=False)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # True when the response was a stream that ended before completion.
    incomplete = models.BooleanField(default=False)

    api_key = models.ForeignKey(
        "analyzers.ApiKey",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audits",
    )
    external_id = models.CharField(max_length=200, null=True, blank=True)
    # SHA-256 of the canonical request body: the same external_id with another body is a 409
    # (empty without an external_id: nothing compares it then).
    request_hash = models.CharField(max_length=64, blank=True, default="")

    user_input = models.TextField(blank=True, default="")
    response = models.TextField(blank=True, default="")
    cleaned_response = models.TextField(blank=True, default="")
    sources = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    collision_key = models.TextField(null=True, blank=True)
    options = models.JSONField(default=dict, blank=True)

    threshold = models.FloatField(default=0.3)
    config_snapshot = models.JSONField(default=dict, blank=True)
    overall_score = models.FloatField(null=True, blank=True)
    # The highest score of a successful result (the headline: what decides surfacing),
    # and the analyzer that gave it; null until the audit completes. See `audits.store.scoring`.
    top_score = models.FloatField(null=True, blank=True)
    top_analyzer = models.CharField(max_length=100, blank=True, default="")
    # True when at least one result is surfaced (the audit "has a card").
    has_card = models.BooleanField(default=False)
    # The thresholds its surfacing follows (audits.surfacing); null: set before they were
    # recorded. `threshold` above is this policy's global threshold.
    surfacing_policy = models.ForeignKey(
        "SurfacingPolicy",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # audit_surfacing_idx leads with status instead
    )

    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    rerun_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns"
    )
    # Human review: when the latest verdict was recorded (null: never reviewed), and the
    # review-queue claim that keeps two reviewers off the same audit.
    reviewed_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    claimed_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["api_key", "external_id"],
                condition=Q(external_id__isnull=False),
                name="audit_external_id_unique_per_key",
            ),
        ]
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="audit_created_idx"),
            models.Index(fields=["overall_score"], name="audit_score_idx"),
            # The list sorted by the highest score (keyset: score, then time, then id).
            models.Index(fields=["top_score", "created_at", "id"], name="audit_top_score_idx"),
            models.Index(fields=["has_card", "-created_at"], name="audit_card_idx"),
            models.Index(fields=["status", "started_at"], name="audit_status_idx"),
            # "Still at older thresholds" (audits.surfacing.policies.stale_audits): an index-only count.
            models.Index(
                fields=["status", "surfacing_policy", "created_at"], name="audit_surfacing_idx"
            ),
            models.Index(fields=["has_card", "reviewed_at", "created_at"], name="audit_review_idx"),
            # Covering index of the trends page's per-day figures and its cache checks.
            models.Index(
                fields=["created_at", "status", "has_card", "overall_score", "top_score"],
                name="audit_trends_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"Audit {self.id} ({self.status})"

    @property
    def surfaced(self) -> bool:
        return self.has_card

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.COMPLETE, self.Status.FAILED)


class SurfacingPolicy(models.Model):
    """One set of thresholds (global and per analyzer) that stored surfacing follows.

    Equal thresholds share a row (`key`), so "still shows the old surfacing" is the query
    `surfacing_policy != current` (audits.surfacing).
    """

    key = models.CharField(max_length=64, unique=True)
    thresholds = models.JSONField(default=dict)  # {"threshold": 0.3, "analyzers": {id: t}}
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "surfacing policies"

    def __str__(self) -> str:
        return self.describe()

    @property
    def threshold(self) -> float:
        return float(self.thresholds.get("threshold", 0.3))

    @property
    def analyzer_thresholds(self) -> dict[str, float]:
        return dict(self.thresholds.get("analyzers") or {})

    def describe(self) -> str:
        own = ", ".join(f"{a} {t:.2f}" for a, t in sorted(self.analyzer_thresholds.items()))
        return f"{self.threshold:.2f}" + (f" ({own})" if own else "")


class ResurfaceJob(models.Model):
    """One re-surfacing of the stored audits after a threshold change (audits.surfacing).

    A newer job supersedes an older one that is still running: the latest thresholds win.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        SUPERSEDED = "superseded"
        FAILED = "failed"

    policy = models.ForeignKey(SurfacingPolicy, on_delete=models.CASCADE, related_name="jobs")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    total = models.PositiveIntegerField(default=0)  # audits to re-surface when it started
    processed = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)  # audits whose card appeared or went
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"Re-surfacing {self.pk} ({self.status}, {self.processed}/{self.total})"

    @property
    def is_active(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.RUNNING)

    @property
    def percent(self) -> int:
        if not self.total:
            return 100 if self.status == self.Status.DONE else 0
        return min(100, round(100 * self.processed / self.total))


def stamp_audit_created_at(rows: list[models.Model]) -> None:
    """Copy each row's audit `created_at` onto the row (the trends page's date column).

    Results and annotations carry their audit's creation time so the trends aggregates
    are index range scans without a join. An audit's `created_at` never changes once it has
    child rows. Uses the cached audit object when there is one, else one query for all.
    """
    missing = [row for row in rows if row.audit_created_at is None]
    if not missing:
        return
    unknown = set()
    for row in missing:
        if row._meta.get_field("audit").is_cached(row):
            row.audit_created_at = row.audit.created_at
        else:
            unknown.add(row.audit_id)
    if unknown:
        stamps = dict(AuditRun.objects.filter(pk__in=unknown).values_list("pk", "created_at"))
        for row in missing:
            if row.audit_created_at is None:
                row.audit_created_at = stamps.get(row.audit_id)


class StampedQuerySet(models.QuerySet):
    """`bulk_create` fills `audit_created_at` (save() does it for single rows)."""

    def bulk_create(self, objs, *args, **kwargs):
        objs = list(objs)
        stamp_audit_created_at(objs)
        return super().bulk_create(objs, *args, **kwargs)


class AnalyzerRunRecord(models.Model):
    """The outcome of one analyzer on one audit (docs/reference/contract.md section 2 `results` item)."""

    class Status(models.TextChoices):
        OK = "ok"
        FAILED = "failed"
        TIMEOUT = "timeout"

    audit = models.ForeignKey(
        AuditRun,
        on_delete=models.CASCADE,
        related_name="results",
        db_index=False,  # result_audit_idx leads with it
    )
    position = models.PositiveIntegerField(default=0)
    analyzer_id = models.CharField(max_length=100)
    category = models.CharField(max_length=100, blank=True, default="")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OK)
    error = models.TextField(null=True, blank=True)
    duration_ms = models.FloatField(default=0.0)
    score = models.FloatField(default=0.0)
    should_surface = models.BooleanField(default=False)
    surfaced = models.BooleanField(default=False)
    supplementary = models.JSONField(default=dict, blank=True)
    # A copy of audit.created_at (set on save and bulk_create), for the trends aggregates.
    audit_created_at = models.DateTimeField(editable=False)

    objects = StampedQuerySet.as_manager()

    class Meta:
        ordering = ["audit", "position", "id"]
        verbose_name = "analyzer result"
        indexes = [
            # An audit's results, and the "surfaced by this analyzer" filters (EXISTS per
            # audit: a covering seek; the former (analyzer_id, surfaced) index had the
            # planner walk every surfaced result of the analyzer for each audit).
            models.Index(fields=["audit", "analyzer_id", "surfaced"], name="result_audit_idx"),
            # Covering index of the trends page's per-analyzer figures.
            models.Index(
                fields=["audit_created_at", "analyzer_id", "status", "surfaced", "duration_ms"],
                name="result_trends_idx",
            ),
        ]

    def save(self, *args, **kwargs):
        stamp_audit_created_at([self])
        super().save(*args, **kwargs)

    def __str__(self) -> str:
        return f"{self.analyzer_id} {self.status} {self.score:.2f}"


class Annotation(models.Model):
    """One finding of one analyzer; `audit` is duplicated for fast list filters."""

    class Severity(models.TextChoices):
        INFO = "info"
        WARNING = "warning"
        CRITICAL = "critical"

    audit = models.ForeignKey(AuditRun, on_delete=models.CASCADE, related_name="annotations")
    result = models.ForeignKey(
        AnalyzerRunRecord, on_delete=models.CASCADE, related_name="annotations"
    )
    position = models.PositiveIntegerField(default=0)
    analyzer_id = models.CharField(max_length=100)
    type = models.CharField(max_length=100)
    label = models.CharField(max_length=500, blank=True, default="")
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.WARNING)
    description = models.TextField(blank=True, default="")
    evidence = models.TextField(null=True, blank=True)
    start = models.IntegerField(null=True, blank=True)
    end = models.IntegerField(null=True, blank=True)
    # A copy of audit.created_at (set on save and bulk_create), for the trends aggregates.
    audit_created_at = models.DateTimeField(editable=False)

    objects = StampedQuerySet.as_manager()

    class Meta:
        # The list filters and the trends page read AnnotationKind, not these rows.
        ordering = ["result", "position", "id"]

    def save(self, *args, **kwargs):
        stamp_audit_created_at([self])
        super().save(*args, **kwargs)

    def __str__(self) -> str:
        return f"{self.type} ({self.severity})"


class AnnotationKind(models.Model):
    """How many annotations of one (type, severity) an audit has: what the list's type and
    severity filters and the trends page's top types read. One row per pair instead of
    three index entries per annotation (an audit with 18 link findings wrote 54 of them
    for one pair). Written with the annotations (audits.services, the tests' factories)."""

    audit = models.ForeignKey(
        AuditRun,
        on_delete=models.CASCADE,
        related_name="annotation_kinds",
        db_index=False,  # the unique constraint's index leads with it
    )
    type = models.CharField(max_length=100)
    severity = models.CharField(max_length=10, choices=Annotation.Severity.choices)
    count = models.PositiveIntegerField()
    # A copy of audit.created_at, as on results and annotations (the trends aggregates).
    audit_created_at = models.DateTimeField(editable=False)

    objects = StampedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["audit", "type", "severity"], name="kind_per_audit"),
        ]
        indexes = [
            # The list filters (an EXISTS per audit), led by the value: led by the audit
            # instead, a filter on a rare type probed a page per audit (×4.5 slower with
            # no match).
            models.Index(fields=["type", "audit"], name="kind_type_idx"),
            models.Index(fields=["severity", "audit"], name="kind_severity_idx"),
            # Covering index of the trends page's top annotation types.
            models.Index(
                fields=["audit_created_at", "type", "severity", "count"], name="kind_trends_idx"
            ),
        ]

    @staticmethod
    def counted(annotations: Iterable[Any]) -> Counter[tuple[str, str]]:
        """{(type, severity): how many} of `annotations` (rows or engine annotations)."""
        return Counter((a.type, a.severity) for a in annotations)

    def __str__(self) -> str:
        return f"{self.type} ({self.severity}) ×{self.count}"


class TraceLine(models.Model):
    """ "[AUDIT] ..." lines, in order: one or more consecutive lines joined by "\n", from
    the line at `position` on (see audits.store.trace_rows; read them through it)."""

    audit = models.ForeignKey(
        AuditRun,
        on_delete=models.CASCADE,
        related_name="trace_lines",
        db_index=False,  # trace_line_unique_position leads with it
    )
    position = models.PositiveIntegerField()
    text = models.TextField()

    class Meta:
        ordering = ["audit", "position"]
        constraints = [
            models.UniqueConstraint(fields=["audit", "position"], name="trace_line_unique_position")
        ]

    def __str__(self) -> str:
        return self.text[:100]


class AuditLinks(models.Model):
    """The audit's link table in one row: `rows`, a JSON array of the contract's link
    objects in order (see audits.store.link_rows; read them through it). No row: no links."""

    audit = models.OneToOneField(
        AuditRun, on_delete=models.CASCADE, primary_key=True, related_name="link_table"
    )
    rows = models.TextField()

    class Meta:
        verbose_name = "link table"

    def __str__(self) -> str:
        return f"Links of {self.audit_id}"


class CollisionDigest(models.Model):
    """A content hash the red-flag analyzer has seen in a scope (SHA-256 of the collision key)."""

    scope_hash = models.CharField(max_length=64)
    digest = models.CharField(max_length=128)
    created_at = models.DateTimeField(default=timezone.now)
    # The root audit (an audit and its re-runs) that first produced it ("": not known),
    # and whether another one produced it too (audits.store.collisions).
    first_family = models.CharField(max_length=64, blank=True, default="")
    shared = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope_hash", "digest"], name="collision_unique")
        ]

    def __str__(self) -> str:
        return f"{self.scope_hash[:8]}:{self.digest[:12]}"


class Review(models.Model):
    """A reviewer's verdict on a whole audit (`annotation` empty) or on one annotation.

    Changing a verdict adds a row and marks the previous one `is_current=False`: the history
    stays, and each target has at most one current verdict.
    """

    class Verdict(models.TextChoices):
        CONFIRMED = "confirmed"
        FALSE_POSITIVE = "false_positive", "false positive"
        UNSURE = "unsure"

    audit = models.ForeignKey(AuditRun, on_delete=models.CASCADE, related_name="reviews")
    annotation = models.ForeignKey(
        Annotation, null=True, blank=True, on_delete=models.CASCADE, related_name="reviews"
    )
    verdict = models.CharField(max_length=20, choices=Verdict.choices)
    comment = models.TextField(blank=True, default="")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_reviews",
    )
    api_key = models.ForeignKey(
        "analyzers.ApiKey",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reviews",
    )
    # Who, as shown: kept when the user or the key is deleted later.
    reviewer_name = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    is_current = models.BooleanField(default=True)

    class Meta:
        ordering = ["audit", "created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["audit"],
                condition=Q(is_current=True, annotation__isnull=True),
                name="review_one_current_per_audit",
            ),
            models.UniqueConstraint(
                fields=["annotation"],
                condition=Q(is_current=True, annotation__isnull=False),
                name="review_one_current_per_annotation",
            ),
        ]
        indexes = [
            models.Index(fields=["audit", "is_current"], name="review_audit_idx"),
            models.Index(fields=["verdict", "is_current"], name="review_verdict_idx"),
            models.Index(fields=["created_at"], name="review_created_idx"),
        ]

    def __str__(self) -> str:
        target = f"annotation {self.annotation_id}" if self.annotation_id else "audit"
        return f"{self.verdict} on {target} by {self.reviewer_name or 'unknown'}"


class DashboardPreference(models.Model):
    """One user's dashboard choices, kept on the server so they follow the user."""

    class AuditView(models.TextChoices):
        CARDS = "cards"
        TABLE = "table"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="dashboard_preference"
    )
    audit_view = models.CharField(max_length=10, choices=AuditView.choices, default=AuditView.CARDS)

    def __str__(self) -> str:
        return f"{self.user_id}: {self.audit_view}"


class AlertRule(models.Model):
    """When finished audits match these conditions (often enough), POST to a webhook.

    Every condition that is set must hold. The annotation conditions hold when one
    annotation has the type and at least the severity (of `analyzer_id` when set);
    `analyzer_id` alone means that analyzer's result surfaced.
    """

    class Severity(models.TextChoices):
        ANY = "", "any"
        INFO = "info"
        WARNING = "warning"
        CRITICAL = "critical"

    name = models.CharField(max_length=200)
    enabled = models.BooleanField(default=True)
    webhook_url = models.URLField(
        max_length=2000,
        help_text="Receives a JSON POST with a Slack-compatible `text` field. It passes the "
        "link checker's SSRF guard (private addresses only with "
        "AUDITOR_ALLOW_PRIVATE_NETWORKS).",
    )
    min_overall_score = models.FloatField(
        null=True, blank=True, help_text="The audit's overall score is at or above this (0 to 1)."
    )
    annotation_type = models.CharField(
        max_length=100, blank=True, default="", help_text="An annotation of this type (blank: any)."
    )
    min_severity = models.CharField(
        max_length=10,
        blank=True,
        default="",
        choices=Severity.choices,
        help_text="An annotation of at least this severity.",
    )
    analyzer_id = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text="Only this analyzer's annotations count; alone: its result surfaced.",
    )
    min_count = models.PositiveIntegerField(
        default=1,
        help_text="Fire when at least this many matching audits arrive within the window.",
    )
    window_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Blank: every matching audit alerts. Otherwise at most one alert per window.",
    )
    # Set atomically when the rule fires with a window: the cooldown claim.
    last_fired_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        errors: dict[str, str] = {}
        if not (
            self.min_overall_score is not None
            or self.annotation_type
            or self.min_severity
            or self.analyzer_id
        ):
            errors["__all__"] = (
                "Set at least one condition (score, annotation type, severity or analyzer)."
            )
        if self.min_overall_score is not None and not 0.0 <= self.min_overall_score <= 1.0:
            errors["min_overall_score"] = "The score is between 0 and 1."
        # The SSRF guard's check without DNS (every delivery is guarded again).
        from django.conf import settings

        problem = static_url_problem(
            self.webhook_url or "", allow_private=settings.AUDITOR_ALLOW_PRIVATE_NETWORKS
        )
        if problem:
            errors["webhook_url"] = f"Not a webhook the auditor may call: {problem}."
        count = self.min_count if self.min_count is not None else 1  # None: a field error
        if count < 1:
            errors["min_count"] = "At least 1."
        if self.window_minutes is not None and self.window_minutes < 1:
            errors["window_minutes"] = "At least 1 minute (blank: every matching audit)."
        if count > 1 and self.window_minutes is None:
            errors["window_minutes"] = "A count above 1 needs a window."
        if errors:
            raise ValidationError(errors)

    def conditions_summary(self) -> str:
        parts = []
        if self.min_overall_score is not None:
            parts.append(f"score ≥ {self.min_overall_score:g}")
        if self.annotation_type:
            parts.append(f"type {self.annotation_type}")
        if self.min_severity:
            parts.append(f"severity ≥ {self.min_severity}")
        if self.analyzer_id:
            parts.append(f"analyzer {self.analyzer_id}")
        text = ", ".join(parts) or "no condition"
        if self.window_minutes:
            text += f"; ≥ {self.min_count} in {self.window_minutes} min"
        return text


class AlertDelivery(models.Model):
    """One alert sent (or tried) to a rule's webhook; every attempt updates the row."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="deliveries")
    audit = models.ForeignKey(
        AuditRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="alert_deliveries"
    )
    is_test = models.BooleanField(default=False)
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_http_status = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    # One entry per attempt: {"at", "http_status", "error", "wait_s"} (wait before the next).
    history = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "alert deliveries"
        indexes = [
            models.Index(fields=["rule", "-created_at"], name="alert_delivery_rule_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.rule_id} → {self.status} ({self.attempts} attempt(s))"


class TraceDocuments(models.Model):
    """The documents of one OTLP retrieval span, kept for a bounded time so that the LLM
    spans of the same trace get them as sources when they arrive in a later request
    (`audits/api/otlp/traces.py` writes, reads and prunes these rows)."""

    api_key = models.ForeignKey("analyzers.ApiKey", on_delete=models.CASCADE, related_name="+")
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    start_ns = models.BigIntegerField(default=0)
    sources = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["api_key", "trace_id", "span_id"], name="trace_documents_unique_span"
            ),
        ]
        indexes = [models.Index(fields=["created_at"], name="trace_documents_created_idx")]

    def __str__(self) -> str:
        return f"{self.trace_id}:{self.span_id} ({len(self.sources)} document(s))"


class ShadowResult(models.Model):
    """What a candidate configuration made of one audit (audits.shadow), kept apart from
    the audit's own results, which it never changes."""

    class Source(models.TextChoices):
        SHADOW = "shadow"  # a new audit, analysed after its own work
        REPLAY = "replay"  # a stored audit, replayed on request

    candidate = models.ForeignKey(
        "analyzers.CandidateConfig",
        on_delete=models.CASCADE,
        related_name="shadow_results",
        db_index=False,  # shadow_unique_per_audit leads with it
    )
    audit = models.ForeignKey(AuditRun, on_delete=models.CASCADE, related_name="shadow_results")
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.SHADOW)
    score = models.FloatField(null=True, blank=True)  # the highest score of a successful result
    surfaced = models.BooleanField(default=False)
    # [{analyzer, type, severity, label, evidence, start, end}], and per analyzer
    # [{analyzer, status, score, surfaced}]; `left_out`: analyzers its run did not run.
    findings = models.JSONField(default=list, blank=True)
    results = models.JSONField(default=list, blank=True)
    left_out = models.JSONField(default=list, blank=True)
    cleaned_digest = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["candidate", "audit"], name="shadow_unique_per_audit"),
        ]

    def __str__(self) -> str:
        return f"candidate {self.candidate_id} on {self.audit_id}"


class DeletionLog(models.Model):
    """One erasure of audits (an id, a filter, the retention policy): who, when, which
    filter and how many; never any of the audits' content."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.CharField(max_length=200)  # "admin:<username>", "api:<key prefix>", ...
    source = models.CharField(max_length=20)  # api, admin, retention, command
    filter = models.JSONField(default=dict, blank=True)
    count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.source} {self.actor}: {self.count}"
