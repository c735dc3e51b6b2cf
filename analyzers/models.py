"""The admin-editable configuration (docs/reference/contract.md section 5), API keys and their rate counters.

`analyzers.config_store.load_config()` turns these rows into the engine's `AuditorConfig`;
`save_config()` writes one back. Every change is recorded in `ConfigChange`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone


class SingletonModel(models.Model):
    """A table with exactly one row (pk=1), created on first use."""

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        self.pk = 1
        super().save(*args, **kwargs)

    @classmethod
    def load(cls):
        """The stored row, or an unsaved one with the defaults (reading never writes)."""
        return cls.objects.filter(pk=1).first() or cls(pk=1)


class GlobalSettings(SingletonModel):
    """Threshold, concurrency and timeout shared by every audit."""

    threshold = models.FloatField(
        default=0.3, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    max_concurrency = models.PositiveIntegerField(default=4, validators=[MinValueValidator(1)])
    analyzer_timeout_s = models.FloatField(default=10.0, validators=[MinValueValidator(0.001)])
    extra = models.JSONField(
        default=dict, blank=True, help_text="Other top-level settings of the configuration file."
    )

    class Meta:
        verbose_name = "global settings"
        verbose_name_plural = "global settings"

    def __str__(self) -> str:
        return "Global settings"


class Brand(SingletonModel):
    name = models.CharField(max_length=200, default="Acme")
    title_suffix = models.CharField(max_length=200, default=" | Acme", blank=True)

    class Meta:
        verbose_name = "brand"
        verbose_name_plural = "brand"

    def __str__(self) -> str:
        return self.name


class LLMProvider(SingletonModel):
    """Where judged analyzers find a model. Only the NAME of the env var holding the key."""

    base_url = models.URLField(max_length=500, null=True, blank=True)
    model = models.CharField(max_length=200, null=True, blank=True)
    api_key_env = models.CharField(
        max_length=200,
        default="AUDITOR_LLM_API_KEY",
        help_text="Name of the environment variable that holds the key (never the key).",
    )
    timeout_s = models.FloatField(default=30.0, validators=[MinValueValidator(0.001)])
    max_concurrency = models.PositiveIntegerField(default=4, validators=[MinValueValidator(1)])
    max_retries = models.PositiveIntegerField(default=3)
    extra = models.JSONField(
        default=dict, blank=True, help_text="Other LLM settings (temperature, json_mode, ...)."
    )

    class Meta:
        verbose_name = "LLM provider"
        verbose_name_plural = "LLM provider"

    def __str__(self) -> str:
        return self.model or "LLM provider (not configured)"


class AnalyzerConfig(models.Model):
    """One analyzer's switch and settings (validated by the analyzer's pydantic Settings)."""

    analyzer_id = models.CharField(max_length=100, unique=True)
    enabled = models.BooleanField(default=True)
    settings = models.JSONField(default=dict, blank=True)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["position", "analyzer_id"]
        verbose_name = "analyzer"

    def __str__(self) -> str:
        return self.analyzer_id


class AllowedHost(models.Model):
    """A link host the links analyzer keeps; `.acme.example` also allows subdomains."""

    host = models.CharField(max_length=255, unique=True)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return self.host


class KnownCustomer(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=200, unique=True)
    aliases = models.JSONField(default=list, blank=True, help_text="A JSON list of strings.")
    facts = models.JSONField(default=list, blank=True, help_text="A JSON list of strings.")
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return self.name


class PromptLeakPattern(models.Model):
    """A marker of internal prompt text (the `patterns` setting of the prompt_leak analyzer)."""

    pattern = models.CharField(max_length=500)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return self.pattern


class CustomJudge(models.Model):
    """An LLM-judged analyzer defined in the admin; see analyzers.engine.builtin.custom_judge."""

    analyzer_id = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    category = models.CharField(max_length=100, default="custom")
    prompt_template = models.TextField()
    mapping = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    settings = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["analyzer_id"]

    def __str__(self) -> str:
        return self.name

    def to_dict(self) -> dict:
        return {
            "analyzer_id": self.analyzer_id,
            "name": self.name,
            "category": self.category,
            "prompt_template": self.prompt_template,
            "mapping": self.mapping,
            "enabled": self.enabled,
            "settings": self.settings,
        }


class ConfigChange(models.Model):
    """Who changed the configuration, when, and what (whole-config before/after)."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.CharField(max_length=200)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    source = models.CharField(max_length=50)
    summary = models.TextField(blank=True)
    diff = models.JSONField(default=dict, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    # Why (a forced promotion must say), the candidate promoted by this change, and the
    # evidence it was promoted on (the counts of its comparison with the active one).
    reason = models.TextField(blank=True, default="")
    candidate = models.ForeignKey(
        "CandidateConfig", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    evidence = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor}: {self.summary}"[:200]


class CandidateConfig(models.Model):
    """A whole configuration tried in shadow next to the active one (analyzers.candidates).

    While in shadow, new audits are also analysed with it (results kept apart, never
    changing the audit's own); `replay_*` tells how far a replay of stored audits got.
    """

    class Status(models.TextChoices):
        SHADOW = "shadow"
        PROMOTED = "promoted"
        DISCARDED = "discarded"

    name = models.CharField(max_length=200)
    config = models.JSONField()  # the configuration file, as PUT /api/config takes it
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.SHADOW)
    shadow_sample_rate = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    # Whether shadow analysis runs the judged analyzers (model calls cost): off by default.
    shadow_judged = models.BooleanField(default=False)
    created_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)  # promoted or discarded
    # New audits not analysed in shadow because the queue was deep (they yield to audits).
    shadow_skipped = models.PositiveIntegerField(default=0)
    replay_status = models.CharField(max_length=10, blank=True, default="")
    replay_done = models.PositiveIntegerField(default=0)
    replay_total = models.PositiveIntegerField(default=0)
    replay_judged = models.BooleanField(default=False)
    # The replay's audits: the latest `replay_total` complete ones created until then.
    replay_until = models.DateTimeField(null=True, blank=True)
    replay_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "candidate configuration"
        indexes = [models.Index(fields=["status"], name="candidate_status_idx")]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"


