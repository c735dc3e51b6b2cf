"""The auditor's fast path (eager tasks, no timer for analyzers that never wait) keeps the
semantics of `asyncio.gather` + `asyncio.timeout`."""

from __future__ import annotations

import asyncio
import time

from analyzers.engine.auditor import Auditor
from analyzers.engine.base import Analyzer, AnalyzerSettings
from analyzers.engine.config import AuditorConfig
from analyzers.engine.contract import AuditInput
from analyzers.engine.registry import Registry


class Scripted(Analyzer):
    category = "test"

    class Settings(AnalyzerSettings):
        busy_s: float = 0.0  # synchronous work before the first wait
        waits: int = 0  # how many times it waits on the loop
        wait_s: float = 0.0
        fail_after_wait: bool = False
        swallow_cancel: bool = False

    def __init__(self, analyzer_id: str, log: list[str]) -> None:
        self.id = analyzer_id
        self.log = log

    async def analyze(self, audit, settings, context):
        self.log.append(f"{self.id}:start")
        end = time.perf_counter() + settings.busy_s
        while time.perf_counter() < end:
            pass
        for i in range(settings.waits):
            try:
                await asyncio.sleep(settings.wait_s)
            except asyncio.CancelledError:
                self.log.append(f"{self.id}:cancelled")
                if not settings.swallow_cancel:
                    raise
            self.log.append(f"{self.id}:woke{i}")
        if settings.fail_after_wait:
            raise RuntimeError("late failure")
        self.log.append(f"{self.id}:end")
        return self.result(score=0.5)


class NotACoroutine(Analyzer):
    """`analyze` returns a plain awaitable (a future), not a coroutine."""

    id = "future"
    category = "test"

    def analyze(self, audit, settings, context):
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, future.set_result, self.result(score=0.2))
        return future


def run(specs: dict[str, dict], extra=(), **config):
    log: list[str] = []
    registry = Registry([*(Scripted(name, log) for name in specs), *extra])
    analyzers = {name: {"enabled": True, **spec} for name, spec in specs.items()}
    analyzers.update({a.id: {"enabled": True} for a in extra})
    auditor = Auditor(AuditorConfig(analyzers=analyzers, **config), registry)
    report = asyncio.run(auditor.audit(AuditInput(user_input="q", response="r")))
    return {r.analyzer_id: r for r in report.results}, log


def test_analyzers_that_never_wait_run_in_order_and_succeed():
    runs, log = run({"a": {}, "b": {}, "c": {}})
    assert log == ["a:start", "a:end", "b:start", "b:end", "c:start", "c:end"]
    assert all(r.status == "ok" and r.score == 0.5 for r in runs.values())


def test_waiting_analyzers_interleave_as_with_gather():
    runs, log = run({"a": {"waits": 2}, "b": {"waits": 2}, "c": {}})
    assert log[:5] == ["a:start", "b:start", "c:start", "c:end", "a:woke0"]
    assert {r.status for r in runs.values()} == {"ok"}


def test_a_failure_after_waiting_is_recorded():
    runs, _ = run({"a": {"waits": 1, "fail_after_wait": True}, "b": {}})
    assert runs["a"].status == "failed" and "late failure" in runs["a"].error
    assert runs["b"].status == "ok"


def test_the_deadline_counts_from_before_the_synchronous_first_step():
    runs, log = run(
        {"slow": {"busy_s": 0.15, "waits": 1, "wait_s": 5}, "fast": {}}, analyzer_timeout_s=0.1
    )
    assert runs["slow"].status == "timeout"
    assert "slow:cancelled" in log
    assert runs["fast"].status == "ok"


def test_a_waiting_analyzer_past_its_deadline_times_out():
    started = time.perf_counter()
    runs, _ = run({"hang": {"waits": 1, "wait_s": 30}}, analyzer_timeout_s=0.1)
    assert runs["hang"].status == "timeout"
    assert time.perf_counter() - started < 5


def test_an_analyzer_that_swallows_the_cancellation_still_finishes():
    runs, log = run(
        {"stubborn": {"waits": 2, "wait_s": 0.3, "swallow_cancel": True}, "other": {}},
        analyzer_timeout_s=0.1,
    )
    # as with asyncio.timeout: the swallowed cancellation is not a timeout
    assert log.count("stubborn:cancelled") == 1
    assert runs["stubborn"].status == "ok"


