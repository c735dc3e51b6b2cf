"""django-tasks-db's `db_worker`, plus recovery and batches: nothing is left pending
without a flag, and a deep queue is taken a few tasks at a time.

At start and every `AUDITOR_RECOVERY_INTERVAL` s the worker takes over the task rows and
audit runs of dead workers and re-queues pending runs that no queue holds; while it runs a
task its heartbeat keeps the rows fresh (see audits.execution.recovery). Its database connection
stays open between tasks (AUDITOR_TASK_CONN_MAX_AGE). It claims up to `--claim` ready rows
in one transaction (one UPDATE, not a `save()` per row); consecutive calls of a task with
a `batch` attribute (`audits.execution.tasks.run_audit`) run as one batch (`services.execute_runs`:
one transaction stores their reports) and their rows are marked successful together (one
UPDATE per distinct return value, in one transaction: the stock worker's `set_successful`
is a write transaction per row). A lost database connection (a restarted or failed-over
PostgreSQL) never ends the worker: it closes its connections, waits (0.5 s, doubling to
`RECONNECT_MAX_S`) and claims again; the rows of the batch it was running stay RUNNING
with no heartbeat, so recovery takes them over (their runs were stored in one transaction
or not at all: never twice). Same options as the stock command otherwise, but its
default verbosity leaves the `django.tasks` logger at `AUDITOR_TASK_LOG_LEVEL` (the stock
command set it to INFO: two log records per audit, ~3% of the worker's CPU).
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from typing import Any

from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
    transaction,
)
from django.tasks.base import TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django_tasks_db.management.commands import db_worker as stock
from django_tasks_db.models import DBTaskResult
from django_tasks_db.utils import exclusive_transaction, is_locked_database_exception, retry

from audits.execution import heap, recovery
from audits.execution.workers import keep_connections

logger = logging.getLogger("django_tasks_db")

# What a lost connection raises (psycopg's AdminShutdown, "the connection is closed", a
# refused reconnect); "database is locked" is one too, and is waited out the same way.
CONNECTION_ERRORS = (OperationalError, InterfaceError)
RECONNECT_MAX_S = 10.0


def _forget(rows: list[DBTaskResult]) -> None:
    """Stop the heartbeat of rows left unfinished: recovery takes them over. Nothing here
    may need the database (the signal's receivers may: their errors are only logged)."""
    for row in rows:
        try:
            result = row.task_result
            sender = type(row.task.get_backend())
        except Exception:
            continue
        task_finished.send_robust(sender=sender, task_result=result)


class BatchingWorker(stock.Worker):
    claim_size = 32

    def _ready(self):
        tasks = DBTaskResult.objects.ready().filter(backend_name=self.backend_name)
        if not self.process_all_queues:
            tasks = tasks.filter(queue_name__in=self.queue_names)
        if self.excluded_queue_names:
            tasks = tasks.exclude(queue_name__in=self.excluded_queue_names)
        return tasks

    def _claim(self) -> list[DBTaskResult] | None:
        """Up to `claim_size` ready audit rows (priority 0 and up, the highest first),
        claimed; when none is ready, one background row (shadow analysis, a replay step:
        audits.execution.background), so a claim never holds audits behind one. None when
        the database was locked."""
        tasks = self._ready()
        try:
            with exclusive_transaction(tasks.db):
                rows = list(
                    tasks.filter(priority__gte=0).select_for_update(skip_locked=True)[
                        : self.claim_size
                    ]
                )
                if not rows:
                    rows = list(
                        tasks.filter(priority__lt=0).select_for_update(skip_locked=True)[:1]
                    )
                self._mark_claimed(rows)
        except OperationalError as exc:
            if is_locked_database_exception(exc):
                return None
            raise
        return rows

    def _mark_claimed(self, rows: list[DBTaskResult]) -> None:
        """What `DBTaskResult.claim` writes, for all rows: one UPDATE per distinct list of
        worker ids (one for fresh rows)."""
        now = timezone.now()
        groups: dict[str, list[DBTaskResult]] = defaultdict(list)
        for row in rows:
            row.status = TaskResultStatus.RUNNING
            row.started_at = now
            row.worker_ids = [*row.worker_ids, self.worker_id]
            groups[json.dumps(row.worker_ids)].append(row)
        for same in groups.values():
            DBTaskResult.objects.filter(pk__in=[row.pk for row in same]).update(
                status=TaskResultStatus.RUNNING, started_at=now, worker_ids=same[0].worker_ids
            )

    def _mark_successful(self, group: list[DBTaskResult], values: list[Any]) -> None:
        """What `set_successful` writes, for the rows of a batch in one transaction (one
        UPDATE per distinct return value); row by row when that fails."""
        now = timezone.now()
        groups: dict[str, list[DBTaskResult]] = defaultdict(list)
        for row, value in zip(group, values, strict=True):
            row.status = TaskResultStatus.SUCCESSFUL
            row.finished_at = now
            row.return_value = value
            row.exception_class_path = row.traceback = ""
            groups[json.dumps(value, sort_keys=True, default=str)].append(row)

        @retry()
        def write() -> None:
            with transaction.atomic(using=group[0]._state.db):
                for same in groups.values():
                    DBTaskResult.objects.filter(pk__in=[row.pk for row in same]).update(
                        status=TaskResultStatus.SUCCESSFUL,
                        finished_at=now,
                        return_value=same[0].return_value,
                        exception_class_path="",
                        traceback="",
                    )

        try:
            write()
        except Exception:
            logger.exception("marking %d tasks successful at once failed; one by one", len(group))
            for row, value in zip(group, values, strict=True):
                try:
                    row.set_successful(value)
                except BaseException as exc:
                    row.set_failed(exc)

    def run(self) -> None:
        logger.info(
            "Starting worker worker_id=%s queues=%s (batches of up to %d)",
            self.worker_id,
            ",".join(self.queue_names),
            self.claim_size,
        )
        backoff = 0.5
        while self.running:
            try:
                close_old_connections()
                rows = self._claim()
                if rows:
                    self.run_rows(rows)
            except CONNECTION_ERRORS as exc:
                logger.warning(
                    "worker_id=%s lost the database (%s: %s); again in %.1f s",
                    self.worker_id,
                    type(exc).__name__,
                    exc,
                    backoff,
                )
                connections.close_all()
                time.sleep(backoff)
                backoff = min(backoff * 2, RECONNECT_MAX_S)
                continue
            backoff = 0.5
            if self.batch and rows == []:
                logger.info(
                    "No more tasks to run for worker_id=%s - exiting gracefully.", self.worker_id
                )
                return
            if self.max_tasks is not None and self._run_tasks >= self.max_tasks:
                return
            close_old_connections()
            if self.running and not rows:
                time.sleep(self.interval)

    def run_rows(self, rows: list[DBTaskResult]) -> None:
        group: list[DBTaskResult] = []
        try:
            for row in rows:
                if group and not self._same_batch(group[0], row):
                    self._run_group(group)
                    group = []
                if self._batch_call(row) is not None:
                    group.append(row)
                else:
                    self._run_group(group)
                    group = []
                    self.run_task(row)
            self._run_group(group)
        except CONNECTION_ERRORS:
            _forget(rows)  # this batch's and the unstarted ones: recovery's now
            raise
        finally:
            heap.after_analysis()

    @staticmethod
    def _batch_call(row: DBTaskResult):
        try:
            call = getattr(row.task.func, "batch", None)
        except Exception:  # a bad task path: run_task records it
            return None
        return call if call is not None and not row.args_kwargs.get("kwargs") else None

    @staticmethod
    def _same_batch(a: DBTaskResult, b: DBTaskResult) -> bool:
        return a.task_path == b.task_path

    def _run_group(self, group: list[DBTaskResult]) -> None:
        if not group:
            return
        if len(group) == 1:
            self.run_task(group[0])
            return
        backend_type = type(group[0].task.get_backend())
        results = [row.task_result for row in group]
        self.running_task = True
        try:
            for result in results:
                task_started.send(sender=backend_type, task_result=result)
            try:
                values = self._batch_call(group[0])([list(r.args) for r in results])
            except CONNECTION_ERRORS:
                raise  # not the batch's fault: run_rows leaves it to recovery
            except BaseException as exc:
                for row in group:
                    row.set_failed(exc)
            else:
                self._mark_successful(group, values)
            for row in group:
                task_finished.send(sender=backend_type, task_result=row.task_result)
        finally:
            self.running_task = False
            self._run_tasks += len(group)


class Command(stock.Command):
    help = stock.Command.help + ", taking over the work of dead workers (audits.execution.recovery)"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument(
            "--claim",
            type=int,
            default=BatchingWorker.claim_size,
            help="ready tasks claimed at once (1: one by one)",
        )

    def configure_logging(self, verbosity: int) -> None:
        """The stock levels and handlers, except that verbosity 1 (the default) keeps the
        settings' level of the `django.tasks` logger (AUDITOR_TASK_LOG_LEVEL)."""
        tasks_logger = logging.getLogger(stock.TASKS_LOGGER)
        configured = tasks_logger.level
        super().configure_logging(verbosity)
        if verbosity == 1 and configured != logging.NOTSET:
            tasks_logger.setLevel(configured)

    def handle(self, *args, **options):
        recovery.start()
        if not options.get("batch"):  # a long-lived worker, not one draining the queue once
            heap.settle("start")
        keep_connections()  # one connection for every task (AUDITOR_TASK_CONN_MAX_AGE)
        BatchingWorker.claim_size = max(1, options.pop("claim"))
        stock.Worker = BatchingWorker  # the stock handle() builds the worker
        return super().handle(*args, **options)
