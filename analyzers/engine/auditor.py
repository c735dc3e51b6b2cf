"""The auditor: fan out to the enabled analyzers, rescue failures, aggregate, surface."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Coroutine, Generator, Iterable
from types import CoroutineType
from typing import Any

from .base import Analyzer, AuditContext, ProgressCallback
from .collisions import CollisionStore, InMemoryCollisionStore
from .config import AuditorConfig
from .contract import AnalyzerRun, AuditInput, AuditReport, RunStatus
from .limits import cap_report_parts, cap_run
from .privacy.redaction import redact_text
from .registry import Registry, default_registry
from .surfacing import decide_surfaced, is_surfaced
from .trusted import analyzer_run

__all__ = ["Auditor", "check_overrides", "emit", "is_surfaced", "overall_score"]

logger = logging.getLogger(__name__)


def overall_score(runs: Iterable[AnalyzerRun]) -> float:
    """Mean score of the analyzers that succeeded; 0.0 when none did."""
    scores = [r.score for r in runs if r.status == "ok"]
    return sum(scores) / len(scores) if scores else 0.0


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Auditor:
    """Runs one configuration's analyzers over audit inputs.

    `services` is handed to analyzers through the context (link checker, LLM client, ...).
    """

    def __init__(
        self,
        config: AuditorConfig | None = None,
        registry: Registry | None = None,
        *,
        collision_store: CollisionStore | None = None,
        services: dict[str, Any] | None = None,
    ) -> None:
        self.config = config or AuditorConfig()
        self.registry = registry if registry is not None else default_registry()
        self.collision_store = collision_store or InMemoryCollisionStore()
        self.services = services or {}
        self._parsed_settings: dict[str, Any] = {}
        self._enabled_analyzers: list[Analyzer] | None = None
        self._registry_size = 0

    async def audit(
        self,
        audit: AuditInput,
        *,
        options: dict[str, dict[str, Any]] | None = None,
        collision_key: str | None = None,
        collision_family: str | None = None,
        progress: ProgressCallback | None = None,
        memo: dict[str, Any] | None = None,
    ) -> AuditReport:
        """`collision_family`: outputs recorded under the same family (an audit and its
        re-runs) are not duplicates of each other (see CollisionStore). `memo`: what the
        analyzers share, computed already (e.g. guardrails.analyzers.Seed)."""
        options = options or {}
        context = AuditContext(
            config=self.config,
            collision_key=audit.user_input if collision_key is None else collision_key,
            collision_family=collision_family,
            collision_store=self.collision_store,
            services=self.services,
            progress=progress,
        )
        if memo:
            context.memo.update(memo)
        valid, option_errors = self._split_options(options)
        # Analyzers that read shared configuration see this audit's options too.
        context.config = self.config.with_options(valid)
        # The whole audit's time budget: no analyzer waits past it, queued ones included.
        context.deadline = asyncio.get_running_loop().time() + self.config.limits.audit_timeout_s
        limit = asyncio.Semaphore(self.config.max_concurrency)
        analyzers = self._enabled(context.config)

        async def run_one(analyzer: Analyzer, settings: Any = None) -> AnalyzerRun:
            async with limit:
                return await self._run_analyzer(
                    analyzer, audit, context, option_errors.get(analyzer.id), settings
                )

        if len(analyzers) == 1:
            runs = [await run_one(analyzers[0])]
        else:
            runs = await self._run_all(analyzers, audit, context, option_errors, limit, run_one)

        # The memo's entries may point back at the context (a shared pipeline run does):
        # emptied now, the audit leaves no reference cycle for the garbage collector.
        context.memo.clear()
        trace, links = cap_report_parts(
            context.trace,
            context.links,
            self.config.limits,
            context.omitted_trace,
            context.omitted_links,
        )
        report = AuditReport(
            threshold=self.config.threshold,
            overall_score=overall_score(runs),
            results=runs,
            cleaned_response=(
                _uncleaned(audit.response, self.config)
                if context.cleaned_response is None
                else context.cleaned_response
            ),
            links=links,
            trace=trace,
        )
        if progress is not None:
            await emit(progress, {"type": "audit_finished", "has_card": report.has_card})
        return report

    def _enabled(self, config: AuditorConfig) -> list[Analyzer]:
        """The analyzers `config` enables, in registry order; kept while the audit adds
        no options (the registry is not changed while an auditor audits)."""
        if config is not self.config:
            return [a for a in self.registry if config.is_enabled(a.id, a.enabled_by_default)]
        enabled = self._enabled_analyzers
        if enabled is None or len(self.registry) != self._registry_size:
            enabled = self._enabled_analyzers = [
                a for a in self.registry if config.is_enabled(a.id, a.enabled_by_default)
            ]
            self._registry_size = len(self.registry)
        return enabled

    async def _run_all(
        self,
        analyzers: list[Analyzer],
        audit: AuditInput,
        context: AuditContext,
        option_errors: dict[str, str],
        limit: asyncio.Semaphore,
        run_one: Any,
    ) -> list[AnalyzerRun]:
        """Every analyzer's run, in list order.

        An analyzer that says it will not wait (`Analyzer.never_waits`: no I/O with these
        settings, e.g. the heuristics without a model) runs inline in this coroutine:
        it cannot overlap anything, so a task, a concurrency slot and a timer would only
        cost time. (It runs in the audit's own contextvars context, not a copy.) The
        others start as eager tasks in list order, as `asyncio.gather` would run them
        but each at once (analyzers that never wait finish without a trip through the
        event loop), and are awaited together at the end.
        """
        runs: list[AnalyzerRun | None] = []
        tasks: list[tuple[int, asyncio.Task]] = []
        loop = asyncio.get_running_loop()
        for analyzer in analyzers:
            settings = None
            # (only a task still waiting can hold a concurrency slot)
            if analyzer.id not in option_errors and not (tasks and limit.locked()):
                settings = self._inline_settings(analyzer, context)
            if settings is not None:
                progress = context.progress
                if progress is not None:
                    await emit(progress, {"type": "analyzer_started", "analyzer_id": analyzer.id})
                outcome = self._run_inline(analyzer, settings, audit, context)
                if isinstance(outcome, AnalyzerRun):
                    if progress is not None:
                        await emit(
                            progress,
                            {
                                "type": "analyzer_finished",
                                "analyzer_id": analyzer.id,
                                "run": outcome,
                            },
                        )
                    runs.append(outcome)
                    continue
                # it waited after all: the rest of it runs as a task, as any waiting one
                task = asyncio.Task(outcome, loop=loop, eager_start=True)
            else:
                task = asyncio.Task(run_one(analyzer), loop=loop, eager_start=True)
            if task.done():
                runs.append(task.result())
            else:
                tasks.append((len(runs), task))
                runs.append(None)
        if tasks:
            done = await asyncio.gather(*(task for _, task in tasks))
            for (i, _), run in zip(tasks, done, strict=True):
                runs[i] = run
        return runs  # type: ignore[return-value]

    def _inline_settings(self, analyzer: Analyzer, context: AuditContext) -> Any:
        """The analyzer's settings when it says it will not wait with them, else None
        (then it runs as a task, which also reports any error parsing them)."""
        try:
            settings = self._settings(analyzer, context.config)
            return settings if analyzer.never_waits(settings, context) else None
        except Exception:
            return None

    def _run_inline(
        self, analyzer: Analyzer, settings: Any, audit: AuditInput, context: AuditContext
    ) -> AnalyzerRun | Coroutine[Any, Any, AnalyzerRun]:
        """`_run_analyzer` (its progress events aside) for an analyzer that should not
        wait: its coroutine driven here, without a task or a timer. If it waits after
        all, the coroutine finishing its run under the deadline (taken before its first
        step, as `_within` does) is returned instead."""
        started = time.perf_counter()
        status: RunStatus = "ok"
        error: str | None = None
        result: Any = None
        deadline, budget_spent = self._deadline(context)
        try:
            pending = analyzer.analyze(audit, settings, context)
            if type(pending) is not CoroutineType:
                return self._finish_waiting(
                    analyzer, context, pending, None, deadline, budget_spent, started
                )
            try:
                waiting_on = pending.send(None)
            except StopIteration as done:
                result = done.value
            else:
                return self._finish_waiting(
                    analyzer, context, pending, waiting_on, deadline, budget_spent, started
                )
        except TimeoutError:
            status, error = self._timeout_error(budget_spent)
        except Exception as exc:  # an analyzer never fails the audit
            status, error = "failed", _error_text(exc)
        return self._finished_run(analyzer, context, status, error, result, started)

    async def _finish_waiting(
        self,
        analyzer: Analyzer,
        context: AuditContext,
        pending: Any,
        waiting_on: Any,
        deadline: float,
        budget_spent: bool,
        started: float,
    ) -> AnalyzerRun:
        """The rest of an inline run whose analyzer waited: awaited under its deadline."""
        status: RunStatus = "ok"
        error: str | None = None
        result: Any = None
        try:
            async with asyncio.timeout_at(deadline):
                if type(pending) is CoroutineType:
                    result = await _Resumed(pending, waiting_on)
                else:
                    result = await pending
        except TimeoutError:
            status, error = self._timeout_error(budget_spent)
        except Exception as exc:  # an analyzer never fails the audit
            status, error = "failed", _error_text(exc)
        return await self._announced_run(analyzer, context, status, error, result, started)

    def _deadline(self, context: AuditContext) -> tuple[float, bool]:
        """The loop time by which the analyzer must be done, and whether that is the
        audit's budget (sooner than the analyzer's own timeout)."""
        deadline = asyncio.get_running_loop().time() + self.config.analyzer_timeout_s
        if context.deadline is not None and context.deadline < deadline:
            return context.deadline, True
        return deadline, False

    def _timeout_error(self, budget_spent: bool) -> tuple[RunStatus, str]:
        if budget_spent:
            limit_s = self.config.limits.audit_timeout_s
            return "timeout", f"timed out: the audit's time budget of {limit_s:g} s was spent"
        return "timeout", f"timed out after {self.config.analyzer_timeout_s:g} s"

    async def _announced_run(
        self,
        analyzer: Analyzer,
        context: AuditContext,
        status: RunStatus,
        error: str | None,
        result: Any,
        started: float,
    ) -> AnalyzerRun:
        """`_finished_run`, announced to the audit's progress (`analyzer_finished`)."""
        run = self._finished_run(analyzer, context, status, error, result, started)
        if context.progress is not None:
            await emit(
                context.progress,
                {"type": "analyzer_finished", "analyzer_id": analyzer.id, "run": run},
            )
        return run

    def _finished_run(
        self,
        analyzer: Analyzer,
        context: AuditContext,
        status: RunStatus,
        error: str | None,
        result: Any,
        started: float,
    ) -> AnalyzerRun:
        duration_ms = (time.perf_counter() - started) * 1000
        if result is not None:
            # `result` was validated when it was built: copy its fields, don't re-validate.
            run = analyzer_run(
                result,
                duration_ms,
                decide_surfaced(
                    status="ok",
                    score=result.score,
                    should_surface=result.should_surface,
                    threshold=context.config.threshold_for(analyzer.id),
                ),
            )
            return cap_run(run, self.config.limits, context.omitted.get(analyzer.id))
        return AnalyzerRun(
            analyzer_id=analyzer.id,
            category=analyzer.category,
            status=status,
            error=error,
            duration_ms=duration_ms,
        )

    def _settings(self, analyzer: Analyzer, config: AuditorConfig) -> Any:
        """The analyzer's parsed settings; parsed once while the audit adds no options."""
        if config is not self.config and config.analyzers.get(
            analyzer.id
        ) != self.config.analyzers.get(analyzer.id):
            return analyzer.parse_settings(config.analyzer_section(analyzer.id))
        settings = self._parsed_settings.get(analyzer.id)
        if settings is None:
            settings = analyzer.parse_settings(self.config.analyzer_section(analyzer.id))
            self._parsed_settings[analyzer.id] = settings
        return settings

    def _split_options(
        self, options: dict[str, Any]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """Per-audit options that may apply, and an error for each analyzer whose may not."""
        valid: dict[str, dict[str, Any]] = {}
        errors: dict[str, str] = {}
        for analyzer_id, overrides in options.items():
            analyzer = self.registry.get(analyzer_id)
            try:
                if not isinstance(overrides, dict):
                    raise ValueError(f"options for {analyzer_id!r} must be an object")
                if analyzer is not None:
                    check_overrides(analyzer, overrides)
                valid[analyzer_id] = overrides
            except ValueError as exc:
                errors[analyzer_id] = str(exc)
        return valid, errors

    async def _run_analyzer(
        self,
        analyzer: Analyzer,
        audit: AuditInput,
        context: AuditContext,
        option_error: str | None = None,
        settings: Any = None,
    ) -> AnalyzerRun:
        if context.progress is not None:
            await emit(context.progress, {"type": "analyzer_started", "analyzer_id": analyzer.id})
        started = time.perf_counter()
        status: RunStatus = "ok"
        error: str | None = None
        result: Any = None
        budget_spent = False
        try:
            if option_error:
                raise ValueError(option_error)
            if settings is None:
                settings = self._settings(analyzer, context.config)
            deadline, budget_spent = self._deadline(context)
            pending = analyzer.analyze(audit, settings, context)
            if type(pending) is CoroutineType:
                result = await _within(pending, deadline)
            else:
                async with asyncio.timeout_at(deadline):
                    result = await pending
        except TimeoutError:
            status, error = self._timeout_error(budget_spent)
        except Exception as exc:  # an analyzer never fails the audit
            status, error = "failed", _error_text(exc)
        return await self._announced_run(analyzer, context, status, error, result, started)


async def _within(coro: Coroutine[Any, Any, Any], deadline: float) -> Any:
    """`async with asyncio.timeout_at(deadline): return await coro`, minus the timer when
    the coroutine finishes without ever waiting (as the deterministic analyzers do).

    The coroutine runs its first step at once; only if it then waits is the rest awaited
    under the deadline, which was taken before that step, as `asyncio.timeout` would.
    """
    try:
        waiting_on = coro.send(None)
    except StopIteration as done:
        return done.value
    async with asyncio.timeout_at(deadline):
        return await _Resumed(coro, waiting_on)


class _Resumed:
    """Awaits the rest of a coroutine whose first step already ran and yielded `first`."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, waiting_on = self.coro, self.first
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation (the deadline), thrown in by the task
                try:
                    waiting_on = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    waiting_on = coro.send(sent)
                except StopIteration as done:
                    return done.value


def check_overrides(analyzer: Analyzer, overrides: dict[str, Any]) -> None:
    """Refuse per-audit options that only the configuration may set."""
    locked = sorted(analyzer.config_only_settings.intersection(overrides))
    if locked:
        raise ValueError(f"{analyzer.id}: {', '.join(locked)} can only be set in the configuration")


async def emit(progress: ProgressCallback | None, event: dict[str, Any]) -> None:
    """Report one step of the audit; a failing progress callback never fails the audit."""
    if progress is None:
        return
    try:
        outcome = progress(event)
        if inspect.isawaitable(outcome):
            await outcome
    except Exception:
        logger.exception("progress callback failed for %s", event.get("type"))


def _uncleaned(response: str, config: AuditorConfig) -> str:
    """The text passed on when no analyzer cleaned it: the response, redacted when the
    configuration's `privacy` says so."""
    if not config.privacy.redacts_output:
        return response
    return redact_text(response, config.privacy.detect, config.privacy_region())
