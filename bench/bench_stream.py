"""Stream benchmark: server CPU of a streamed response against one POST of the same text.

    .venv/bin/python bench/bench_stream.py

One server process (`python -m auditor_site.serve`, a throwaway SQLite file, analysis in
its task threads). Each round sends the same text of one-line paragraphs three ways and
reads the server's CPU time (from /proc) around each, until the audit is analysed and
stored:

1. one `POST /api/audits?wait=true` (the baseline);
2. `POST /api/audits/stream`, one NDJSON `{"text": ...}` line per paragraph, in one body;
3. the same stream sent in 4 KB pieces with a pause between them (a model writing).

It prints medians and the ratios to the baseline (target: a stream within 2x of one POST,
whatever the paragraph size).
"""

from __future__ import annotations

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
TMP = Path(tempfile.mkdtemp(prefix="bench-stream-"))
os.environ["DATABASE_URL"] = f"sqlite:///{TMP / 'bench.sqlite3'}"
os.environ["AUDITOR_RATE_LIMIT_PER_MINUTE"] = "0"

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.core.management import call_command  # noqa: E402

from analyzers.models import ApiKey  # noqa: E402
from tests.live_support import free_port, start_server, stop  # noqa: E402

ROUNDS = 5


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def paragraphs(n: int, words: int) -> list[str]:
    line = " ".join(["Acme keeps search results relevant"] * words)
    return [f"{i}. {line}\n\n" for i in range(n)]


def post_once(http: httpx.Client, server: str, text: str, tag: str) -> None:
    body = {"user_input": f"question {tag}", "response": text, "collision_key": tag}
    r = http.post(f"{server}/api/audits?wait=true", json=body)
    assert r.status_code in (200, 201) and r.json()["status"] == "complete", r.text[:300]


def stream_once(
    http: httpx.Client, server: str, pieces: list[str], tag: str, chunk_bytes: int = 0
) -> None:
    head = json.dumps({"user_input": f"question {tag}", "collision_key": tag})
    body = (head + "\n" + "".join(json.dumps({"text": p}) + "\n" for p in pieces)).encode()
    if chunk_bytes:

        def content():
            for i in range(0, len(body), chunk_bytes):
                yield body[i : i + chunk_bytes]
                time.sleep(0.001)

        data = content()
    else:
        data = body
    r = http.post(f"{server}/api/audits/stream", content=data)
    assert r.status_code == 200 and "event: audit" in r.text, r.text[-300:]
    final = r.text.rsplit("event: audit\ndata: ", 1)[1].split("\n", 1)[0]
    assert json.loads(final)["status"] == "complete", final[:300]


def main() -> None:
    call_command("migrate", verbosity=0)
    _, key = ApiKey.create_key("bench", scope="admin")
    port = free_port()
    proc = start_server(
        port,
        TMP / "server.log",
        AUDITOR_RATE_LIMIT_PER_MINUTE="0",
        AUDITOR_MAX_BODY_BYTES="4000000",
    )
    server = f"http://127.0.0.1:{port}"
    print("bench_stream: server CPU per audit, a stream against one POST of the same text")
    try:
        with httpx.Client(timeout=300, headers={"Authorization": f"Bearer {key}"}) as http:
            for n, words in ((4000, 1), (400, 10), (40, 100)):
                pieces = paragraphs(n, words)
                text = "".join(pieces)
                cost: dict[str, list[float]] = {"post": [], "stream": [], "stream 4 KB": []}
                for r in range(ROUNDS + 1):
                    for name, send in (
                        ("post", lambda t, text=text: post_once(http, server, text, t)),
                        ("stream", lambda t, p=pieces: stream_once(http, server, p, t)),
                        ("stream 4 KB", lambda t, p=pieces: stream_once(http, server, p, t, 4096)),
                    ):
                        before = cpu_seconds(proc.pid)
                        send(f"{name}-{n}-{r}")
                        if r:  # the first round warms up
                            cost[name].append(cpu_seconds(proc.pid) - before)
                base = statistics.median(cost["post"])
                figures = ", ".join(
                    f"{name} {statistics.median(v) * 1000:.0f} ms ({statistics.median(v) / base:.1f}x)"
                    for name, v in cost.items()
                )
                print(
                    f"  {n} paragraphs of {len(pieces[0])} chars ({len(text) // 1000} KB): {figures}"
                )
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
