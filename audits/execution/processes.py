"""Audit batches analysed in worker processes, off the web server's interpreter lock.

With the thread backend (`AUDITOR_ANALYSIS_PROCESSES` = N > 0, the backend's `PROCESSES`
option), a task thread that runs `run_audit` hands its run ids to one of N long-lived
child processes and waits (the lock released) for the outcome. Threads stay the
scheduling unit: the backend's queues, batches, `large` lane and results are unchanged,
and at most one batch per task thread is in the children at a time (bounded). The
`large` lane's threads keep analysing in the server (`stay_in_thread`), so huge audits
never hold the children small audits wait for.

- The children (multiprocessing "spawn", so no state of the server is copied) set Django
  up once, on the parent's databases, and keep what a worker thread keeps
  (audits.execution.workers): database connection, engine loop, auditors per configuration.
- Events: a child's channel layer is not the one the pages listen to, so it captures what
  it would publish (`events.capture`): the feed events of every audit, and the progress
  of audits that had a watcher when the batch left. The parent publishes them, in order,
  when the batch returns, and sends `audit_finished` for the complete ones (alerts queue
  their tasks here, on the parent's backend).
- People first (audits.execution.people_first): a child does not share the server's lock; it only
  competes for a core. Enough children to leave a page a core of its own
  (`children_making_way`: one of two on two cores) follow the parent's count of people
  waiting (shared memory) and make way between their audits, as a task thread does (at
  most `MAX_PAUSE_S` per audit); the others go on. `AUDITOR_ANALYSIS_NICE`
  can lower the children's CPU priority (default 0: niced writers starved under other
  load and kept SQLite's write lock while descheduled, so everything waited).
- Nothing lost: the parent's heartbeat covers the runs while a child has them
  (audits.execution.heartbeats). A child that dies (killed, out of memory) breaks the pool: the batch
  fails, the pool is built again for the next batch, and the runs the child had claimed
  stop beating, so the recovery sweep (audits.execution.recovery) re-queues them after
  `AUDITOR_RECOVER_RUNNING_AFTER_S` (failed after `MAX_ATTEMPTS`, as any run).
- A child exits when its parent is gone (checked every `ORPHAN_CHECK_S`).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from analyzers import lock_wait
from audits import events
from audits.execution import child, people_first
from audits.execution.heartbeats import running_run
from audits.signals import send_finished_signal

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_processes = 0  # configured by the thread backend (0: analyse in the task threads)
_executor: ProcessPoolExecutor | None = None
_local = threading.local()


# --- the parent --------------------------------------------------------------------------


def configure(processes: int) -> None:
    """Analyse in `processes` child processes from now on (0: in the calling threads);
    they start now, in the background (Django, the registry: a second or two each)."""
    global _processes
    with _lock:
        changed = _processes != max(0, int(processes))
        _processes = max(0, int(processes))
    if changed and configured():
        threading.Thread(target=_warm_up, name="analysis-processes-start", daemon=True).start()


def _warm_up() -> None:
    try:
        executor = _pool()
        for job in [executor.submit(child.warm) for _ in range(_processes)]:
            job.result()
    except Exception:  # the first batch tries again (and reports)
        logger.warning("analysis processes did not start", exc_info=True)


def configured() -> bool:
    """Whether this thread hands its audits to the children (not in a child itself, nor
    on the `large` lane's threads)."""
    return _processes > 0 and not events.capturing() and not getattr(_local, "stay", False)


def stay_in_thread() -> None:
    """This thread analyses its audits itself (the thread backend's `large` lane: a huge
    audit in the children would hold one of the few that small audits rely on)."""
    _local.stay = True


def execute_runs(run_ids: list[Any]) -> dict[str, str]:
    """`services.execute_runs(run_ids)` in a child process; its events published here."""
    ids = [str(run_id) for run_id in run_ids]
    watched = sorted(events.watched_audits(ids))
    with contextlib.ExitStack() as stack:
        for run_id in ids:
            stack.enter_context(running_run(run_id))  # this process's heartbeat covers them
        outcome, captured = _submit(child.execute_batch, ids, watched)
    _publish(captured)
    return outcome


def _publish(captured: list[dict[str, Any]]) -> None:
    for event in captured:
        events.publish(event)
        if event.get("type") == "audit_finished" and event.get("status") == "complete":
            send_finished_signal(str(event["audit_id"]))


def _submit(fn, *args: Any) -> Any:
    """`fn(*args)` in a child, waited for; a broken pool is dropped for the next call."""
    executor = _pool()
    try:
        return executor.submit(fn, *args).result()
    except BrokenProcessPool:
        logger.error("an analysis process died; its runs are re-queued by the recovery sweep")
        _drop(executor)
        raise


def _pool() -> ProcessPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            from django.db import connections

            databases = {alias: connections[alias].settings_dict["NAME"] for alias in connections}
            context = multiprocessing.get_context("spawn")
            # Which child makes way: each takes the next number when it starts.
            making_way = (
                people_first.shared_count(context),
                context.Value("i", 0),
                children_making_way(_processes, os.cpu_count() or 1),
            )
            _executor = ProcessPoolExecutor(
                max_workers=_processes,
                mp_context=context,
                initializer=child.setup,
                initargs=(
                    os.environ.get("DJANGO_SETTINGS_MODULE", "auditor_site.settings"),
                    databases,
                    os.getpid(),
                    making_way,
                    lock_wait.shared_requests_waiting(context),
                ),
            )
        return _executor


def children_making_way(processes: int, cores: int) -> int:
    """How many children make way for a page: enough that the others and the page's
    thread fit on the cores (2 children on 2 cores: one), so a page gets a core of its
    own without stopping every child."""
    return max(0, processes - (cores - 1))


def _drop(executor: ProcessPoolExecutor) -> None:
    global _executor
    with _lock:
        if _executor is executor:
            _executor = None
    executor.shutdown(wait=False, cancel_futures=True)


def child_pids() -> list[int]:
    """The pids of the running analysis processes (benchmarks, tests)."""
    executor = _executor
    if executor is None:
        return []
    processes = list((executor._processes or {}).values())
    return [p.pid for p in processes if p.pid is not None and p.is_alive()]


def shutdown() -> None:
    """Stop the children (tests; the server simply exits and they follow)."""
    global _executor, _processes
    with _lock:
        executor, _executor, _processes = _executor, None, 0
    if executor is not None:
        executor.shutdown(wait=True, cancel_futures=True)
