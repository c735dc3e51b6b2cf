"""The configuration in the database <-> the engine's `AuditorConfig` (docs/reference/contract.md section 5).

`load_config()` builds the engine configuration from the rows (cached per process, keyed
by the latest `ConfigChange` so other processes see changes too); `save_config()` replaces
the rows from a configuration and records who changed what. Every other path that edits
configuration rows (the admin, the dashboard) wraps its writes in `recording_change()`.
"""

from __future__ import annotations

import contextvars
import copy
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.db.models.signals import post_delete, post_save
from pydantic import ValidationError

from analyzers.engine.builtin.custom_judge import judge_from_dict
from analyzers.engine.config import AUDITOR_KEYS, AuditorConfig, is_valid_threshold
from analyzers.engine.registry import Registry, build_registry
from analyzers.proxy_config import SECTION as PROXY_SECTION
from analyzers.proxy_config import ProxyConfig, parse_proxy, proxy_problems, stored_proxy

from .models import (
    AllowedHost,
    AnalyzerConfig,
    Brand,
    ConfigChange,
    CustomJudge,
    GlobalSettings,
    KnownCustomer,
    LLMProvider,
    PromptLeakPattern,
)
from .policy import configuration_problems

logger = logging.getLogger(__name__)

PROMPT_LEAK_ID = "prompt_leak"
CONFIG_MODELS = (
    GlobalSettings,
    Brand,
    LLMProvider,
    AnalyzerConfig,
    AllowedHost,
    KnownCustomer,
    PromptLeakPattern,
    CustomJudge,
)

# Configuration keys with their own columns; any other key goes to the `extra` JSON.
TOP_LEVEL_COLUMNS = (
    "threshold",
    "max_concurrency",
    "analyzer_timeout_s",
    "analyzers",
    "allowed_hosts",
    "brand",
    "known_customers",
    "llm",
)
LLM_COLUMNS = ("base_url", "model", "api_key_env", "timeout_s", "max_concurrency", "max_retries")

_cache_lock = threading.Lock()
_cache: dict[str, Any] = {}
_recording: contextvars.ContextVar[bool] = contextvars.ContextVar("config_recording", default=False)


class ConfigError(ValueError):
    """A configuration that does not validate; `errors` maps a field path to messages."""

    def __init__(self, errors: dict[str, list[str]]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))


# --- registry ---------------------------------------------------------------------------


def base_registry() -> Registry:
    """Built-ins, AUDITOR_EXTRA_ANALYZERS and entry points (built once per process)."""
    with _cache_lock:
        reg = _cache.get("registry")
        if reg is None:
            reg = build_registry(settings.AUDITOR_EXTRA_ANALYZERS)
            _cache["registry"] = reg
        return reg


def get_registry(custom_judges: list[dict[str, Any]] | None = None) -> Registry:
    """The base registry plus the custom judges (from the database unless given)."""
    base = base_registry()
    if custom_judges is None:
        custom_judges = [j.to_dict() for j in CustomJudge.objects.filter(enabled=True)]
    if not custom_judges:
        return base
    registry = Registry(base)
    for data in custom_judges:
        if not data.get("enabled", True):
            continue
        try:
            registry.add(judge_from_dict(data))
        except Exception:
            logger.warning("custom judge %r is invalid", data.get("analyzer_id"), exc_info=True)
    return registry


def validate_analyzer_settings(
    analyzer_id: str, raw: dict[str, Any], registry: Registry | None = None
) -> list[str]:
    """Messages for `raw` against the analyzer's own Settings model; [] when valid or unknown."""
    analyzer = (registry or base_registry()).get(analyzer_id)
    if analyzer is None:
        return []
    data = {k: v for k, v in raw.items() if k not in AUDITOR_KEYS}
    if raw.get("threshold") is not None and not is_valid_threshold(raw["threshold"]):
        return ["threshold: must be a number from 0 to 1"]
    try:
        analyzer.parse_settings(data)
    except ValidationError as exc:
        return [
            f"{'.'.join(str(p) for p in err['loc']) or analyzer_id}: {err['msg']}"
            for err in exc.errors()
        ]
    except Exception as exc:  # a third-party parse_settings may raise anything
        return [str(exc)]
    return []


# --- reading ----------------------------------------------------------------------------


def _current_version() -> int:
    return ConfigChange.objects.aggregate(v=Max("id"))["v"] or 0


