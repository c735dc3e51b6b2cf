"""Structural red flags (placeholder being written)."""
from __future__ import annotations

from .base import Analyzer


class RedflagAnalyzer(Analyzer):
    id = "redflag"
    category = "structure"
    description = "Structural red flags."

    async def analyze(self, audit, settings, context):
        return self.result(score=0.0)
