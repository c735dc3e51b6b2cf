"""Proxy benchmark: what the auditing proxy adds to a streamed chat completion.

    .venv/bin/python bench/bench_proxy.py

One server process (`python -m auditor_site.serve`, a throwaway SQLite file), a scripted
upstream on 127.0.0.1 (tests/proxy_upstream.py) streaming one token at a time. Every
figure compares, in the same run, the same scripted answer read straight from the upstream
and read through the proxy (mode `clean`):

1. Added latency per paragraph: when a paragraph's cleaned text reaches the client through
   the proxy, minus when the token that completes it (the blank line) reaches a client of
   the upstream directly, both measured from the stream's first byte; p50 / p95 (target p50
   < 5 ms).
2. Time to first content token: upstream vs proxy. The proxy sends a paragraph only once it
   is audited, so its first content arrives when the first paragraph is complete: the
   share of that wait which is paragraph buffering (the upstream still writing paragraph 1)
   against the proxy's own work is stated.
3. 50 concurrent streams at 40 tokens/s each: tokens delivered per second (all streams) and
   the server's CPU time per stream (from /proc).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BASE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
TMP = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
os.environ["DATABASE_URL"] = f"sqlite:///{TMP / 'bench.sqlite3'}"
os.environ["AUDITOR_RATE_LIMIT_PER_MINUTE"] = "0"
os.environ["AUDITOR_PROXY_ALLOW_PRIVATE"] = "true"

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.core.management import call_command  # noqa: E402

from analyzers.config_store import save_config  # noqa: E402
from analyzers.models import ApiKey  # noqa: E402
from tests.live_support import free_port, start_server, stop  # noqa: E402
from tests.proxy_upstream import Completion, UpstreamServer, tokens  # noqa: E402

PARAGRAPH = (
    "Acme is easy to set up and most teams go live within a week of starting. "
    "Search results stay relevant as the catalogue grows."
)
ANSWER = "\n\n".join(f"{i}. {PARAGRAPH}" for i in range(1, 6))
MESSAGES = [{"role": "user", "content": "How fast is Acme to set up?"}]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def read_stream(http: httpx.AsyncClient, url: str, headers: dict, token_delay: float):
    """(first byte, first content, [paragraph-complete times], content, tokens) from start."""
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    start = time.perf_counter()
    first_byte = first_content = None
    paragraphs: list[float] = []
    text, count = "", 0
    async with http.stream("POST", url, json=body, headers=headers) as response:
        async for line in response.aiter_lines():
            now = time.perf_counter() - start
            first_byte = first_byte if first_byte is not None else now
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            delta = (chunk.get("choices") or [{}])[0].get("delta", {}).get("content")
            if not delta:
                continue
            count += len(tokens(delta))
            first_content = first_content if first_content is not None else now
            before = text.count("\n\n")
            text += delta
            paragraphs += [now] * (text.count("\n\n") - before)
    return first_byte, first_content, paragraphs, text, count


async def latency(server: str, upstream: UpstreamServer, key: str, runs: int = 12):
    token_delay = 0.01
    added, ttft_up, ttft_proxy, para1_up = [], [], [], []
    async with httpx.AsyncClient(timeout=60) as http:
        for i in range(runs + 2):
            upstream.default = Completion(content=ANSWER, token_delay=token_delay)
            direct = await read_stream(
                http, f"{upstream.base_url}/chat/completions", {}, token_delay
            )
            proxied = await read_stream(
                http,
                f"{server}/v1/chat/completions",
                {"Authorization": f"Bearer {key}"},
                token_delay,
            )
            if i < 2:
                continue  # warm-up
            assert len(direct[2]) == len(proxied[2]) == 4, (direct[2], proxied[2])
            for d, p in zip(direct[2], proxied[2], strict=True):
                added.append(((p - proxied[0]) - (d - direct[0])) * 1000)
            ttft_up.append(direct[1] * 1000)
            ttft_proxy.append(proxied[1] * 1000)
            para1_up.append(direct[2][0] * 1000)
    return added, ttft_up, ttft_proxy, para1_up


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def concurrent(server: str, upstream: UpstreamServer, key: str, pid: int, n: int = 50):
    answer = " ".join([PARAGRAPH] * 3).replace(". Search", ".\n\nSearch")  # ~ 100 tokens
    upstream.default = Completion(content=answer, token_delay=1 / 40)
    limits = httpx.Limits(max_connections=n + 5)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        results = await asyncio.gather(
            *[
                read_stream(
                    http,
                    f"{server}/v1/chat/completions",
                    {"Authorization": f"Bearer {key}"},
                    1 / 40,
                )
                for _ in range(n)
            ]
        )
        wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    delivered = sum(r[4] for r in results)
    per_stream = [r[4] / (r[2][-1] if r[2] else wall) for r in results]
    complete = sum(
        1 for r in results if r[3].replace("\n\n", " ").count("Acme") == answer.count("Acme")
    )
    return delivered, wall, cpu, per_stream, complete, len(tokens(answer))


def main() -> None:
    call_command("migrate", verbosity=0)
    _, key = ApiKey.create_key("bench", scope="ingest")
    with UpstreamServer() as upstream:
        config = json.loads((BASE / "tests" / "samples" / "config.json").read_text())
        config["proxy"] = {"base_url": upstream.base_url, "timeout_s": 60}
        save_config(config, actor="bench")
        port = free_port()
        proc = start_server(
            port,
            TMP / "server.log",
            AUDITOR_PROXY_ALLOW_PRIVATE="true",
            AUDITOR_RATE_LIMIT_PER_MINUTE="0",
        )
        server = f"http://127.0.0.1:{port}"
        try:
            added, ttft_up, ttft_proxy, para1 = asyncio.run(latency(server, upstream, key))
            print(
                "bench_proxy: streamed chat completions through the proxy (mode clean), "
                "one server process, scripted upstream at 100 tokens/s"
            )
            print(
                f"  added latency per paragraph ({len(added)} paragraphs): "
                f"p50 {pct(added, 0.5):.2f} ms, p95 {pct(added, 0.95):.2f} ms (target p50 < 5 ms)"
            )
            up, px, p1 = (statistics.median(v) for v in (ttft_up, ttft_proxy, para1))
            buffering = (p1 - up) / (px - up) if px > up else 1.0
            print(
                f"  time to first content token: upstream {up:.1f} ms, proxy {px:.1f} ms "
                f"(median); the first paragraph is complete upstream at {p1:.1f} ms, so "
                f"{buffering:.0%} of the proxy's extra wait is paragraph buffering "
                f"(by design: nothing leaves unaudited), {px - p1:.1f} ms its own work "
                f"(audit created, paragraph audited and stored)"
            )
            delivered, wall, cpu, per_stream, complete, per_answer = asyncio.run(
                concurrent(server, upstream, key, proc.pid)
            )
            print(
                f"  50 concurrent streams at 40 tokens/s ({per_answer} tokens each): "
                f"{delivered / wall:.0f} tokens/s delivered in all "
                f"(ideal {50 * 40}), per stream median {statistics.median(per_stream):.1f} "
                f"tokens/s, {complete}/50 complete; server CPU {cpu:.2f} s in {wall:.1f} s = "
                f"{cpu / 50 * 1000:.0f} ms per stream ({cpu / wall / 50:.1%} of a core each)"
            )
        finally:
            stop(proc)


if __name__ == "__main__":
    main()