class ApiKey(models.Model):
    """An API key: `ra_<prefix>_<secret>`; only the prefix and SHA-256 of the secret are kept."""

    class Scope(models.TextChoices):
        INGEST = "ingest", "ingest (submit audits only)"
        READ = "read", "read (submit, list, read, export)"
        REVIEW = "review", "review (read, and record verdicts)"
        ADMIN = "admin", "admin (everything, including configuration)"

    SCOPE_RANK = {"ingest": 0, "read": 1, "review": 2, "admin": 3}

    name = models.CharField(max_length=200)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.INGEST)
    rate_limit_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests per minute; empty = the server default."
    )
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…, {self.scope})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def allows(self, scope: str) -> bool:
        return self.is_active and self.SCOPE_RANK[self.scope] >= self.SCOPE_RANK[scope]

    @staticmethod
    def hash_secret(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    def set_new_secret(self) -> str:
        """Generate prefix and secret; return the full key (shown once, never stored)."""
        self.prefix = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        self.secret_hash = self.hash_secret(secret)
        return f"ra_{self.prefix}_{secret}"

    @classmethod
    def create_key(cls, name: str, scope: str = "ingest", **fields) -> tuple[ApiKey, str]:
        key = cls(name=name, scope=scope, **fields)
        raw = key.set_new_secret()
        key.save()
        return key, raw

    @classmethod
    def authenticate(cls, raw: str) -> ApiKey | None:
        """The active key for `raw`, or None. Constant-time comparison of the secret hash."""
        parts = (raw or "").strip().split("_", 2)
        if len(parts) != 3 or parts[0] != "ra" or not parts[1] or not parts[2]:
            return None
        key = cls.objects.filter(prefix=parts[1][:16]).first()
        digest = cls.hash_secret(parts[2])
        if key is None:
            hmac.compare_digest(digest, digest)  # same work whether or not the prefix exists
            return None
        if not hmac.compare_digest(digest, key.secret_hash) or not key.is_active:
            return None
        return key


class RateLimitCounter(models.Model):
    """Requests of one API key in one time window; incremented atomically with F()."""

    bucket = models.CharField(max_length=100, unique=True)
    count = models.PositiveIntegerField(default=0)
    window_start = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.bucket}: {self.count}"