def test_an_analyzer_returning_a_plain_awaitable_still_works():
    runs, _ = run({"a": {}}, extra=[NotACoroutine()])
    assert runs["future"].status == "ok" and runs["future"].score == 0.2


# -- analyzers that say they never wait run inline (no task, no slot, no timer) -----------


class Inline(Scripted):
    """A `Scripted` analyzer that says it never waits (true or not, per its settings)."""

    def never_waits(self, settings, context):
        return True


def run_inline(specs: dict[str, dict], inline: set[str], progress=None, **config):
    log: list[str] = []
    registry = Registry([(Inline if n in inline else Scripted)(n, log) for n in specs])
    analyzers = {name: {"enabled": True, **spec} for name, spec in specs.items()}
    auditor = Auditor(AuditorConfig(analyzers=analyzers, **config), registry)
    report = asyncio.run(auditor.audit(AuditInput(user_input="q", response="r"), progress=progress))
    return report, log


def test_inline_and_waiting_analyzers_keep_their_order_and_interleave():
    report, log = run_inline(
        {"a": {"waits": 2}, "b": {}, "c": {"waits": 1}, "d": {}}, inline={"b", "d"}
    )
    assert [r.analyzer_id for r in report.results] == ["a", "b", "c", "d"]
    assert log[:6] == ["a:start", "b:start", "b:end", "c:start", "d:start", "d:end"]
    assert {r.status for r in report.results} == {"ok"}


def test_an_inline_analyzer_that_waits_after_all_still_completes_or_times_out():
    report, log = run_inline({"liar": {"waits": 2, "wait_s": 0.01}, "x": {}}, inline={"liar"})
    assert [r.status for r in report.results] == ["ok", "ok"]
    assert log.index("x:end") < log.index("liar:end")  # it waited without holding the rest up
    report, log = run_inline(
        {"liar": {"busy_s": 0.15, "waits": 1, "wait_s": 5}, "x": {}},
        inline={"liar"},
        analyzer_timeout_s=0.1,
    )
    # the deadline counts from before its first step, as for any analyzer
    assert report.results[0].status == "timeout" and "liar:cancelled" in log
    assert report.results[1].status == "ok"


def test_an_inline_analyzer_failing_is_recorded_like_any():
    report, _ = run_inline({"bad": {"fail_after_wait": True}, "x": {}}, inline={"bad"})
    assert report.results[0].status == "failed" and "late failure" in report.results[0].error
    assert report.results[1].status == "ok"


def test_inline_analyzers_report_progress_like_the_others():
    events: list[tuple[str, str | None]] = []

    async def progress(event):
        await asyncio.sleep(0)  # a callback that waits
        events.append((event["type"], event.get("analyzer_id")))

    report, _ = run_inline({"a": {}, "b": {"waits": 1}}, inline={"a"}, progress=progress)
    assert {r.status for r in report.results} == {"ok"}
    for name in ("a", "b"):
        assert events.index(("analyzer_started", name)) < events.index(("analyzer_finished", name))
    assert events[-1] == ("audit_finished", None)


def test_the_builtins_say_they_never_wait_only_without_io():
    from analyzers.engine.base import AuditContext
    from analyzers.engine.collisions import InMemoryCollisionStore
    from analyzers.engine.registry import build_registry

    registry = build_registry(include_entry_points=False)

    def waits(config: AuditorConfig, store=None) -> dict[str, bool]:
        context = AuditContext(config=config, collision_store=store or InMemoryCollisionStore())
        return {
            a.id: not a.never_waits(a.parse_settings(config.analyzer_section(a.id)), context)
            for a in registry
        }

    class DatabaseStore:  # answers by waiting on I/O (never says otherwise)
        async def seen_before(self, scope, digest, family=None):
            return False

    default = waits(AuditorConfig())
    # link health checks are on by default: links and grounding may wait
    assert default == {
        "redflag": False,
        "bias": False,
        "tone": False,
        "links": True,
        "grounding": True,
        "prompt_leak": False,
        "privacy": False,
    }
    no_health = AuditorConfig(analyzers={"links": {"check_health": False}})
    assert not any(waits(no_health).values())
    assert waits(no_health, DatabaseStore())["redflag"] is True
    validators = AuditorConfig(analyzers={"redflag": {"validators": ["x.y"]}})
    assert waits(validators)["redflag"] is True
    model = AuditorConfig(llm={"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    assert waits(model)["bias"] is True and waits(model)["tone"] is True
