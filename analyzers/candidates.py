"""Candidate configurations: tried in shadow, promoted on evidence, and the history to undo.

A candidate is a whole configuration file (the schema of PUT /api/config), validated as
PUT validates it. At most `AUDITOR_MAX_SHADOW_CANDIDATES` are in shadow at once. Promoting
one, or restoring an earlier version, goes through `save_config` like PUT /api/config, and
the change log (`ConfigChange`) keeps who did it, why and on what evidence. What a
candidate would have done to audits (shadow results, the comparison, reviewers'
verdicts) lives with the audits (`audits.shadow`); this module is the configuration side.
"""

from __future__ import annotations

import copy
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.utils import timezone

from analyzers.engine.config import AuditorConfig
from analyzers.proxy_config import SECTION as PROXY_SECTION

from .config_store import (
    ConfigError,
    base_registry,
    config_to_dict,
    get_registry,
    parse_config,
    save_config,
)
from .engine.registry import Registry
from .models import CandidateConfig, ConfigChange

Status = CandidateConfig.Status
MAX_NAME = 200
HISTORY_LIMIT = 100


class CandidateLimit(Exception):
    """As many candidates are in shadow as allowed."""


class CandidateClosed(Exception):
    """The candidate was promoted or discarded already."""


class NotRestorable(Exception):
    """A change log entry without a whole configuration to go back to."""


def max_shadow() -> int:
    return max(1, int(settings.AUDITOR_MAX_SHADOW_CANDIDATES))


def normalized(data: dict[str, Any]) -> dict[str, Any]:
    """The configuration file validated (ConfigError naming the fields) and written out in
    full, as GET /api/config would show it once saved."""
    config, judges = parse_config(data)
    out = config_to_dict(config, judges or None)
    if data.get(PROXY_SECTION) is not None:
        out[PROXY_SECTION] = copy.deepcopy(data[PROXY_SECTION])
    return out


def create_candidate(
    *,
    name: str,
    config: dict[str, Any],
    sample_rate: float = 1.0,
    judged: bool = False,
    actor: str = "",
) -> CandidateConfig:
    """A new candidate in shadow; CandidateLimit when `max_shadow()` already are."""
    name = (name or "").strip()
    if not name:
        raise ConfigError({"name": ["required"]})
    stored = normalized(config)
    with transaction.atomic():
        # Counted and created in one transaction: concurrent creations serialise on the
        # write (SQLite) or may both pass the count (PostgreSQL: one more at worst).
        if CandidateConfig.objects.filter(status=Status.SHADOW).count() >= max_shadow():
            raise CandidateLimit(
                f"{max_shadow()} candidates are in shadow already: discard or promote one"
            )
        return CandidateConfig.objects.create(
            name=name[:MAX_NAME],
            config=stored,
            shadow_sample_rate=sample_rate,
            shadow_judged=judged,
            created_by=actor[:200],
        )


def shadow_candidates() -> list[CandidateConfig]:
    return list(CandidateConfig.objects.filter(status=Status.SHADOW).order_by("id"))


def candidate_to_dict(candidate: CandidateConfig, *, with_config: bool = True) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": candidate.pk,
        "name": candidate.name,
        "status": candidate.status,
        "shadow_sample_rate": candidate.shadow_sample_rate,
        "shadow_judged": candidate.shadow_judged,
        "shadow_skipped": candidate.shadow_skipped,
        "created_by": candidate.created_by,
        "created_at": candidate.created_at.isoformat(),
        "finished_at": candidate.finished_at.isoformat() if candidate.finished_at else None,
        "replay": {
            "status": candidate.replay_status or None,
            "done": candidate.replay_done,
            "total": candidate.replay_total,
            "judged": candidate.replay_judged,
            "error": candidate.replay_error or None,
        },
    }
    if with_config:
        data["config"] = candidate.config
    return data


def discard(candidate: CandidateConfig) -> CandidateConfig:
    """Out of shadow for good (its shadow results stay until it is deleted)."""
    if candidate.status == Status.PROMOTED:
        raise CandidateClosed("a promoted candidate is the configuration: restore another")
    if candidate.status == Status.SHADOW:
        candidate.status = Status.DISCARDED
        candidate.finished_at = timezone.now()
        candidate.save(update_fields=["status", "finished_at"])
    return candidate


# --- what a candidate runs ---------------------------------------------------------------


