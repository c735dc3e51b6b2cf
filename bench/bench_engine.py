"""Engine throughput with the red-flag analyzer alone on a 2 KB response.

Prints audits/s on one core (median of several runs) and the ratio to a baseline measured
in the same run: one pass of one compiled regex over the same text. Target: >= 5,000 audits/s.
Then the privacy analyzer's cost per 2 KB response as a share of the full engine's (every
built-in), on plain text and on text with personal data. Target: <= 10%.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzers.engine.auditor import Auditor  # noqa: E402
from analyzers.engine.builtin.redflag import RedflagAnalyzer  # noqa: E402
from analyzers.engine.config import AuditorConfig  # noqa: E402
from analyzers.engine.contract import AuditInput  # noqa: E402
from analyzers.engine.privacy.analyzer import PrivacyAnalyzer  # noqa: E402
from analyzers.engine.registry import Registry, build_registry  # noqa: E402

RUNS = 7
AUDITS_PER_RUN = 3000
TARGET = 5000

PARAGRAPH = (
    "Acme's search API ranks results by relevance and business rules. I am fairly sure the "
    "answer is to configure facets first, then synonyms. See the documentation for details "
    "on typo tolerance, filters and analytics; most teams see results within a week. "
)
TEXT = (PARAGRAPH * 10)[:2048]
PRIVACY_TARGET = 0.10
PERSONAL = "Write to jane.doe@example.com or call +1 650-253-0000; card 4242 4242 4242 4242. "


def make_inputs(n: int) -> list[AuditInput]:
    # Distinct texts so collision tracking does real work without flagging every audit.
    return [AuditInput(user_input="q", response=f"{i} {TEXT}"[:2048]) for i in range(n)]


async def engine_run(auditor: Auditor, inputs: list[AuditInput]) -> float:
    started = time.perf_counter()
    for audit in inputs:
        await auditor.audit(audit)
    return len(inputs) / (time.perf_counter() - started)


def baseline_run(inputs: list[AuditInput]) -> float:
    pattern = re.compile(r"\b(?:certainly|definitely|clearly)\b", re.IGNORECASE)
    started = time.perf_counter()
    for audit in inputs:
        pattern.search(audit.response)
    return len(inputs) / (time.perf_counter() - started)


def main() -> None:
    config = AuditorConfig(analyzers={"redflag": {"enabled": True}})
    engine_rates, baseline_rates = [], []
    for _ in range(RUNS):
        auditor = Auditor(config, Registry([RedflagAnalyzer()]))
        inputs = make_inputs(AUDITS_PER_RUN)
        engine_rates.append(asyncio.run(engine_run(auditor, inputs)))
        baseline_rates.append(baseline_run(inputs))
    engine = statistics.median(engine_rates)
    baseline = statistics.median(baseline_rates)
    print(
        f"redflag engine, 2 KB response, one core: median {engine:,.0f} audits/s over {RUNS} runs"
    )
    print(f"baseline (one compiled regex pass):      median {baseline:,.0f} passes/s")
    print(
        f"ratio engine/baseline: {engine / baseline:.4f} (baseline is {baseline / engine:,.0f}x faster)"
    )
    print(f"target >= {TARGET:,} audits/s: {'MET' if engine >= TARGET else 'MISSED'}")
    privacy_share()


def privacy_share(runs: int = 5, audits: int = 1000) -> None:
    """The privacy analyzer's time per audit over the full engine's, on the same inputs."""
    analyzer = PrivacyAnalyzer()
    settings = analyzer.parse_settings({})
    for label, inputs in (
        ("plain", make_inputs(audits)),
        (
            "with personal data",
            [
                AuditInput(user_input="q", response=(PERSONAL + a.response)[:2048])
                for a in make_inputs(audits)
            ],
        ),
    ):
        full, alone = [], []
        for _ in range(runs):
            auditor = Auditor(AuditorConfig(), build_registry(include_entry_points=False))
            full.append(1 / asyncio.run(engine_run(auditor, inputs)))
            started = time.perf_counter()
            for audit in inputs:
                analyzer.scan(audit, settings)
            alone.append((time.perf_counter() - started) / len(inputs))
        share = statistics.median(alone) / statistics.median(full)
        print(
            f"privacy, 2 KB response ({label}): {statistics.median(alone) * 1e6:,.0f} us of the "
            f"full engine's {statistics.median(full) * 1e6:,.0f} us per audit = {share:.1%} "
            f"(target <= {PRIVACY_TARGET:.0%}: {'MET' if share <= PRIVACY_TARGET else 'MISSED'})"
        )


if __name__ == "__main__":
    main()
