"""What runs in an analysis process (audits.execution.processes starts them).

A spawned child unpickles `setup`, its initializer, before Django is set up: this module
imports nothing that needs the app registry at import, and the work functions import the
analysis when they run.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from django.db import close_old_connections, connections

from analyzers import lock_wait
from audits import events
from audits.execution import heap, people_first, workers

logger = logging.getLogger(__name__)

ORPHAN_CHECK_S = 1.0


# --- a child -----------------------------------------------------------------------------

_sink: list[dict[str, Any]] = []
_watched: frozenset[str] = frozenset()


def _capture(event: dict[str, Any]) -> None:
    if event.get("type") in events.FEED_EVENTS or str(event.get("audit_id")) in _watched:
        _sink.append(event)  # list.append: safe from the engine loop's thread


def setup(
    settings_module: str,
    databases: dict[str, str],
    parent: int,
    making_way: tuple[Any, Any, int],
    requests_waiting: Any,
) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    # A child analyses in its own threads: its task backend, made as Django starts, must
    # not start children of its own.
    os.environ["AUDITOR_ANALYSIS_PROCESSES"] = "0"
    from django.conf import settings

    for alias, name in databases.items():  # the parent's (a test run's database, say)
        if alias in settings.DATABASES:
            settings.DATABASES[alias]["NAME"] = name
    import django

    django.setup()
    nice = getattr(settings, "AUDITOR_ANALYSIS_NICE", 0)
    if nice > 0:
        os.nice(nice)
    events.capture(_capture, lambda audit_id: audit_id in _watched)
    waiting, numbers, how_many = making_way
    with numbers.get_lock():
        number, numbers.value = numbers.value, numbers.value + 1
    if number < how_many:
        people_first.follow(waiting)
    lock_wait.defer_to(requests_waiting)
    threading.Thread(
        target=_exit_when_orphaned, args=(parent,), name="orphan-check", daemon=True
    ).start()
    heap.settle("start")


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK_S)
    os._exit(0)


def warm() -> int:
    """In a new child: what the first audit would load (the registry, the configuration,
    the engine's modules, a database connection)."""
    from analyzers.config_store import current_registry, load_config  # deferred: see above

    current_registry()
    load_config()
    workers.keep_connections()
    connections["default"].ensure_connection()
    time.sleep(0.2)  # held, so that the other warm-ups start processes of their own
    return os.getpid()


def execute_batch(run_ids: list[str], watched: list[str]):
    """In a child: the batch's outcome and the events it captured."""
    global _watched
    from audits.execution import execute  # deferred: needs the app registry (see above)

    _sink.clear()
    _watched = frozenset(watched)
    workers.keep_connections()
    close_old_connections()
    try:
        outcome = execute.execute_runs(run_ids)
    finally:
        close_old_connections()
    heap.after_analysis()
    captured = list(_sink)
    _sink.clear()
    return outcome, captured
