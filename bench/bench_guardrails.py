"""Guardrail benchmarks: per-paragraph latency, full-engine throughput, linear time.

Run: .venv/bin/python bench/bench_guardrails.py
Targets (issue 3):
- inline audit of one realistic 400-character paragraph (links and claims): p99 < 1 ms;
- the full engine (every built-in deterministic analyzer, no network: link health checks
  off, no model so bias and tone run their heuristics) on a 2 KB response with 6 links
  and 3 claims: >= 2,000 audits/s on one core, with the ratio to a one-regex-pass
  baseline measured in the same run;
- each 1 MB adversarial input through the guardrail pipeline in < 1 s.
Targets (issue 12, safe output):
- the full engine on the same 2 KB response with 10 bare URLs and 5 HTML tags added:
  >= 2,000 audits/s on one core;
- 100k bare URLs, 50k HTML tags and the new adversarial shapes (markers of bare URLs,
  unclosed tags) through the guardrail pipeline in < 1 s each.

Latency and throughput are printed by CPU time of this process (`time.process_time`) and
by wall clock, throughput as medians of several runs: on a shared machine the CPU figures
say what one core does (the wall clock also counts time the process waited for a core,
which shows in the tail); on an idle machine the two agree. The targets are judged on
the CPU figures. The guardrails run compiled when built (`make native`, as `make bench`
does); `AUDITOR_PURE_PYTHON=1` measures them as Python.
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
from analyzers.engine.guardrails.pipeline import audit_paragraph  # noqa: E402
from analyzers.engine.guardrails.settings import SourceIndex, settings_from_config  # noqa: E402
from analyzers.engine.guardrails.stream import audit_text  # noqa: E402
from analyzers.engine.registry import build_registry  # noqa: E402

SAMPLES = ROOT / "tests" / "samples" / "config.json"
RUNS = 7
AUDITS_PER_RUN = 300
PARAGRAPH_SAMPLES = 5000
TARGET_P99_MS = 1.0
TARGET_RATE = 2000
TARGET_LINEAR_S = 1.0
# the one-regex baseline on the machine the older figures of docs/contributing/performance.md came from
REFERENCE_BASELINE = 25_318


def paragraph_400() -> str:
    """A realistic paragraph of exactly 400 characters: 4 links, 3 claims."""
    text = (
        "Decathlon grew conversion by 50% ([case study](https://www.acme.example/customers/"
        "decathlon)), and Globex reported +206% revenue. Read [this article](https://www.acme."
        "example/blog/faceting) or the [API reference](https://docs.acme.example/api/search) "
        "before you start; see also [Faceting 101 | Acme | Acme](https://www.acme.example/blog/"
        "x). PcComponentes lifted revenue by 12%. Tune the synonyms now."
    )
    assert len(text) == 400, len(text)
    return text


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


def response_2kb_bare_html() -> str:
    """The 2 KB response with 10 bare URLs (5 allowed, 5 not) and 5 HTML tags added."""
    extra = (
        "\n\nSee https://www.acme.example/docs/a, www.acme.example/b and "
        "https://docs.acme.example/api/c; mail support@acme.example or visit acme.example/d. "
        "Not https://evil.example/x?d=SECRET nor www.evil.com/p, evil.com/q, //cdn.evil.test/r "
        "or http://0x7f.1/s.\n\n<b>Bold</b> and <i>italic</i>, <img src=x onerror=alert(1)> "
        "<script>alert(1)</script> <span class=x>span</span>"
    )
    return response_2kb() + extra


def bench_paragraph(config: AuditorConfig) -> None:
    settings = settings_from_config(config)
    sources = SourceIndex(
        settings, [Source(title="Faceting 101", url="https://www.acme.example/blog/faceting")]
    )
    text = paragraph_400()
    result = audit_paragraph(text, 0, settings, sources)
    print(f"paragraph: {len(text)} chars, {len(result.links)} links, {len(result.claims)} claims")
    for _ in range(200):
        audit_paragraph(text, 0, settings, sources)
    wall, cpu = [], []
    for _ in range(PARAGRAPH_SAMPLES):
        w0, c0 = time.perf_counter(), time.process_time()
        audit_paragraph(text, 0, settings, sources)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)

    def p(times: list[float], q: float) -> float:
        return sorted(times)[min(len(times) - 1, int(len(times) * q))] * 1e3

    verdict = "OK" if p(cpu, 0.99) < TARGET_P99_MS else "MISSED"
    print(
        f"paragraph latency over {PARAGRAPH_SAMPLES} audits: CPU time p50 {p(cpu, 0.5):.3f} ms, "
        f"p99 {p(cpu, 0.99):.3f} ms (target p99 < {TARGET_P99_MS:g} ms: {verdict}); "
        f"wall clock p50 {p(wall, 0.5):.3f} ms, p99 {p(wall, 0.99):.3f} ms"
    )


def bench_engine(config: AuditorConfig, text: str, name: str) -> None:
    registry = build_registry(include_entry_points=False)
    auditor = Auditor(config, registry)
    ids = [a.id for a in registry if config.is_enabled(a.id, a.enabled_by_default)]
    print(f"== full engine on {name}")
    audit = AuditInput(response=text, user_input="How do I tune search?")
    links = text.count("](")
    result = audit_text(text, settings_from_config(config))
    report = asyncio.run(auditor.audit(audit))
    print(f"engine analyzers: {ids} (statuses: {[r.status for r in report.results]})")
    print(
        f"response: {len(text)} chars, {links} links, {len(result.claims)} claims, "
        f"{sum(len(r.annotations) for r in report.results)} annotations"
    )

    async def run(n: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            await auditor.audit(audit)
        return n / (time.perf_counter() - wall), n / (time.process_time() - cpu)

    baseline = re.compile(r"\[([^\]\n]*)\]\(([^)\s]*)\)|\d+%|\$\d+[MBK]?|\d+x")

    def base_run(n: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            baseline.findall(text)
        return n / (time.perf_counter() - wall), n / (time.process_time() - cpu)

    asyncio.run(run(50))
    engine_wall, engine_cpu, base_wall, base_cpu = [], [], [], []
    for _ in range(RUNS):
        wall, cpu = asyncio.run(run(AUDITS_PER_RUN))
        engine_wall.append(wall)
        engine_cpu.append(cpu)
        wall, cpu = base_run(AUDITS_PER_RUN * 20)
        base_wall.append(wall)
        base_cpu.append(cpu)
    rate_wall, rate_cpu = statistics.median(engine_wall), statistics.median(engine_cpu)
    bw, bc = statistics.median(base_wall), statistics.median(base_cpu)
    verdict = "OK" if rate_cpu >= TARGET_RATE else "MISSED"
    print(
        f"full engine ({name}): median {rate_cpu:,.0f} audits per CPU-second on one core "
        f"({rate_wall:,.0f}/s by wall clock) over {RUNS} runs of {AUDITS_PER_RUN} "
        f"(target >= {TARGET_RATE:,}: {verdict})"
    )
    print(
        f"baseline, one compiled regex pass: median {bc:,.0f} passes per CPU-second "
        f"({bw:,.0f}/s by wall clock)"
    )
    print(f"ratio engine / baseline: {rate_cpu / bc:.4f} (1/{bc / rate_cpu:,.1f})")
    print(
        f"machine-normalised: {rate_cpu * REFERENCE_BASELINE / bc:,.0f} audits/s on the machine "
        f"whose baseline ran {REFERENCE_BASELINE:,} passes/s (the older figures of docs/contributing/performance.md); "
        "the target is judged on the absolute CPU figure above"
    )


def adversarial_inputs() -> dict[str, str]:
    mb = 10**6
    return {
        "'[' * 10**6": "[" * mb,
        "'(' nesting": "[x](" + "(" * (mb - 4),
        "'http://' repeated": "http://" * (mb // 7),
        "'[a](' repeated": "[a](" * (mb // 4),
        "'<a href=' repeated": '<a href="x">' * (mb // 12),
        "one 1 MB sentence": ("Globex grew 30% with [x](https://evil.test/) and more " * 20000)[
            :mb
        ],
        "backticks": "` `` ``` " * (mb // 9),
        "stripped autolinks": "<https://evil.test/a> " * (mb // 22),
        "stripped attributions": "Read more, according to [source](https://evil.test/). "
        * (mb // 54),
        "100k bare URLs": " ".join(
            f"https://h{i % 97}.example/p?q={i}" if i % 2 else f"www.acme.example/{i}"
            for i in range(100_000)
        ),
        "50k HTML tags": " ".join(
            (
                "<b>x</b>",
                "<img src=x onerror=alert(1)>",
                "<script>a</script>",
                "<i>y</i>",
                "<div style='background:url(https://evil.test/)'>",
            )[i % 5]
            for i in range(50_000)
        ),
        "'a.b' repeated": "a.b" * (mb // 3),
        "'www.' repeated": "www." * (mb // 4),
        "'x@y.' repeated": "x@y." * (mb // 4),
        "'//' repeated": "//" * (mb // 2),
        "'<b ' unclosed": "<b " * (mb // 3),
        "'<a' with one '>'": "<a" * (mb // 2 - 1) + ">",
        "'<script>' unclosed": "<script>" * (mb // 8),
        "long URL run": "https://evil.example/" + "a.b/" * (mb // 4),
        "claims, valid and not": (
            "PcComponentes lifted revenue by 12%. Decathlon grew conversion by 50% ([case "
            "study](https://www.acme.example/customers/decathlon)). "
        )
        * (mb // 134),
    }


def bench_linear(config: AuditorConfig) -> None:
    """The pipeline as the auditor runs it: bounded by the configuration's limits (the
    records past them are counted, not built)."""
    settings = settings_from_config(config)
    for name, text in adversarial_inputs().items():
        wall, cpu = [], []
        for _ in range(3):
            w0, c0 = time.perf_counter(), time.process_time()
            audit_text(text, settings, (), config.limits)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        elapsed = statistics.median(cpu)
        verdict = "OK" if elapsed < TARGET_LINEAR_S else "MISSED"
        print(
            f"linear: {name:<22} {len(text) / 1e6:.2f} MB in median {elapsed:.3f} CPU-s "
            f"of 3 ({verdict}; wall clock {statistics.median(wall):.3f} s)"
        )


def main() -> None:
    from analyzers.engine import guardrails

    print(
        "guardrails: "
        + (
            "compiled with mypyc"
            if guardrails.COMPILED
            else "Python (not compiled, or AUDITOR_PURE_PYTHON set)"
        )
    )
    config = load_config()
    bench_paragraph(config)
    bench_engine(config, response_2kb(), "2 KB response")
    bench_engine(config, response_2kb_bare_html(), "2 KB + 10 bare URLs + 5 HTML tags")
    bench_linear(config)


if __name__ == "__main__":
    main()
