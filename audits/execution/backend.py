"""An in-process django.tasks backend: tasks run on a bounded pool of daemon threads.

The default for `make run`: the request that enqueues returns at once and nothing else
needs to run. A process that dies loses its queue, but never an audit: runs are stored
before they are enqueued and `audits.execution.recovery` re-queues what was left behind (its thread
starts with the server, or with the first task here, and sweeps every `SWEEP_INTERVAL`
seconds). `queued_args` tells the sweep which runs this queue already holds.

    TASKS = {"default": {"BACKEND": "audits.execution.backend.ThreadPoolBackend",
                         "OPTIONS": {"MAX_WORKERS": 2, "SWEEP_INTERVAL": 60,
                                     "BATCH_SIZE": 32, "DEEP_BATCH_SIZE": 64}}}

Tasks enqueued on the `large` queue (`task.using(queue_name="large")`: audits of huge
responses) run on their own `LARGE_WORKERS` threads (default 1), so a few of them never
hold every thread while small audits wait.

Background tasks (priority below 0: shadow analysis, replays; audits.execution.background)
run on one thread of their own, one at a time and only while no other task is queued or
running here; the others go first whatever their order of arrival. At most
`MAX_BACKGROUND` (default 10000) wait: past it the oldest is dropped, and its task's
`dropped` attribute, when it has one, is called with the args of the calls dropped (shadow
analysis counts them as skipped).

`PROCESSES` (default 0): when above 0, `run_audit` calls and batches are analysed in that
many long-lived child processes, off this process's interpreter lock; the task threads
hand them over and wait (audits.analysis_processes).

Queues in small batches: a task function with a `batch` attribute (a callable taking
the args lists of several calls and returning their return values, e.g.
`audits.execution.tasks.run_audit_batch`) is called once for every queued call a worker finds, up
to BATCH_SIZE (storing several audits in one transaction costs much less than one
transaction each, also when audits arrive one by one); a lone call runs alone, at once.
Up to DEEP_BATCH_SIZE when the queue is deep and nobody waits for what a longer batch
delays (`_batch_limit`).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections import Counter, OrderedDict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from traceback import format_exception

from django.db import close_old_connections, connections
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.crypto import get_random_string
from django.utils.json import normalize_json

from audits import events
from audits.execution import background, heap, people_first, processes
from audits.execution.workers import keep_connections
from audits.queues import LARGE_QUEUE

logger = logging.getLogger(__name__)


class _Pool:
    """The process-wide state of one backend alias.

    django.tasks keeps backend instances per thread/context (like database connections),
    so the threads, the results and the sweeper live here, once per process.
    """

    def __init__(self, alias: str, max_workers: int, large_workers: int = 1) -> None:
        self.executor = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix=f"tasks-{alias}"
        )
        self.large_workers = large_workers
        self.large = ThreadPoolExecutor(
            max_workers=large_workers,
            thread_name_prefix=f"tasks-{alias}-large",
            initializer=processes.stay_in_thread,  # huge audits stay here
        )
        # Background tasks: one thread, which waits until no other task is queued or running.
        self.background_lane = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"tasks-{alias}-background"
        )
        self.background: deque[TaskResult] = deque()
        self.background_job = False  # a `_run_background` job is submitted
        self.results: OrderedDict[str, TaskResult] = OrderedDict()
        self.pending: deque[TaskResult] = deque()  # queued, in order
        # `_run_next` jobs submitted and not finished (at most one per thread): each takes
        # tasks from `pending` until it is empty, so enqueueing wakes a thread only when
        # one is idle (not one executor job and one thread wake-up per task).
        self.jobs = 0
        self.lock = threading.Lock()
        # (task path, args) of every task queued or running here, counted.
        self.queued: Counter[tuple[str, str]] = Counter()


_pools: dict[str, _Pool] = {}
_pools_lock = threading.Lock()


def _pool_for(alias: str, max_workers: int, large_workers: int = 1) -> _Pool:
    with _pools_lock:
        pool = _pools.get(alias)
        if pool is None:
            pool = _pools[alias] = _Pool(alias, max_workers, large_workers)
        return pool


class ThreadPoolBackend(BaseTaskBackend):
    supports_get_result = True
    supports_priority = True
    counts_audits = True  # audits.execution.background: background tasks wait for audits

    def __init__(self, alias, params):
        super().__init__(alias, params)
        self.max_workers = int(self.options.get("MAX_WORKERS", 2))
        self.sweep_interval = float(self.options.get("SWEEP_INTERVAL", 60))
        self.max_results = int(self.options.get("MAX_RESULTS", 1000))
        self.batch_size = int(self.options.get("BATCH_SIZE", 32))
        self.deep_batch_size = max(self.batch_size, int(self.options.get("DEEP_BATCH_SIZE", 64)))
        self.max_background = max(1, int(self.options.get("MAX_BACKGROUND", 10000)))
        self.worker_id = get_random_string(32)
        children = int(self.options.get("PROCESSES", 0))
        if children:
            processes.configure(children)
        self.queues.add(LARGE_QUEUE)
        self._pool = _pool_for(alias, self.max_workers, int(self.options.get("LARGE_WORKERS", 1)))

    # --- running ---

    def _run_next(self) -> None:
        """One executor job: the queued tasks, in batches of what is queued (or alone),
        until none is left."""
        pool = self._pool
        finished = False
        try:
            while True:
                with pool.lock:
                    if not pool.pending:
                        pool.jobs -= 1
                        finished = True
                        return
                    batch = [pool.pending.popleft()]
                    first = batch[0]
                    batch_call = getattr(first.task.func, "batch", None)
                    if batch_call is not None and not first.kwargs:
                        # Everything queued (a shallow queue too): an idle thread takes
                        # what arrives next, so a lone audit never waits for a batch.
                        size = min(self._batch_limit(len(pool.pending)), 1 + len(pool.pending))
                        while (
                            len(batch) < size
                            and pool.pending
                            and pool.pending[0].task.module_path == first.task.module_path
                            and not pool.pending[0].kwargs
                        ):
                            batch.append(pool.pending.popleft())
                if len(batch) == 1:
                    self._run(first)
                else:
                    self._run_batch(batch, batch_call)
        finally:
            if not finished:  # an error escaped: this job ends, another takes over
                with pool.lock:
                    pool.jobs -= 1
                self._wake()

    def _batch_limit(self, queued: int) -> int:
        """How many queued calls one batch may take: DEEP_BATCH_SIZE when every thread
        can take a batch that size and nobody waits for what it delays (no page watches
        the live feed, where the channel layer can tell, and no page request is under
        way: audits.execution.people_first), else BATCH_SIZE. A deep batch costs less CPU
        per audit (one claim, commit and hand-off fewer), but it holds SQLite's write lock
        and its audits' cards twice as long, which a watcher sees (figures:
        docs/contributing/performance.md). Called with the
        first call of the batch already taken: it never raises."""
        if queued < self.deep_batch_size * self.max_workers:
            return self.batch_size
        try:
            if people_first.someone_waiting() or events.has_watchers(events.ALL_AUDITS_GROUP):
                return self.batch_size
        except Exception:  # a channel layer that cannot be built: as if watched
            logger.exception("could not tell whether the live feed has watchers")
            return self.batch_size
        return self.deep_batch_size

    def _wake(self) -> None:
        """Submit a `_run_next` job when tasks wait and a thread has none."""
        pool = self._pool
        with pool.lock:
            if not pool.pending or pool.jobs >= self.max_workers:
                return
            pool.jobs += 1
        pool.executor.submit(self._run_next)

    def _wake_background(self) -> None:
        pool = self._pool
        with pool.lock:
            if not pool.background or pool.background_job:
                return
            pool.background_job = True
        pool.background_lane.submit(self._run_background)

    def _run_background(self) -> None:
        """The background lane's job: its tasks one at a time, each only once no other
        task is queued or running in this process, until none is left."""
        pool = self._pool
        try:
            while True:
                background.wait_until_idle()
                with pool.lock:
                    if not pool.background:
                        pool.background_job = False
                        return
                    task_result = pool.background.popleft()
                self._run(task_result)
        except BaseException:
            with pool.lock:
                pool.background_job = False
            raise

    def _queue_background(self, results: list[TaskResult]) -> None:
        """Queue background tasks, dropping the oldest past `max_background`."""
        pool = self._pool
        with pool.lock:
            pool.background.extend(results)
            dropped = [
                pool.background.popleft() for _ in range(len(pool.background) - self.max_background)
            ]
        for task_result in dropped:
            self._forget_queued(task_result)
            object.__setattr__(task_result, "status", TaskResultStatus.FAILED)
            object.__setattr__(task_result, "finished_at", timezone.now())
        if dropped:
            logger.warning("background queue full: %d task(s) dropped", len(dropped))
        by_task: dict[str, list[TaskResult]] = {}
        for task_result in dropped:
            by_task.setdefault(task_result.task.module_path, []).append(task_result)
        for same in by_task.values():
            on_drop = getattr(same[0].task.func, "dropped", None)
            try:
                if on_drop is not None:
                    on_drop([list(r.args) for r in same])
            except Exception:
                logger.exception("counting dropped background tasks failed")
        self._wake_background()

    def _run_batch(self, batch: list[TaskResult], batch_call) -> None:
        """Like `_run` for several calls of one task, through the task's `batch` callable."""
        now = timezone.now()
        keep_connections()
        close_old_connections()
        for task_result in batch:
            object.__setattr__(task_result, "status", TaskResultStatus.RUNNING)
            object.__setattr__(task_result, "started_at", now)
            object.__setattr__(task_result, "last_attempted_at", now)
            task_result.worker_ids.append(self.worker_id)
            task_started.send(sender=type(self), task_result=task_result)
        try:
            values = batch_call([list(r.args) for r in batch])
            for task_result, value in zip(batch, values, strict=True):
                object.__setattr__(task_result, "_return_value", normalize_json(value))
                object.__setattr__(task_result, "status", TaskResultStatus.SUCCESSFUL)
        except BaseException as exc:
            logger.exception("batch of %d %s tasks failed", len(batch), batch[0].task.name)
            for task_result in batch:
                task_result.errors.append(
                    TaskError(
                        exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                        traceback="".join(format_exception(exc)),
                    )
                )
                object.__setattr__(task_result, "status", TaskResultStatus.FAILED)
        finally:
            finished = timezone.now()
            try:
                for task_result in batch:
                    object.__setattr__(task_result, "finished_at", finished)
                    self._forget_queued(task_result)
                    task_finished.send(type(self), task_result=task_result)
            finally:
                close_old_connections()
            heap.after_analysis()

    def _run(self, task_result: TaskResult) -> None:
        task = task_result.task
        now = timezone.now()
        object.__setattr__(task_result, "status", TaskResultStatus.RUNNING)
        object.__setattr__(task_result, "started_at", now)
        object.__setattr__(task_result, "last_attempted_at", now)
        task_result.worker_ids.append(self.worker_id)
        keep_connections()  # this worker thread's connections outlive its tasks
        close_old_connections()
        try:
            task_started.send(sender=type(self), task_result=task_result)
            if task.takes_context:
                value = task.call(
                    TaskContext(task_result=task_result), *task_result.args, **task_result.kwargs
                )
            else:
                value = task.call(*task_result.args, **task_result.kwargs)
            object.__setattr__(task_result, "_return_value", normalize_json(value))
            object.__setattr__(task_result, "status", TaskResultStatus.SUCCESSFUL)
        except BaseException as exc:
            logger.exception("task %s failed", task.name)
            task_result.errors.append(
                TaskError(
                    exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                    traceback="".join(format_exception(exc)),
                )
            )
            object.__setattr__(task_result, "status", TaskResultStatus.FAILED)
        finally:
            object.__setattr__(task_result, "finished_at", timezone.now())
            self._forget_queued(task_result)
            try:
                task_finished.send(type(self), task_result=task_result)
            finally:
                # This thread's connections: kept for the next task unless broken or
                # older than AUDITOR_TASK_CONN_MAX_AGE (then closed, as after a request).
                close_old_connections()

    @staticmethod
    def _queued_key(task_result: TaskResult) -> tuple[str, str]:
        return task_result.task.module_path, json.dumps(task_result.args, default=str)

    def _forget_queued(self, task_result: TaskResult) -> None:
        """No longer queued nor running here (an audit task: one fewer counted)."""
        if not background.is_background(task_result.task.priority):
            background.finished()
        key = self._queued_key(task_result)
        with self._pool.lock:
            self._pool.queued[key] -= 1
            if self._pool.queued[key] <= 0:
                del self._pool.queued[key]

    def queued_args(self, module_path: str) -> list[list]:
        """The args of every task of `module_path` queued or running in this process."""
        with self._pool.lock:
            keys = [args for path, args in self._pool.queued if path == module_path]
        return [json.loads(args) for args in keys]

    def enqueue(self, task, args, kwargs):
        return self.enqueue_many(task, [args], kwargs)[0]

    def enqueue_many(self, task, args_list: list, kwargs: dict | None = None) -> list[TaskResult]:
        """`enqueue` for several calls of one task (a batch of audits): one lock, and at
        most one thread woken per idle thread."""
        self.validate_task(task)
        results = [self._new_result(task, args, kwargs or {}) for args in args_list]
        pool = self._pool
        with pool.lock:
            for task_result in results:
                pool.results[task_result.id] = task_result
                pool.queued[self._queued_key(task_result)] += 1
            while len(pool.results) > self.max_results:
                pool.results.popitem(last=False)
        if background.is_background(task.priority):
            for task_result in results:
                task_enqueued.send(type(self), task_result=task_result)
            self._queue_background(results)
            return results
        background.started(len(results))
        for (
            task_result
        ) in results:  # the first starts the recovery sweeper (audits.execution.recovery)
            task_enqueued.send(type(self), task_result=task_result)
        if task.queue_name == LARGE_QUEUE:
            for task_result in results:
                pool.large.submit(self._run, task_result)  # its own lane, one call at a time
            return results
        with pool.lock:
            pool.pending.extend(results)
        for _ in range(min(len(results), self.max_workers)):
            self._wake()
        return results

    def _new_result(self, task, args, kwargs) -> TaskResult:
        return TaskResult(
            task=task,
            id=secrets.token_hex(16),  # one urandom call (get_random_string: one per char)
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def get_result(self, result_id):
        with self._pool.lock:
            try:
                return self._pool.results[result_id]
            except KeyError:
                raise TaskResultDoesNotExist(result_id) from None

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until every task queued so far has finished (tests, benchmarks)."""
        pool = self._pool
        return (
            _drain(pool.executor, self.max_workers, timeout)
            and _drain(pool.large, pool.large_workers, timeout)
            and _drain(pool.background_lane, 1, timeout)
        )

    def close_connections(self, timeout: float = 30.0) -> None:
        """Close every worker thread's database connections (they persist between tasks):
        tests call this before the test database is dropped."""
        pool = self._pool
        for executor, workers in (
            (pool.executor, self.max_workers),
            (pool.large, pool.large_workers),
            (pool.background_lane, 1),
        ):
            barrier = threading.Barrier(workers)

            def close(barrier: threading.Barrier = barrier) -> None:
                barrier.wait(timeout)  # one job per thread: each waits for the others
                connections.close_all()

            for job in [executor.submit(close) for _ in range(workers)]:
                job.result(timeout=timeout)


def _drain(executor: ThreadPoolExecutor, workers: int, timeout: float) -> bool:
    """Block until every task queued so far on `executor` has finished."""
    barrier = threading.Barrier(workers + 1)
    # One blocker per worker: they all start only when every earlier task is done.
    blockers: list[Future] = [executor.submit(barrier.wait, timeout) for _ in range(workers)]
    try:
        barrier.wait(timeout)
    except threading.BrokenBarrierError:
        return False
    for blocker in blockers:
        blocker.result(timeout=timeout)
    return True
