"""The pipeline hook: after an audit finished, queue its shadow analysis (sampled per
candidate) as a separate low-priority task. Which candidates are in shadow is read at
most once per `CACHE_S` per process (cleared when this process saves a candidate)."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

from analyzers.models import CandidateConfig
from audits.shadow.tasks import shadow_audit

logger = logging.getLogger(__name__)

CACHE_S = 2.0

_lock = threading.Lock()
_cache: tuple[float, list[tuple[int, float]]] | None = None


def shadow_targets() -> list[tuple[int, float]]:
    """(id, sample rate) of each candidate in shadow."""
    global _cache
    now = time.monotonic()
    cached = _cache
    if cached is not None and cached[0] > now:
        return cached[1]
    targets = list(
        CandidateConfig.objects.filter(status=CandidateConfig.Status.SHADOW)
        .order_by("id")
        .values_list("id", "shadow_sample_rate")
    )
    with _lock:
        _cache = (now + CACHE_S, targets)
    return targets


def invalidate(**kwargs: Any) -> None:
    global _cache
    with _lock:
        _cache = None


def sampled(targets: list[tuple[int, float]]) -> list[int]:
    return [pk for pk, rate in targets if rate >= 1.0 or random.random() < rate]


def after_audit_finished(audit_id: str) -> None:
    """Queue the audit's shadow analysis when a candidate samples it; never fails the audit."""
    try:
        chosen = sampled(shadow_targets())
        if chosen:
            shadow_audit.enqueue(str(audit_id), chosen)
    except Exception:
        logger.exception("could not queue the shadow analysis of audit %s", audit_id)


def on_audit_finished(sender: Any, audit_id: str, **kwargs: Any) -> None:
    after_audit_finished(audit_id)
