"""Bounded work: the detail page of huge responses, and small submissions next to huge ones.

    .venv/bin/python bench/bench_detail.py [--skip-server]

1. Detail page: the repeated paragraph of issue 17 (a customer claim, a link the rules
   strip and a `Namedrop:` line the rules remove) as a 22 KB, 90 KB and ~1 MB response,
   audited by the real pipeline (execute.execute_run), then GET /audits/<id>/ in-process
   (django.test.Client, whole middleware stack and templates): median of 5 (target < 500 ms
   at 1 MB). Baseline in the same run: a one-paragraph audit's detail page.
2. Starvation: daphne on 127.0.0.1 (thread task backend, SQLite file); eight ~1 MB
   `POST /api/audits?wait=true` at once from eight keys while another key sends small
   submissions one after another: their latency p50/p95 (target p95 < 1 s) against the
   same small submissions on the idle server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

BASE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
TMP = Path(tempfile.mkdtemp(prefix="bench-detail-"))
os.environ["DATABASE_URL"] = f"sqlite:///{TMP / 'bench.sqlite3'}"
os.environ["AUDITOR_RATE_LIMIT_PER_MINUTE"] = "0"
os.environ["DEBUG"] = "false"
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

PARAGRAPH = (
    "Decathlon grew conversion by 80% with Acme. See [the study](https://evil.example/s).\n"
    "Namedrop: Globex\n\n"
)
MAX_BODY = 1_000_000
# Just under the body limit once JSON-encoded (each newline is two bytes there).
ONE_MB = (MAX_BODY - 2_000) // len(json.dumps(PARAGRAPH)) * len(PARAGRAPH)
CONFIG = {
    "analyzers": {"links": {"enabled": True, "check_health": False}},
    "allowed_hosts": ["acme.example", "www.acme.example"],
    "known_customers": [{"name": "Decathlon", "slug": "decathlon"}],
}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def response_of(size: int) -> str:
    return PARAGRAPH * max(1, size // len(PARAGRAPH))


def configure() -> None:
    from analyzers.config_store import export_config, save_config

    config = export_config()
    config["analyzers"].setdefault("links", {}).update(CONFIG["analyzers"]["links"])
    config["allowed_hosts"] = CONFIG["allowed_hosts"]
    config["known_customers"] = CONFIG["known_customers"]
    save_config(config, actor="bench", source="bench")


def audit(text: str):
    from audits.execution import execute
    from audits.intake import submit

    run = submit.submit_audit(
        user_input="Which retailers use Acme?",
        response=text,
        sources=[],
        metadata={},
        enqueue=False,
    )
    started = time.perf_counter()
    execute.execute_run(run.pk)
    return run.pk, (time.perf_counter() - started) * 1000


def bench_detail() -> None:
    from audits.models import Annotation

    user = get_user_model().objects.create_user("bench", password="x", is_staff=True)
    client = Client()
    client.force_login(user)

    def page_ms(pk) -> tuple[float, int]:
        times, size = [], 0
        for _ in range(5):
            started = time.perf_counter()
            response = client.get(f"/audits/{pk}/")
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.status_code
            size = len(response.content)
        return statistics.median(times), size

    base_pk, _ = audit(PARAGRAPH)
    page_ms(base_pk)  # warm-up: templates, code
    baseline, _ = page_ms(base_pk)
    print(f"detail page, one paragraph (baseline): {baseline:7.1f} ms", flush=True)
    for label, size in (("22 KB", 22_000), ("90 KB", 90_000), ("1 MB", ONE_MB)):
        pk, audit_ms = audit(response_of(size))
        ms, html = page_ms(pk)
        stored = Annotation.objects.filter(result__audit_id=pk).count()
        flag = "  (target < 500 ms)" if label == "1 MB" else ""
        print(
            f"detail page, {label:>5} repeated paragraph: {ms:7.1f} ms (x{ms / baseline:.1f} "
            f"baseline; page {html / 1e6:.1f} MB; {stored} stored findings; "
            f"audit took {audit_ms:.0f} ms){flag}",
            flush=True,
        )


def bench_starvation() -> None:
    from analyzers.models import ApiKey
    from tests.live_support import free_port, start_daphne, stop

    big_keys = [ApiKey.create_key(f"bench-big-{i}", scope="ingest")[1] for i in range(8)]
    _, small_key = ApiKey.create_key("bench-small", scope="ingest")
    port = free_port()
    os.environ["AUDITOR_TEST_DB"] = str(TMP / "unused.sqlite3")
    proc = start_daphne(port, TMP / "daphne.log", DATABASE_URL=os.environ["DATABASE_URL"])
    url = f"http://127.0.0.1:{port}/api/audits"
    small = {
        "user_input": "Which retailers use Acme?",
        "response": "Decathlon grew conversion by 50% with Acme. See https://www.acme.example.",
    }

    def small_latencies(n: int, stop_flag: threading.Event | None = None) -> list[float]:
        out = []
        with httpx.Client(headers={"Authorization": f"Bearer {small_key}"}, timeout=300) as c:
            for _ in range(n):
                if stop_flag is not None and stop_flag.is_set():
                    break
                started = time.perf_counter()
                r = c.post(url, json=small)
                out.append((time.perf_counter() - started) * 1000)
                assert r.status_code == 202, r.text
                time.sleep(0.05)
        return out

    try:
        small_latencies(10)  # warm-up
        idle = small_latencies(40)
        big_body = {"user_input": "q", "response": response_of(ONE_MB)}
        outcomes: list[tuple[int, float, int]] = []

        def big(key: str) -> None:
            with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=600) as c:
                started = time.perf_counter()
                r = c.post(url + "?wait=true", json=big_body)
                outcomes.append((r.status_code, time.perf_counter() - started, len(r.content)))

        threads = [threading.Thread(target=big, args=(key,)) for key in big_keys]
        for t in threads:
            t.start()
        time.sleep(0.5)  # the huge bodies are on their way
        done = threading.Event()
        busy: list[float] = []
        runner = threading.Thread(target=lambda: busy.extend(small_latencies(10_000, done)))
        runner.start()
        for t in threads:
            t.join()
        done.set()
        runner.join()
        print(
            f"small submissions, idle server: p50 {pct(idle, 50):.0f} ms  "
            f"p95 {pct(idle, 95):.0f} ms ({len(idle)} requests)"
        )
        print(
            f"small submissions during eight ~1 MB wait=true audits: p50 {pct(busy, 50):.0f} ms  "
            f"p95 {pct(busy, 95):.0f} ms  max {max(busy):.0f} ms ({len(busy)} requests; "
            f"target p95 < 1000 ms)"
        )
        codes = sorted(code for code, _, _ in outcomes)
        print(
            f"the eight 1 MB wait=true: statuses {codes}, slowest {max(s for _, s, _ in outcomes):.1f} s, "
            f"largest body {max(b for _, _, b in outcomes) / 1e6:.1f} MB"
        )
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-server", action="store_true")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    configure()
    bench_detail()
    if not args.skip_server:
        bench_starvation()


if __name__ == "__main__":
    main()