def _build_config() -> AuditorConfig:
    glob = GlobalSettings.load()
    brand = Brand.load()
    llm = LLMProvider.load()
    analyzers: dict[str, dict[str, Any]] = {}
    for row in AnalyzerConfig.objects.all():
        analyzers[row.analyzer_id] = {"enabled": row.enabled, **(row.settings or {})}
    patterns = list(PromptLeakPattern.objects.values_list("pattern", flat=True))
    if patterns:
        analyzers.setdefault(PROMPT_LEAK_ID, {"enabled": True})["patterns"] = patterns
    return AuditorConfig.model_validate(
        {
            **{k: v for k, v in (glob.extra or {}).items() if k != PROXY_SECTION},
            "threshold": glob.threshold,
            "max_concurrency": glob.max_concurrency,
            "analyzer_timeout_s": glob.analyzer_timeout_s,
            "analyzers": analyzers,
            "allowed_hosts": list(AllowedHost.objects.values_list("host", flat=True)),
            "brand": {"name": brand.name, "title_suffix": brand.title_suffix},
            "known_customers": [
                {"name": c.name, "slug": c.slug, "aliases": c.aliases, "facts": c.facts}
                for c in KnownCustomer.objects.all()
            ],
            "llm": {
                **(llm.extra or {}),
                "base_url": llm.base_url or None,
                "model": llm.model or None,
                "api_key_env": llm.api_key_env,
                "timeout_s": llm.timeout_s,
                "max_concurrency": llm.max_concurrency,
                "max_retries": llm.max_retries,
            },
        }
    )


# Other processes' changes are noticed within this many seconds (one cheap query).
VERSION_CHECK_INTERVAL_S = 1.0


def _cached() -> tuple[AuditorConfig, dict[str, Any]]:
    """(config, its JSON) from the cache, rebuilt when the change log moved on."""
    now = time.monotonic()
    with _cache_lock:
        cached = _cache.get("config")
    if cached is not None and now - cached[3] < VERSION_CHECK_INTERVAL_S:
        return cached[1], cached[2]
    version = _current_version()
    if cached is not None and cached[0] == version:
        with _cache_lock:
            _cache["config"] = (version, cached[1], cached[2], now)
        return cached[1], cached[2]
    config = _build_config()
    snapshot = config_to_dict(config)
    with _cache_lock:
        _cache["config"] = (version, config, snapshot, now)
    return config, snapshot


def config_version() -> int:
    """The latest configuration change's id: cheap (re-read at most every
    VERSION_CHECK_INTERVAL_S, or after a change in this process)."""
    now = time.monotonic()
    with _cache_lock:
        cached = _cache.get("config")
    if cached is not None and now - cached[3] < VERSION_CHECK_INTERVAL_S:
        return cached[0]
    _cached()
    with _cache_lock:
        return _cache["config"][0]


def current_registry() -> Registry:
    """`get_registry()` (custom judges from the database) cached per configuration version."""
    version = config_version()
    base = base_registry()
    with _cache_lock:
        cached = _cache.get("current_registry")
    if cached is not None and cached[0] == version and cached[1] is base:
        return cached[2]
    registry = get_registry()
    with _cache_lock:
        _cache["current_registry"] = (version, base, registry)
    return registry


def load_config() -> AuditorConfig:
    """The engine configuration from the database (cached until the next change)."""
    if _recording.get():
        return _build_config()
    return _cached()[0].model_copy(deep=True)


def load_config_with_snapshot() -> tuple[AuditorConfig, dict[str, Any]]:
    """The configuration and a fresh copy of its JSON (stored with every audit)."""
    if _recording.get():
        config = _build_config()
        return config, config_to_dict(config)
    config, snapshot = _cached()
    return config, copy.deepcopy(snapshot)


def custom_judges_data() -> list[dict[str, Any]]:
    return [j.to_dict() for j in CustomJudge.objects.all()]


def config_to_dict(config: AuditorConfig, custom_judges: list[dict] | None = None) -> dict:
    """The configuration file JSON; `custom_judges` only when there are any."""
    data = config.model_dump(mode="json")
    if custom_judges:
        data["custom_judges"] = custom_judges
    return data


def export_config() -> dict[str, Any]:
    return _full_dict(load_config())


def load_proxy_config() -> ProxyConfig:
    """The `proxy` section (analyzers/proxy_config.py), stored with the global settings."""
    return stored_proxy(GlobalSettings.load().extra)


def _full_dict(config: AuditorConfig) -> dict[str, Any]:
    """The configuration file: the engine's configuration, custom judges, the proxy."""
    data = config_to_dict(config, custom_judges_data())
    data[PROXY_SECTION] = load_proxy_config().model_dump(mode="json")
    return data


def invalidate_cache(**kwargs: Any) -> None:
    with _cache_lock:
        _cache.pop("config", None)
        _cache.pop("current_registry", None)


# --- writing ----------------------------------------------------------------------------


