"""Token usage and latency of the model calls one analyzer run made."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Usage:
    """Accumulates what an analyzer run spent; `as_dict()` goes into `supplementary.usage`."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    retries: int = 0
    latency_ms: float = 0.0

    def record(self, *, prompt_tokens: int, completion_tokens: int, latency_ms: float) -> None:
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.calls += 1
        self.latency_ms += latency_ms

    def as_dict(self) -> dict[str, int | float]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "calls": self.calls,
            "retries": self.retries,
            "latency_ms": round(self.latency_ms, 1),
        }
