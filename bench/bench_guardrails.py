"""Guardrail benchmarks: per-paragraph latency, full-engine throughput, linear time.

Run: .venv/bin/python bench/bench_guardrails.py
Targets: paragraph p99 < 1 ms; >= 2000 audits/s per core; each 1 MB adversarial input < 1 s.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzers.engine.auditor import Auditor  # noqa: E402
from analyzers.engine.config import AuditorConfig  # noqa: E402
from analyzers.engine.contract import AuditInput, Source  # noqa: E402
from analyzers.engine.guardrails.settings import SourceIndex, settings_from_config  # noqa: E402
from analyzers.engine.guardrails.pipeline import audit_paragraph  # noqa: E402
from analyzers.engine.guardrails.stream import audit_text  # noqa: E402
from analyzers.engine.registry import build_registry  # noqa: E402

SAMPLES = ROOT.parent / "shared" / "samples" / "config.json"

PARAGRAPH = (
    "Decathlon grew conversion by 50% ([case study](https://www.acme.example/customers/"
    "decathlon)), and Globex reported +206% revenue. Read [this article](https://www.acme."
    "example/blog/faceting) or the [API reference](https://docs.acme.example/api/search) "
    "before you start; see also [Faceting 101 | Acme | Acme](https://www.acme.example/blog/x)."
)


def load_config() -> AuditorConfig:
    if SAMPLES.exists():
        data = json.loads(SAMPLES.read_text())
    else:
        data = {"allowed_hosts": ["acme.example", "www.acme.example", "docs.acme.example"]}
    data.setdefault("analyzers", {}).setdefault("links", {})["check_health"] = False
    return AuditorConfig.model_validate(data)


def response_2kb() -> str:
    paragraphs = [
        "Acme search answers in milliseconds and scales with your catalogue. "
        "[Pricing](https://www.acme.example/pricing) is simple.",
        "Decathlon grew conversion by 50% ([case study](https://www.acme.example/customers/"
        "decathlon)). PcComponentes lifted revenue per search by 12%.",
        "Globex doubled revenue, up $4M after launch, according to [this blog]"
        "(https://random-blog.example.org/post).",
        "Read [this article](https://www.acme.example/blog/faceting) and [Faceting 101 | Acme"
        " | Acme](https://www.acme.example/blog/f2) before the [API](https://docs.acme.example"
        "/api/x).",
        "In 2023 most retailers saw traffic grow during the holidays; teams that tuned "
        "relevance early kept their gains through January. " * 3,
        "Shall I send details about onboarding, synonyms, query rules and analytics? "
        "We can also walk through merchandising and A/B testing together.",
    ]
    text = "\n\n".join(paragraphs)
    while len(text) < 2048:
        text += " More context on relevance tuning."
    return text


def bench_paragraph(config: AuditorConfig) -> None:
    settings = settings_from_config(config)
    sources = SourceIndex(settings, [Source(title="Faceting 101",
                                            url="https://www.acme.example/blog/faceting")])
    text = PARAGRAPH[:400]
    for _ in range(200):
        audit_paragraph(text, 0, settings, sources)
    times = []
    for _ in range(5000):
        t0 = time.perf_counter()
        audit_paragraph(text, 0, settings, sources)
        times.append(time.perf_counter() - t0)
    times.sort()
    p50 = times[len(times) // 2] * 1e3
    p99 = times[int(len(times) * 0.99)] * 1e3
    print(f"paragraph ({len(text)} chars): p50 {p50:.3f} ms  p99 {p99:.3f} ms  "
          f"(target p99 < 1 ms: {'OK' if p99 < 1 else 'MISSED'})")


def bench_engine(config: AuditorConfig) -> None:
    registry = build_registry(include_entry_points=False)
    auditor = Auditor(config, registry)
    ids = [a.id for a in auditor.enabled_analyzers()]
    text = response_2kb()
    audit = AuditInput(response=text, user_input="How do I tune search?")
    links = text.count("](")
    result = audit_text(text, settings_from_config(config))
    print(f"engine analyzers: {ids}")
    print(f"response: {len(text)} chars, {links} links, "
          f"{len(result.claims)} claims, {len(result.annotations)} guardrail annotations")

    async def run(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            await auditor.audit(audit)
        return time.perf_counter() - t0

    asyncio.run(run(50))
    rates = [300 / asyncio.run(run(300)) for _ in range(3)]
    rate = statistics.median(rates)

    baseline = re.compile(r"\[([^\]\n]*)\]\(([^)\s]*)\)|\d+%|\$\d+[MBK]?|\d+x")
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        baseline.findall(text)
    base_rate = n / (time.perf_counter() - t0)
    print(f"full engine: {rate:,.0f} audits/s on one core "
          f"(target >= 2000: {'OK' if rate >= 2000 else 'MISSED'})")
    print(f"baseline one-regex pass: {base_rate:,.0f} passes/s; "
          f"engine / baseline = 1/{base_rate / rate:,.1f}")


def bench_linear(config: AuditorConfig) -> None:
    settings = settings_from_config(config)
    mb = 10**6
    inputs = {
        "'[' * 10**6": "[" * mb,
        "'(' nesting": "[x](" + "(" * (mb - 4),
        "'http://' repeated": "http://" * (mb // 7),
        "'[a](' repeated": "[a](" * (mb // 4),
        "'<a href=' repeated": '<a href="x">' * (mb // 12),
        "one 1 MB sentence": ("Globex grew 30% with [x](https://evil.test/) and more " * 20000)[:mb],
        "backticks": "` `` ``` " * (mb // 9),
    }
    for name, text in inputs.items():
        t0 = time.perf_counter()
        audit_text(text, settings)
        elapsed = time.perf_counter() - t0
        print(f"linear: {name:<22} {len(text) / 1e6:.2f} MB in {elapsed:.3f} s "
              f"({'OK' if elapsed < 1 else 'MISSED'})")


def main() -> None:
    config = load_config()
    bench_paragraph(config)
    bench_engine(config)
    bench_linear(config)


if __name__ == "__main__":
    main()
