"""Shadow benchmark: an audit's own latency under load, with and without a candidate in shadow.

    .venv/bin/python bench/bench_shadow.py [--rate 20] [--seconds 15] [--rounds 4]

One server of this tree (analysis in its task threads) on a throwaway SQLite file. Each
round runs two scenarios one after the other, their order alternating from round to
round so the machine's noise hits both: no candidate, and one candidate in shadow (the
active configuration with one more allowed host, sampling every audit; its shadow
backlog is left to drain before the next scenario). In each, `--rate` audits a second
are submitted for `--seconds` with `?wait=true` from a pool of connections (an open loop:
a slow answer does not slow the arrivals), and each answer's latency (submission to
complete audit) is recorded. It prints p50/p95/mean per scenario, the medians over the
rounds and their ratio, how many audits the candidate analysed and how many it skipped,
and fails (exit 1) when the median p50 or p95 rises by 10% or more.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
TMP = Path(tempfile.mkdtemp(prefix="bench-shadow-"))
os.environ["DATABASE_URL"] = f"sqlite:///{TMP / 'bench.sqlite3'}"
os.environ["SECRET_KEY"] = "bench-shadow-" + "k" * 50

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.core.management import call_command  # noqa: E402

from analyzers.models import ApiKey  # noqa: E402
from tests.live_support import free_port, server_command, stop  # noqa: E402

PARAGRAPH = (
    "Acme's search API ranks results by relevance and business rules; most teams configure "
    "facets first, then synonyms and typo tolerance. See https://www.acme.example/docs "
    "or the guide at https://blog.other.example/tuning for details. "
)
LIMIT = 0.10


def start() -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {
        **os.environ,
        "AUDITOR_TASK_BACKEND": "thread",
        "AUDITOR_ANALYSIS_PROCESSES": "0",
        "AUDITOR_RATE_LIMIT_PER_MINUTE": "0",
        "AUDITOR_WAIT_PER_KEY": "1000",
        "PYTHONUNBUFFERED": "1",
    }
    with (TMP / f"server-{port}.log").open("ab") as log:
        proc = subprocess.Popen(
            server_command(port), cwd=BASE, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/api/docs", timeout=1.0)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server did not answer; log in {TMP}")


async def load(url: str, key: str, rate: float, seconds: float, tag: str) -> list[float]:
    """Submit `rate` audits a second for `seconds` (open loop); each one's latency in ms."""
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as c:

        async def one(i: int) -> None:
            body = {
                "user_input": f"{tag} question {i}?",
                "response": f"{tag} answer {i}. " + PARAGRAPH * 4,
            }
            t0 = time.perf_counter()
            r = await c.post("/api/audits?wait=true", json=body)
            if r.status_code == 201 and r.json().get("status") == "complete":
                latencies.append((time.perf_counter() - t0) * 1000)

        tasks = []
        start_at = time.perf_counter()
        n = int(rate * seconds)
        for i in range(n):
            delay = start_at + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    if len(latencies) < n * 0.95:
        raise SystemExit(f"only {len(latencies)} of {n} audits completed in time (log in {TMP})")
    return latencies


def summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "p50": statistics.median(ordered),
        "p95": ordered[int(len(ordered) * 0.95) - 1],
        "mean": statistics.fmean(ordered),
        "n": len(ordered),
    }


def drained(url: str, headers: dict, cid: int, limit_s: float = 60.0) -> int:
    """Wait until the candidate's shadow results stop growing (its backlog ran, or
    `limit_s` passed); how many there are."""
    last, deadline = -1, time.monotonic() + limit_s
    while time.monotonic() < deadline:
        diff = httpx.get(url + f"/api/config/candidates/{cid}/diff", headers=headers).json()
        if diff["compared"] == last:
            return last
        last = diff["compared"]
        time.sleep(1.0)
    return last


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=20.0, help="audits per second")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    key = ApiKey.create_key("bench admin", scope="admin")[1]
    proc, url = start()
    headers = {"Authorization": f"Bearer {key}"}
    rows = {"without": [], "with": []}
    shadowed = skipped = 0
    try:
        asyncio.run(load(url, key, args.rate, 3, "warm-up"))
        for round_ in range(args.rounds):
            order = ("without", "with") if round_ % 2 == 0 else ("with", "without")
            for scenario in order:
                if scenario == "without":
                    rows["without"].append(
                        summary(
                            asyncio.run(
                                load(url, key, args.rate, args.seconds, f"r{round_}-without")
                            )
                        )
                    )
                    continue
                config = httpx.get(url + "/api/config", headers=headers).json()
                config["allowed_hosts"] = [*config.get("allowed_hosts", []), "blog.other.example"]
                created = httpx.post(
                    url + "/api/config/candidates",
                    headers=headers,
                    json={"name": f"bench {round_}", "config": config},
                )
                created.raise_for_status()
                cid = created.json()["id"]
                time.sleep(2.5)  # the servers' cache of candidates in shadow (audits.shadow.hooks)
                rows["with"].append(
                    summary(asyncio.run(load(url, key, args.rate, args.seconds, f"r{round_}-with")))
                )
                compared = drained(url, headers, cid)
                one = httpx.get(url + f"/api/config/candidates/{cid}", headers=headers).json()
                shadowed += compared
                skipped += one["shadow_skipped"]
                httpx.delete(url + f"/api/config/candidates/{cid}", headers=headers)
                time.sleep(2.5)
    finally:
        stop(proc)

    print(
        f"bench_shadow: {args.rate:g} audits/s for {args.seconds:g} s, {args.rounds} round(s), "
        "latency of POST /api/audits?wait=true (ms)"
    )
    for name, runs in rows.items():
        for i, r in enumerate(runs):
            print(
                f"  {name:7s} round {i}: p50 {r['p50']:7.1f}  p95 {r['p95']:7.1f}  "
                f"mean {r['mean']:7.1f}  ({r['n']} audits)"
            )
    print(f"  the candidate analysed {shadowed} audits in shadow and skipped {skipped}")
    failed = False
    for stat in ("p50", "p95", "mean"):
        before = statistics.median(r[stat] for r in rows["without"])
        after = statistics.median(r[stat] for r in rows["with"])
        change = after / before - 1
        checked = stat != "mean"  # the acceptance: p50 and p95
        print(
            f"  median {stat}: {before:.1f} -> {after:.1f} ms (ratio {after / before:.3f}, "
            f"{change:+.1%})" + ("" if checked else " (reported, not checked)")
        )
        failed |= checked and change >= LIMIT
    if failed:
        print(f"FAILED: the audits' own latency rose by {LIMIT:.0%} or more")
        sys.exit(1)


if __name__ == "__main__":
    main()
