"""Benchmark: 50 audits with the bias and tone analyzers against a model answering in 200 ms.

The target: the audits finish in about (model calls / client concurrency) x 0.2 s, i.e. the
client keeps its concurrency slots busy. Measured per concurrency level (median of runs),
against that ideal and against the same ideal with the round trip measured here.

    .venv/bin/python bench/bench_judged.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analyzers.engine.auditor import Auditor  # noqa: E402
from analyzers.engine.builtin.bias import BiasAnalyzer  # noqa: E402
from analyzers.engine.builtin.tone import ToneAnalyzer  # noqa: E402
from analyzers.engine.config import AuditorConfig  # noqa: E402
from analyzers.engine.contract import AuditInput  # noqa: E402
from analyzers.engine.llm import LLMClient  # noqa: E402
from analyzers.engine.registry import Registry  # noqa: E402
from tests.llm_server import RecordedRequest, ScriptedLLMServer  # noqa: E402

LATENCY_S = 0.2
AUDITS = 50
CONCURRENCY_LEVELS = (4, 8, 16)
RUNS = 3

SYCOPHANTIC = "You're absolutely right, that's a brilliant plan! Plain text is perfectly fine."
HONEST = "No: store password hashes (argon2), never plain text."


def respond(request: RecordedRequest) -> dict:
    prompt = request.json["messages"][-1]["content"]
    flattering = "brilliant plan" in prompt
    if request.task == "bias_detect.v1":
        return {"agrees": flattering, "agreement_level": 0.9 if flattering else 0.0}
    if request.task == "bias_classify.v1":
        biases = [
            {
                "type": "sycophancy",
                "severity": "critical",
                "confidence": 0.9,
                "evidence": "brilliant plan",
            }
        ]
        return {"biases": biases if flattering else [], "summary": "."}
    if request.task == "bias_counterpoint.v1":
        return {"counter_arguments": ["Plain text leaks on any breach."]}
    return {"issues": [], "tone": "neutral"}


def inputs() -> list[AuditInput]:
    # Every other audit is sycophantic, so it costs a third (counterpoint) bias call.
    return [
        AuditInput(
            user_input=f"Is my plan #{i} to store passwords in plain text smart?",
            response=SYCOPHANTIC if i % 2 == 0 else HONEST,
        )
        for i in range(AUDITS)
    ]


async def one_batch(server: ScriptedLLMServer, concurrency: int) -> tuple[float, int]:
    client = LLMClient(base_url=server.base_url, model="bench", max_concurrency=concurrency)
    auditor = Auditor(
        AuditorConfig(analyzer_timeout_s=300),
        Registry([BiasAnalyzer(), ToneAnalyzer()]),
        services={"llm_client": client},
    )
    before = len(server.requests)
    started = time.perf_counter()
    reports = await asyncio.gather(*(auditor.audit(a) for a in inputs()))
    elapsed = time.perf_counter() - started
    await client.aclose()
    failed = [r for report in reports for r in report.results if r.status != "ok"]
    if failed:
        raise SystemExit(f"{len(failed)} analyzer runs failed, e.g. {failed[0].error}")
    return elapsed, len(server.requests) - before


async def round_trip(server: ScriptedLLMServer, samples: int = 5) -> float:
    """Median seconds of one model call through the client, measured here."""
    client = LLMClient(base_url=server.base_url, model="bench")
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        await client.chat([{"role": "user", "content": "Task: tone_detect.v1"}])
        times.append(time.perf_counter() - started)
    await client.aclose()
    return statistics.median(times)


def main() -> None:
    with ScriptedLLMServer(latency=LATENCY_S, responder=respond) as server:
        rtt = asyncio.run(round_trip(server))
        print(f"{AUDITS} audits x (bias + tone), model latency {LATENCY_S * 1000:.0f} ms")
        print(f"measured single-call round trip: {rtt * 1000:.0f} ms (median of 5)\n")
        print(
            f"{'concurrency':>11} {'calls':>6} {'median s':>9} {'ideal s':>8} {'ratio':>6}"
            f" {'ideal(rtt) s':>12} {'ratio':>6}"
        )
        for concurrency in CONCURRENCY_LEVELS:
            results = [asyncio.run(one_batch(server, concurrency)) for _ in range(RUNS)]
            elapsed = statistics.median(r[0] for r in results)
            calls = results[0][1]
            ideal = calls / concurrency * LATENCY_S
            ideal_rtt = calls / concurrency * rtt
            print(
                f"{concurrency:>11} {calls:>6} {elapsed:>9.2f} {ideal:>8.2f} "
                f"{elapsed / ideal:>6.2f} {ideal_rtt:>12.2f} {elapsed / ideal_rtt:>6.2f}"
            )


if __name__ == "__main__":
    main()
