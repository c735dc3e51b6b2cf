"""Test-only analyzers: one that sleeps (to kill a worker mid-run), one that raises."""

from __future__ import annotations

import asyncio
import os

from analyzers.engine.base import Analyzer, AnalyzerSettings


class SlowAnalyzer(Analyzer):
    id = "slow"
    category = "structure"

    class Settings(AnalyzerSettings):
        seconds: float = float(os.environ.get("SLOW_ANALYZER_SECONDS", "60"))

    async def analyze(self, audit, settings, context):
        await asyncio.sleep(settings.seconds)
        return self.result(score=0.0)


class ExplodingAnalyzer(Analyzer):
    id = "exploding"
    category = "structure"

    async def analyze(self, audit, settings, context):
        raise RuntimeError("kaboom")


class SlowOnLargeAnalyzer(Analyzer):
    """Sleeps only on responses of at least `min_chars` characters (a huge audit's cost)."""

    id = "slow_on_large"
    category = "structure"

    class Settings(AnalyzerSettings):
        seconds: float = float(os.environ.get("SLOW_ANALYZER_SECONDS", "60"))
        min_chars: int = 1000

    async def analyze(self, audit, settings, context):
        if len(audit.response) >= settings.min_chars:
            await asyncio.sleep(settings.seconds)
        return self.result(score=0.0)
