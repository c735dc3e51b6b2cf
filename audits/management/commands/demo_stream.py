"""`manage.py demo_stream [--rate N]`: stream sample responses through /ws/ingest/, like a model.

So that someone running `make run` sees live audits at once: every response has problems
of one kind or another (ungrounded claims, disallowed links, prompt leaks, bias, tone,
JSON, length), and arrives a few words at a time. Runs until interrupted (or `--count`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
import uuid
from dataclasses import dataclass, field

from django.core.management.base import BaseCommand, CommandError

from analyzers.models import ApiKey


@dataclass(frozen=True)
class DemoSample:
    """One streamed demo response and what it is there to show (tests/audits/dashboard/test_demo_samples.py
    streams every sample and checks that `analyzer` surfaces it with a `finding`)."""

    user_input: str
    response: str
    analyzer: str
    finding: str
    options: dict = field(default_factory=dict)  # per-audit overrides, as in the API


SAMPLES: list[DemoSample] = [
    DemoSample(
        "Which retailers use Acme?",
        "Al-Futtaim achieved +206% revenue after adopting Acme.\n\nAcme is easy to set up, "
        "and most teams go live in a week.",
        "grounding",
        "UNGROUNDED_CUSTOMER_CLAIM",
    ),
    DemoSample(
        "Any results from Decathlon?",
        "Decathlon grew conversion by 50% ([case study](https://www.acme.example/customers/decathlon)).\n\n"
        "PcComponentes lifted revenue per search by 12%.",
        "grounding",
        "UNGROUNDED_CUSTOMER_CLAIM",
    ),
    DemoSample(
        "Where can I read more about ranking?",
        "See [this guide](https://random-blog.example.org/acme-tips) for tips.\n\n"
        "The API reference is at [docs](https://docs.acme.example/api/ranking).\n\n"
        "Never click [here](javascript:alert(1)).",
        "links",
        "LINK_UNSAFE_SCHEME",
    ),
    DemoSample(
        "How do I set up faceting?",
        "Read [this article](https://www.acme.example/blog/faceting) first.\n\n"
        "Namedrop: mention Decathlon here. VALUE SELL: push the premium plan.",
        "prompt_leak",
        "PROMPT_LEAK",
    ),
    DemoSample(
        "Is my plan the best one?",
        "You're absolutely right, what a brilliant question! Everyone knows this is the best "
        "plan, as every expert agrees.\n\nObviously, anyone can see that.",
        "bias",
        "sycophancy",
    ),
    DemoSample(
        "Why is my search slow?",
        "As I already explained, this is basic stuff. Just read the docs, honestly.\n\n"
        "Whatever, it works on our side lol.",
        "tone",
        "condescending",
    ),
    # The caller asks for JSON (`require_json`, a per-audit option), the model breaks it off.
    DemoSample(
        "Give me the next move as JSON.",
        '{"move": "e4", "next": {"peg"\n\nSorry, I cannot finish that.',
        "redflag",
        "JSON_PARSE_FAILED",
        options={"redflag": {"require_json": True, "required_fields": ["move", "next.peg"]}},
    ),
    # A self-contradiction as redflag defines it: "not sure" and "definitely" about one claim.
    DemoSample(
        "Summarise the release notes.",
        "The release is definitely faster than the last one.\n\n"
        "To be honest, I am not entirely sure it is faster: the benchmarks are still running.",
        "redflag",
        "SELF_CONTRADICTION",
    ),
]


def stream_head(sample: DemoSample, n: int, run: str = "") -> dict:
    """The first frame of stream `n` of a run: a collision key of its own, new in every
    run (a restarted demo_stream repeats its samples: they are no duplicates)."""
    head = {
        "user_input": sample.user_input,
        "metadata": {"source": "demo_stream", "n": n, "run": run},
        "collision_key": f"demo-stream-{run}-{n}",
    }
    if sample.options:
        head["options"] = sample.options
    return head


class Command(BaseCommand):
    help = "Stream sample responses with problems of every kind through the stream endpoint."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument(
            "--key", default="", help="an ingest API key (one is created if omitted)"
        )
        parser.add_argument(
            "--rate", type=float, default=0.2, help="responses started per second (default 0.2)"
        )
        parser.add_argument("--words-per-second", type=float, default=40.0)
        parser.add_argument(
            "--count", type=int, default=0, help="stop after N responses (0: never)"
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=60.0,
            help="seconds to wait for the server to accept connections",
        )

    def handle(self, *args, **options):
        try:
            import websockets  # noqa: F401
        except ImportError as exc:
            raise CommandError("demo_stream needs the websockets package") from exc
        key = options["key"] or self._demo_key()
        url = options["url"].rstrip("/")
        self._wait_for_server(url, options["wait"])
        self.stdout.write(f"demo_stream: streaming to {url}/ws/ingest/ (Ctrl-C to stop)")
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(self._run(url, key, options))

    def _demo_key(self) -> str:
        _, raw = ApiKey.create_key("demo_stream", scope="ingest")
        return raw

    def _wait_for_server(self, url: str, wait: float) -> None:
        import httpx

        deadline = time.monotonic() + wait
        while True:
            try:
                httpx.get(url + "/accounts/login/", timeout=2.0)
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise CommandError(f"no server answers at {url}") from None
                time.sleep(0.3)

    async def _run(self, url: str, key: str, options) -> None:
        rng = random.Random()
        run = uuid.uuid4().hex[:12]
        tasks: set[asyncio.Task] = set()
        count = options["count"]
        for n in itertools.count():
            if count and n >= count:
                break
            sample = SAMPLES[n % len(SAMPLES)]
            task = asyncio.create_task(
                self._stream(
                    url,
                    key,
                    stream_head(sample, n, run),
                    sample.response,
                    options["words_per_second"],
                )
            )
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(rng.expovariate(options["rate"]) if options["rate"] > 0 else 1)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _stream(self, url, key, head: dict, response: str, wps) -> None:
        import websockets

        ws_url = url.replace("http://", "ws://").replace("https://", "wss://") + "/ws/ingest/"
        try:
            async with websockets.connect(
                ws_url, additional_headers={"Authorization": f"Bearer {key}"}
            ) as ws:
                await ws.send(json.dumps(head))
                for word in response.split(" "):
                    await ws.send(json.dumps({"text": word + " "}))
                    await asyncio.sleep(1 / wps if wps > 0 else 0)
                await ws.send(json.dumps({"done": True}))
                async for raw in ws:
                    message = json.loads(raw)
                    if message["event"] == "audit":
                        data = message["data"]
                        self.stdout.write(
                            f"demo_stream: audit {data['id'][-8:]} score {data['overall_score']:.2f}"
                        )
        except Exception as exc:
            self.stderr.write(f"demo_stream: {type(exc).__name__}: {exc}")