def parse_config(data: dict[str, Any]) -> tuple[AuditorConfig, list[dict] | None]:
    """Validate the configuration file JSON; raise ConfigError naming the fields."""
    if not isinstance(data, dict):
        raise ConfigError({"__root__": ["the configuration must be a JSON object"]})
    data = dict(data)
    judges = data.pop("custom_judges", None)
    proxy_errors = proxy_problems(data.pop(PROXY_SECTION, None))
    try:
        config = AuditorConfig.model_validate(data)
    except ValidationError as exc:
        errors: dict[str, list[str]] = {}
        for err in exc.errors():
            path = ".".join(str(p) for p in err["loc"]) or "__root__"
            errors.setdefault(path, []).append(err["msg"])
        raise ConfigError(errors) from None
    errors = dict(proxy_errors)
    if judges is not None:
        if not isinstance(judges, list) or not all(isinstance(j, dict) for j in judges):
            errors["custom_judges"] = ["must be a list of objects"]
        else:
            for i, judge in enumerate(judges):
                for field in ("analyzer_id", "name", "prompt_template"):
                    if not isinstance(judge.get(field), str) or not judge.get(field):
                        errors.setdefault(f"custom_judges.{i}.{field}", []).append("required")
    registry = base_registry()
    judge_ids = _judge_ids(judges)
    for analyzer_id, section in config.analyzers.items():
        if registry.get(analyzer_id) is None and analyzer_id not in judge_ids:
            errors[f"analyzers.{analyzer_id}"] = [unknown_analyzer_message(analyzer_id, registry)]
            continue
        messages = validate_analyzer_settings(analyzer_id, section, registry)
        if messages:
            errors[f"analyzers.{analyzer_id}"] = messages
        if "enabled" in section and not isinstance(section["enabled"], bool):
            errors.setdefault(f"analyzers.{analyzer_id}.enabled", []).append("must be a boolean")
    for path, messages in configuration_problems(config).items():
        errors.setdefault(path, []).extend(messages)
    if errors:
        raise ConfigError(errors)
    return config, judges


def _judge_ids(judges: Any) -> set[str]:
    """Custom judge ids: those of the file when it has `custom_judges`, else the stored ones."""
    if isinstance(judges, list):
        return {
            j["analyzer_id"]
            for j in judges
            if isinstance(j, dict) and isinstance(j.get("analyzer_id"), str)
        }
    return set(CustomJudge.objects.values_list("analyzer_id", flat=True))


def unknown_analyzer_message(analyzer_id: str, registry: Registry) -> str:
    return (
        f"unknown analyzer {analyzer_id!r}; registered: {', '.join(sorted(registry.ids()))} "
        "(and custom judges)"
    )


def _diff(before: Any, after: Any, path: str = "") -> dict[str, list[Any]]:
    if isinstance(before, dict) and isinstance(after, dict):
        out: dict[str, list[Any]] = {}
        for key in sorted(set(before) | set(after), key=str):
            sub = f"{path}.{key}" if path else str(key)
            out.update(_diff(before.get(key), after.get(key), sub))
        return out
    return {} if before == after else {path or "__root__": [before, after]}


@contextmanager
def recording_change(
    *, actor: str, source: str, user: Any = None, note: dict[str, Any] | None = None
) -> Iterator[None]:
    """Record one ConfigChange for whatever the block changes (nothing when nothing did);
    `note` adds its `reason`, `candidate` and `evidence` (a promotion, a restore)."""
    if _recording.get():  # nested: the outer block records
        yield
        return
    token = _recording.set(True)
    try:
        with transaction.atomic():
            before = _full_dict(_build_config())
            yield
            after = _full_dict(_build_config())
            diff = _diff(before, after)
            if diff:
                ConfigChange.objects.create(
                    actor=actor[:200],
                    user=user if getattr(user, "pk", None) else None,
                    source=source[:50],
                    summary=", ".join(sorted(diff))[:1000],
                    diff=diff,
                    before=before,
                    after=after,
                    **(note or {}),
                )
    finally:
        _recording.reset(token)
    invalidate_cache()


def _replace_rows(model, rows: list[dict[str, Any]]) -> None:
    model.objects.all().delete()
    model.objects.bulk_create([model(position=i, **row) for i, row in enumerate(rows)])


