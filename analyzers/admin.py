"""Admin screens for the configuration; every save is recorded in the change log."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.utils import timezone
from pydantic import ValidationError

from analyzers.engine.builtin.custom_judge import JudgeDefinition, judge_from_dict
from analyzers.engine.config import AUDITOR_KEYS, LLMConfig, OtelConfig, PrivacyConfig
from analyzers.engine.privacy.detect import DEFAULT_TYPES, TYPES

from .config_store import (
    PROMPT_LEAK_ID,
    base_registry,
    get_registry,
    recording_change,
    unknown_analyzer_message,
    validate_analyzer_settings,
)
from .models import (
    AllowedHost,
    AnalyzerConfig,
    ApiKey,
    Brand,
    ConfigChange,
    CustomJudge,
    GlobalSettings,
    KnownCustomer,
    LLMProvider,
    PromptLeakPattern,
)
from .policy import REDFLAG_ID, llm_problems, validator_problems
from .proxy_config import proxy_problems, stored_proxy
from .settings_form import error_fields, merge_settings, setting_specs


class RecordedAdmin(admin.ModelAdmin):
    """Wraps every write view in `recording_change` (who, when, what)."""

    def _record(self, request):
        return recording_change(
            actor=f"user:{request.user.get_username()}", source="admin", user=request.user
        )

    def changeform_view(self, request, *args, **kwargs):
        with self._record(request):
            return super().changeform_view(request, *args, **kwargs)

    def delete_view(self, request, *args, **kwargs):
        with self._record(request):
            return super().delete_view(request, *args, **kwargs)

    def changelist_view(self, request, *args, **kwargs):
        if request.method != "POST":
            return super().changelist_view(request, *args, **kwargs)
        with self._record(request):
            return super().changelist_view(request, *args, **kwargs)


class SingletonAdmin(RecordedAdmin):
    def has_add_permission(self, request):
        return not self.model.objects.exists()

    def has_delete_permission(self, request, obj=None):
        return False


def _choice(label: str, choices: dict[str, str]) -> forms.ChoiceField:
    """An optional choice of `choices` (value: meaning), the first one by default."""
    return forms.ChoiceField(
        label=label,
        choices=[(value, f"{value}: {meaning}") for value, meaning in choices.items()],
        initial=next(iter(choices)),
        required=False,
    )


class GlobalSettingsForm(forms.ModelForm):
    """Global settings, with the `otel` section of `extra` as its own field."""

    otel_trace_url_template = forms.CharField(
        label="Trace URL template (otel)",
        required=False,
        max_length=2000,
        help_text="Link from an audit to its trace in your tracing tool, an http(s) URL with "
        "{trace_id} (and optionally {span_id}), e.g. "
        "https://phoenix.example/projects/default/traces/{trace_id}. Empty: no link.",
    )
    proxy_base_url = forms.CharField(
        label="Upstream base URL (proxy)",
        required=False,
        max_length=500,
        help_text="Where POST /v1/chat/completions forwards requests, e.g. "
        "https://api.openai.com/v1. Empty: the proxy answers 503.",
    )
    proxy_api_key_env = forms.CharField(
        label="Upstream key variable (proxy)",
        max_length=200,
        required=False,
        initial="AUDITOR_UPSTREAM_API_KEY",
        help_text="Name of the environment variable holding the upstream key (never the key); "
        "the operator allows names with AUDITOR_PROXY_KEY_ENVS.",
    )
    proxy_timeout_s = forms.FloatField(
        label="Upstream timeout, s (proxy)", initial=60.0, required=False
    )
    proxy_mode = _choice(
        "Mode (proxy)",
        {
            "clean": "clients receive the cleaned text",
            "observe": "clients receive the original; the audit is recorded",
        },
    )
    proxy_extra_text = _choice(
        "Refusal and reasoning text (proxy)",
        {
            "audit": "passed on audited, like the content",
            "drop": "never passed on",
        },
    )
    proxy_max_held_bytes = forms.IntegerField(
        label="Frames held behind unaudited text, bytes (proxy)",
        initial=1_000_000,
        required=False,
        help_text="Past this the held paragraph is audited and sent (10,000 to 64,000,000).",
    )

    privacy_action = _choice(
        "Personal data and secrets in the cleaned response (privacy)",
        {
            "flag": "annotated, passed on as they are",
            "redact": "replaced by a placeholder ([EMAIL], [CARD], …)",
        },
    )
    privacy_store = _choice(
        "What the database keeps (privacy)",
        {
            "original": "the text as it arrived",
            "redacted": "the original never reaches the database",
        },
    )
    privacy_detect = forms.MultipleChoiceField(
        label="Types redacted (privacy)",
        choices=[(t, t) for t in TYPES],
        initial=list(DEFAULT_TYPES),
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    retention_days = forms.IntegerField(
        label="Retention, days",
        required=False,
        min_value=1,
        max_value=36500,
        help_text="Audits older than this are erased automatically. Empty: kept.",
    )

    class Meta:
        model = GlobalSettings
        fields = "__all__"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        privacy = PrivacyConfig.model_validate((self.instance.extra or {}).get("privacy") or {})
        for name in ("action", "store", "detect"):
            self.fields[f"privacy_{name}"].initial = getattr(privacy, name)
        self.fields["retention_days"].initial = (self.instance.extra or {}).get("retention_days")
        otel = (self.instance.extra or {}).get("otel") or {}
        self.fields["otel_trace_url_template"].initial = otel.get("trace_url_template") or ""
        proxy = stored_proxy(self.instance.extra)
        for name in (
            "base_url",
            "api_key_env",
            "timeout_s",
            "mode",
            "extra_text",
            "max_held_bytes",
        ):
            self.fields[f"proxy_{name}"].initial = getattr(proxy, name) or ""

    def clean(self):
        data = super().clean()
        extra = data.get("extra")
        if extra is None or extra == "":
            extra = {}
        if not isinstance(extra, dict):
            self.add_error("extra", "must be a JSON object")
            return data
        template = data.get("otel_trace_url_template") or None
        try:
            otel = OtelConfig(trace_url_template=template)
        except ValidationError as exc:
            self.add_error("otel_trace_url_template", exc.errors()[0]["msg"])
            return data
        section = {
            "base_url": data.get("proxy_base_url") or None,
            "api_key_env": data.get("proxy_api_key_env") or "AUDITOR_UPSTREAM_API_KEY",
            "timeout_s": data.get("proxy_timeout_s") or 60.0,
            "mode": data.get("proxy_mode") or "clean",
            "extra_text": data.get("proxy_extra_text") or "audit",
            "max_held_bytes": data.get("proxy_max_held_bytes") or 1_000_000,
        }
        problems = proxy_problems(section)
        for path, msgs in problems.items():
            field = "proxy_" + path.split(".")[1] if "." in path else None
            self.add_error(field if field in self.fields else None, " ".join(msgs))
        if problems:
            return data
        privacy = PrivacyConfig(
            action=data.get("privacy_action") or "flag",
            store=data.get("privacy_store") or "original",
            detect=list(data.get("privacy_detect") or []),
        )
        data["extra"] = {
            **extra,
            "otel": otel.model_dump(),
            "proxy": section,
            "privacy": privacy.model_dump(),
            "retention_days": data.get("retention_days"),
        }
        return data


@admin.register(GlobalSettings)
class GlobalSettingsAdmin(SingletonAdmin):
    form = GlobalSettingsForm
    list_display = ["__str__", "threshold", "max_concurrency", "analyzer_timeout_s"]


@admin.register(Brand)
class BrandAdmin(SingletonAdmin):
    list_display = ["name", "title_suffix"]


class LLMProviderForm(forms.ModelForm):
    class Meta:
        model = LLMProvider
        fields = "__all__"

    def clean(self):
        data = super().clean()
        extra = data.get("extra") or {}
        if not isinstance(extra, dict):
            self.add_error("extra", "must be a JSON object")
            return data
        values = {
            k: data.get(k)
            for k in (
                "base_url",
                "model",
                "api_key_env",
                "timeout_s",
                "max_concurrency",
                "max_retries",
            )
        }
        try:
            LLMConfig.model_validate(
                {**extra, **{k: v for k, v in values.items() if v is not None}}
            )
        except ValidationError as exc:
            for err in exc.errors():
                field = str(err["loc"][0]) if err["loc"] else None
                self.add_error(
                    field if field in self.fields else "extra",
                    f"{'.'.join(map(str, err['loc']))}: {err['msg']}",
                )
            return data
        for field, problems in llm_problems(values).items():
            for problem in problems:
                self.add_error(field, problem)
        return data


@admin.register(LLMProvider)
class LLMProviderAdmin(SingletonAdmin):
    form = LLMProviderForm
    list_display = ["__str__", "base_url", "api_key_env"]


class AnalyzerConfigForm(forms.ModelForm):
    """An analyzer's switch, its own threshold and its settings. For a registered analyzer
    the settings are one field each, generated from its pydantic `Settings` model
    (`analyzer_form_class`); the JSON box keeps whatever those fields do not cover."""

    analyzer_id = forms.CharField(
        help_text="A registered analyzer (built-in, plug-in or custom judge)."
    )
    threshold = forms.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        widget=forms.NumberInput(attrs={"step": "0.01"}),
        label="Threshold (this analyzer)",
        help_text="Its results surface at or above this score. Empty: the global threshold.",
    )
    setting_specs: list = []  # set by analyzer_form_class

    class Meta:
        model = AnalyzerConfig
        fields = ["analyzer_id", "enabled", "threshold", "settings", "position"]
        labels = {"settings": "Settings (JSON)"}
        help_texts = {"settings": "Keys as in the configuration file's analyzer section."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        stored = dict(self.instance.settings or {}) if self.instance.pk else {}
        self.initial.setdefault("threshold", stored.get("threshold"))
        covered = {spec.key for spec in self.setting_specs} | {"threshold"}
        self.initial["settings"] = {k: v for k, v in stored.items() if k not in covered}
        for spec in self.setting_specs:
            value = stored.get(spec.key, spec.default)
            self.initial.setdefault(spec.form_name, spec.to_form(value))

    def clean_settings(self):
        value = self.cleaned_data.get("settings")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError("Settings must be a JSON object.")
        if "enabled" in value:
            raise forms.ValidationError("Use the Enabled checkbox, not an 'enabled' key.")
        return value

    def clean(self):
        data = super().clean()
        analyzer_id, extra = data.get("analyzer_id"), data.get("settings")
        if not analyzer_id or extra is None:
            return data
        stored = dict(self.instance.settings or {}) if self.instance.pk else {}
        raw = merge_settings(self.setting_specs, data, stored, extra)
        threshold = data.get("threshold")
        if threshold is not None:
            raw["threshold"] = threshold
        else:
            raw.pop("threshold", None)
        data["settings"] = raw
        registry = get_registry()
        judge_ids = set(CustomJudge.objects.values_list("analyzer_id", flat=True))
        if registry.get(analyzer_id) is None and analyzer_id not in judge_ids:
            self.add_error("analyzer_id", unknown_analyzer_message(analyzer_id, registry))
            return data
        if analyzer_id == REDFLAG_ID:
            for message in validator_problems(raw):
                self._add_setting_error(message)
        if analyzer_id == PROMPT_LEAK_ID and "patterns" in raw:
            self.add_error("settings", "Edit prompt-leak patterns on their own screen.")
        for message in validate_analyzer_settings(analyzer_id, raw, registry):
            self._add_setting_error(message)
        return data

    def _add_setting_error(self, message: str) -> None:
        for field, text in error_fields([message], self.setting_specs):
            if field is None and message.startswith("threshold:"):
                self.add_error("threshold", message.partition(":")[2].strip())
            else:
                self.add_error(field or "settings", text)


# Settings edited elsewhere, never in the analyzer form (prompt-leak patterns have a screen).
FORM_EXCLUDED = {PROMPT_LEAK_ID: frozenset({"patterns"})}


def analyzer_form_class(analyzer_id: str) -> type[AnalyzerConfigForm]:
    """The form for `analyzer_id`: one generated field per setting of its Settings model."""
    analyzer = get_registry().get(analyzer_id)
    if analyzer is None:
        return AnalyzerConfigForm
    specs = setting_specs(
        analyzer.Settings, exclude=AUDITOR_KEYS | FORM_EXCLUDED.get(analyzer_id, frozenset())
    )
    attrs: dict = {spec.form_name: spec.form_field() for spec in specs}
    attrs["setting_specs"] = specs
    return type(f"AnalyzerConfigForm_{analyzer_id}", (AnalyzerConfigForm,), attrs)


@admin.register(AnalyzerConfig)
class AnalyzerConfigAdmin(RecordedAdmin):
    form = AnalyzerConfigForm
    list_display = ["analyzer_id", "enabled", "position", "known"]
    list_editable = ["enabled", "position"]

    @admin.display(boolean=True, description="registered")
    def known(self, obj):
        return base_registry().get(obj.analyzer_id) is not None

    def _form_class(self, obj) -> type[AnalyzerConfigForm]:
        return analyzer_form_class(obj.analyzer_id) if obj is not None else AnalyzerConfigForm

    def get_form(self, request, obj=None, change=False, **kwargs):
        kwargs["form"] = self._form_class(obj)
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request, obj=None):
        form = self._form_class(obj)
        generated = [spec.form_name for spec in form.setting_specs]
        fieldsets = [(None, {"fields": ["analyzer_id", "enabled", "threshold", "position"]})]
        if generated:
            analyzer = get_registry().get(obj.analyzer_id)
            fieldsets.append(
                (
                    f"Settings of {obj.analyzer_id}",
                    {
                        "fields": generated,
                        "description": getattr(analyzer, "description", ""),
                    },
                )
            )
            fieldsets.append(
                (
                    "Advanced: other settings as JSON",
                    {
                        "fields": ["settings"],
                        "classes": ["collapse"],
                    },
                )
            )
        else:
            fieldsets.append(
                (
                    "Settings",
                    {
                        "fields": ["settings"],
                        "description": "Save, then this analyzer's settings show as one field each."
                        if obj is None
                        else "",
                    },
                )
            )
        return fieldsets


@admin.register(AllowedHost)
class AllowedHostAdmin(RecordedAdmin):
    list_display = ["host", "position"]
    list_editable = ["position"]


@admin.register(KnownCustomer)
class KnownCustomerAdmin(RecordedAdmin):
    list_display = ["name", "slug", "position"]
    prepopulated_fields = {"slug": ["name"]}


class StringListField(forms.JSONField):
    def clean(self, value):
        value = super().clean(value)
        if value in (None, ""):
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise forms.ValidationError("Enter a JSON list of strings.")
        return value


class KnownCustomerForm(forms.ModelForm):
    aliases = StringListField(required=False)
    facts = StringListField(required=False)

    class Meta:
        model = KnownCustomer
        fields = "__all__"


KnownCustomerAdmin.form = KnownCustomerForm


@admin.register(PromptLeakPattern)
class PromptLeakPatternAdmin(RecordedAdmin):
    list_display = ["pattern", "position"]
    list_editable = ["position"]


JUDGE_COLUMNS = frozenset({"analyzer_id", "name", "category", "prompt_template"})
JUDGE_SPECS = setting_specs(JudgeDefinition, exclude=JUDGE_COLUMNS)


class CustomJudgeForm(forms.ModelForm):
    """A custom judge: its columns, and the rest of its `JudgeDefinition` (how to read the
    model's JSON) as one generated field each, stored in `mapping`."""

    setting_specs = JUDGE_SPECS

    class Meta:
        model = CustomJudge
        fields = "__all__"
        labels = {"mapping": "Other mapping keys (JSON)"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        stored = dict(self.instance.mapping or {}) if self.instance.pk else {}
        covered = {spec.key for spec in self.setting_specs}
        self.initial["mapping"] = {k: v for k, v in stored.items() if k not in covered}
        for spec in self.setting_specs:
            self.initial.setdefault(
                spec.form_name, spec.to_form(stored.get(spec.key, spec.default))
            )

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        extra = data.get("mapping") or {}
        if not isinstance(extra, dict):
            self.add_error("mapping", "must be a JSON object")
            return data
        stored = dict(self.instance.mapping or {}) if self.instance.pk else {}
        data["mapping"] = merge_settings(self.setting_specs, data, stored, extra)
        payload = {
            k: data.get(k)
            for k in (
                "analyzer_id",
                "name",
                "category",
                "prompt_template",
                "mapping",
                "enabled",
                "settings",
            )
        }
        try:
            judge_from_dict(payload)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"])
                for field, text in error_fields([f"{loc}: {err['msg']}"], self.setting_specs):
                    head = loc.split(".")[0]
                    target = field or (head if head in self.fields else None)
                    self.add_error(target, text if field else f"{loc}: {err['msg']}")
        except Exception as exc:
            raise forms.ValidationError(f"Invalid judge definition: {exc}") from None
        return data


for _spec in JUDGE_SPECS:  # declared fields: the admin lays them out like any other
    CustomJudgeForm.base_fields[_spec.form_name] = _spec.form_field()
    CustomJudgeForm.declared_fields[_spec.form_name] = CustomJudgeForm.base_fields[_spec.form_name]


@admin.register(CustomJudge)
class CustomJudgeAdmin(RecordedAdmin):
    form = CustomJudgeForm
    list_display = ["analyzer_id", "name", "category", "enabled"]
    fieldsets = [
        (None, {"fields": ["analyzer_id", "name", "category", "enabled", "prompt_template"]}),
        ("Reading the model's answer", {"fields": [s.form_name for s in JUDGE_SPECS]}),
        ("Advanced", {"fields": ["mapping", "settings"], "classes": ["collapse"]}),
    ]


@admin.register(ConfigChange)
class ConfigChangeAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor", "source", "summary"]
    list_filter = ["source"]
    search_fields = ["actor", "summary"]
    readonly_fields = [
        "created_at",
        "actor",
        "user",
        "source",
        "summary",
        "diff",
        "before",
        "after",
    ]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ApiKeyAddForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = ["name", "scope", "rate_limit_per_minute"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "scope", "created_at", "last_used_at", "active"]
    list_filter = ["scope"]
    search_fields = ["name", "prefix"]
    readonly_fields = ["prefix", "created_at", "created_by", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyAddForm
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["name", "scope", "rate_limit_per_minute"]
        return ["name", "scope", "rate_limit_per_minute", *self.readonly_fields]

    @admin.display(boolean=True)
    def active(self, obj):
        return obj.is_active

    def save_model(self, request, obj, form, change):
        if not change:
            raw = obj.set_new_secret()
            obj.created_by = request.user
            super().save_model(request, obj, form, change)
            messages.warning(
                request,
                f"The new API key is {raw} — copy it now, it will not be shown again.",
            )
            return
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke the selected keys", permissions=["change"])
    def revoke(self, request, queryset):
        # One save per key, not queryset.update(): post_save clears the verified-key cache
        # (analyzers.auth), so a revoked key is refused from the next request on.
        now = timezone.now()
        count = 0
        for key in queryset.filter(revoked_at__isnull=True):
            key.revoked_at = now
            key.save(update_fields=["revoked_at"])
            count += 1
        self.message_user(request, f"Revoked {count} key(s).")