def engine_config(candidate: CandidateConfig) -> tuple[AuditorConfig, Registry]:
    """The candidate's engine configuration and registry (its own custom judges)."""
    config, judges = parse_config(candidate.config)
    return config, get_registry(judges or [])


def judged_ids(config: AuditorConfig, registry: Registry, judges: list[str]) -> set[str]:
    """Analyzers that may call a model: custom judges, and those with a `use_model`
    setting (bias, tone)."""
    ids = set(judges)
    for analyzer_id in set(config.analyzers) | set(base_registry().ids()):
        analyzer = registry.get(analyzer_id)
        if analyzer is not None and "use_model" in getattr(analyzer.Settings, "model_fields", {}):
            ids.add(analyzer_id)
    return ids


def runnable(
    candidate: CandidateConfig, *, judged: bool
) -> tuple[AuditorConfig, Registry, set[str]]:
    """The candidate's engine configuration, its registry, and the analyzers left out: its
    judged ones unless `judged` (they did not run, so a comparison leaves them out)."""
    config, registry = engine_config(candidate)
    if judged:
        return config, registry, set()
    judges = [
        j.get("analyzer_id")
        for j in candidate.config.get("custom_judges") or []
        if isinstance(j, dict)
    ]
    left_out = judged_ids(config, registry, [j for j in judges if isinstance(j, str)])
    analyzers = dict(config.analyzers)
    for analyzer_id in left_out:
        analyzers[analyzer_id] = {**analyzers.get(analyzer_id, {}), "enabled": False}
    return config.model_copy(update={"analyzers": analyzers}), registry, left_out


# --- promotion and history ---------------------------------------------------------------


def _save_whole(data: dict[str, Any], **kwargs: Any) -> None:
    """Save a whole configuration file as PUT /api/config does (its custom judges and proxy
    section replaced too: none given means none)."""
    judges = data.get("custom_judges")
    save_config(
        data,
        custom_judges=judges if judges is not None else [],
        proxy=data.get(PROXY_SECTION) or {},
        **kwargs,
    )


def promote(
    candidate: CandidateConfig,
    *,
    actor: str,
    reason: str = "",
    evidence: dict[str, Any] | None = None,
    user: Any = None,
) -> ConfigChange | None:
    """Make the candidate the active configuration (save_config, as PUT /api/config) and
    record who, why and on what evidence. The caller decides whether the evidence allows."""
    if candidate.status != Status.SHADOW:
        raise CandidateClosed(f"the candidate is {candidate.status}")
    with transaction.atomic():
        _save_whole(
            candidate.config,
            actor=actor,
            source="candidate",
            user=user,
            note={"reason": reason, "candidate": candidate, "evidence": evidence or {}},
        )
        candidate.status = Status.PROMOTED
        candidate.finished_at = timezone.now()
        candidate.save(update_fields=["status", "finished_at"])
    return ConfigChange.objects.filter(candidate=candidate).order_by("-id").first()


def restore(version: int, *, actor: str, reason: str = "", user: Any = None) -> ConfigChange:
    """Make the configuration what it was after change `version` (a new change, recorded
    with `restored_from`); NotRestorable for an entry without a whole configuration."""
    change = ConfigChange.objects.filter(pk=version).first()
    if change is None:
        raise ConfigChange.DoesNotExist(version)
    if not isinstance(change.after, dict) or "analyzers" not in change.after:
        raise NotRestorable(
            f"version {version} ({change.source}) recorded one row, not a whole configuration"
        )
    _save_whole(
        change.after,
        actor=actor,
        source="restore",
        user=user,
        note={"reason": reason, "evidence": {"restored_from": change.pk}},
    )
    return ConfigChange.objects.order_by("-id").first()


def history(limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
    """The configuration's versions, newest first (a version is a change log entry)."""
    rows = (
        ConfigChange.objects.order_by("-id")
        .defer("before", "after", "diff")
        .annotate(
            restorable=ExpressionWrapper(Q(after__has_key="analyzers"), output_field=BooleanField())
        )[: max(1, min(limit, HISTORY_LIMIT))]
    )
    return [
        {
            "version": row.pk,
            "created_at": row.created_at.isoformat(),
            "actor": row.actor,
            "source": row.source,
            "summary": row.summary,
            "reason": row.reason,
            "candidate": row.candidate_id,
            "evidence": row.evidence,
            "restorable": bool(row.restorable),
        }
        for row in rows
    ]