def save_config(
    config: AuditorConfig | dict[str, Any],
    *,
    actor: str,
    source: str = "api",
    user: Any = None,
    custom_judges: list[dict[str, Any]] | None = None,
    proxy: ProxyConfig | dict[str, Any] | None = None,
    note: dict[str, Any] | None = None,
) -> AuditorConfig:
    """Replace the stored configuration with `config` and record the change (with `note`:
    see `recording_change`).

    `custom_judges=None` leaves the custom judges as they are; so does `proxy=None` the
    proxy section, except that a configuration file (a dict) without one sets the defaults.
    """
    if isinstance(config, dict):
        if proxy is None:
            proxy = config.get(PROXY_SECTION) or {}
        config, parsed_judges = parse_config(config)
        if custom_judges is None:
            custom_judges = parsed_judges
    if proxy is not None and not isinstance(proxy, ProxyConfig):
        try:
            proxy = parse_proxy(proxy)
        except ValueError:
            raise ConfigError(proxy_problems(proxy)) from None
    with recording_change(actor=actor, source=source, user=user, note=note):
        top = config.model_dump(mode="json")
        for key in TOP_LEVEL_COLUMNS:
            top.pop(key)
        if proxy is None:
            proxy = load_proxy_config()
        top[PROXY_SECTION] = proxy.model_dump(mode="json")
        GlobalSettings.objects.update_or_create(
            pk=1,
            defaults={
                "threshold": config.threshold,
                "max_concurrency": config.max_concurrency,
                "analyzer_timeout_s": config.analyzer_timeout_s,
                "extra": top,
            },
        )
        Brand.objects.update_or_create(pk=1, defaults=config.brand.model_dump())
        llm = config.llm.model_dump(mode="json")
        LLMProvider.objects.update_or_create(
            pk=1,
            defaults={
                **{k: llm.pop(k) for k in LLM_COLUMNS if k in llm},
                "extra": llm,
            },
        )
        patterns: list[str] = []
        AnalyzerConfig.objects.exclude(analyzer_id__in=list(config.analyzers)).delete()
        for position, (analyzer_id, section) in enumerate(config.analyzers.items()):
            section = dict(section)
            enabled = bool(section.pop("enabled", True))
            if analyzer_id == PROMPT_LEAK_ID and "patterns" in section:
                patterns = [str(p) for p in section.pop("patterns") or []]
            AnalyzerConfig.objects.update_or_create(
                analyzer_id=analyzer_id,
                defaults={"enabled": enabled, "settings": section, "position": position},
            )
        _replace_rows(PromptLeakPattern, [{"pattern": p} for p in patterns])
        _replace_rows(AllowedHost, [{"host": h} for h in config.allowed_hosts])
        _replace_rows(KnownCustomer, [c.model_dump() for c in config.known_customers])
        if custom_judges is not None:
            CustomJudge.objects.all().delete()
            for judge in custom_judges:
                fields = {
                    k: judge[k]
                    for k in (
                        "analyzer_id",
                        "name",
                        "category",
                        "prompt_template",
                        "mapping",
                        "enabled",
                        "settings",
                    )
                    if k in judge
                }
                CustomJudge.objects.create(**fields)
    return load_config()


def _log_unrecorded(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A configuration row changed outside `recording_change` (shell, scripts): log it anyway."""
    invalidate_cache()
    if _recording.get() or kwargs.get("raw"):
        return
    try:
        from django.forms.models import model_to_dict

        deleted = "created" not in kwargs
        ConfigChange.objects.create(
            actor="system",
            source="direct",
            summary=f"{'deleted' if deleted else 'saved'} {sender._meta.verbose_name} {instance}"[
                :1000
            ],
            after=None if deleted else _jsonable(model_to_dict(instance)),
        )
    except Exception:
        logger.warning("could not record a configuration change", exc_info=True)


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(data, default=str))


for _model in CONFIG_MODELS:
    post_save.connect(_log_unrecorded, sender=_model, dispatch_uid=f"cfg-save-{_model.__name__}")
    post_delete.connect(_log_unrecorded, sender=_model, dispatch_uid=f"cfg-del-{_model.__name__}")


def option_errors(options: dict[str, dict]) -> list[dict[str, Any]]:
    """What is wrong with an audit's per-request analyzer overrides (`options`), as the API
    reports it (`loc`, `msg`); empty when they are valid."""
    if not options:
        return []
    registry = get_registry()
    config = load_config()
    errors = []
    for analyzer_id, overrides in options.items():
        analyzer = registry.get(analyzer_id)
        if analyzer is None:
            errors.append(
                {
                    "loc": ["body", "options", analyzer_id],
                    "msg": f"unknown analyzer {analyzer_id!r}",
                }
            )
            continue
        locked = sorted(analyzer.config_only_settings.intersection(overrides))
        if locked:
            errors.append(
                {
                    "loc": ["body", "options", analyzer_id],
                    "msg": f"{', '.join(locked)} can only be set in the configuration",
                }
            )
            continue
        merged = {**config.analyzer_section(analyzer_id), **overrides}
        for message in validate_analyzer_settings(analyzer_id, merged, registry):
            errors.append({"loc": ["body", "options", analyzer_id], "msg": message})
    return errors
