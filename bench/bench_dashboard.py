"""Dashboard server time with 100,000 stored audits: list, table, detail, trends, tuning (p50).

Uses its own SQLite file under var/bench/ (built once, reused by later runs; the first
run inserts the rows in well under a minute), and django.test.Client in-process (the full middleware stack, templates included).
Baseline in the same run: the login page (a template render without any audit query).
Cold rows: every cache emptied before each request, and the first trends request of a
fresh process (median of FIRST_LOAD_RUNS processes).

    .venv/bin/python bench/bench_dashboard.py [--audits 100000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BENCH_DIR = ROOT / "var" / "bench"
TARGET_MS = 60.0
FIRST_LOAD_RUNS = 5
# one link of the contract's shape (audits.store.link_rows): an audit's link table in one row
LINK_ROW = (
    '[{"url":"https://docs.acme.example/api","label":"the docs","decision":"keep",'
    '"reason":null,"http_status":200,"healthy":true}]'
)


def setup_django(db_path: Path) -> None:
    os.environ["DATABASE_URL"] = f"sqlite:///{db_path}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1")
    import django

    django.setup()


def _insert(cursor, model, columns: list[str], rows: list[tuple]) -> None:
    table = model._meta.db_table
    cols = ", ".join(f'"{model._meta.get_field(c).column}"' for c in columns)
    marks = ", ".join(["%s"] * len(columns))
    cursor.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", rows)


def populate(n: int) -> None:
    """Insert `n` varied audits with results, annotations, trace lines and links.

    Raw executemany on the SQLite file (values in SQLite's storage format: uuid hex,
    naive UTC timestamps): about 10x faster than bulk_create for a million rows.
    """
    from django.db import connection, transaction
    from django.utils import timezone

    from audits.models import AnalyzerRunRecord, Annotation, AuditLinks, AuditRun, TraceLine

    rng = random.Random(1)
    analyzers = ["redflag", "links", "grounding", "prompt_leak", "bias", "tone"]
    types = {
        "redflag": "TOO_MANY_CHARS",
        "links": "LINK_HOST_NOT_ALLOWED",
        "grounding": "UNGROUNDED_CUSTOMER_CLAIM",
        "prompt_leak": "PROMPT_LEAK",
        "bias": "sycophancy",
        "tone": "condescending",
    }
    severities = ["info", "warning", "critical"]
    response = (
        "Decathlon grew conversion by 50%. Everyone agrees Acme is the best search engine. "
        "See [the docs](https://docs.acme.example/api) for details. " * 3
    )
    now = timezone.now().replace(tzinfo=None)
    batch = 5000
    started = time.perf_counter()
    result_id = 0
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous=OFF")
    for offset in range(0, n, batch):
        runs, results, annotations, traces, links = [], [], [], [], []
        for i in range(offset, min(n, offset + batch)):
            created = (now - timedelta(seconds=i * 36)).isoformat(" ")  # ~6 weeks for 100k
            run_id = uuid.uuid4().hex
            scores = []
            for pos, analyzer in enumerate(analyzers):
                score = round(rng.random() ** 3, 3)
                scores.append(score)
                result_id += 1
                results.append(
                    (
                        result_id,
                        run_id,
                        pos,
                        analyzer,
                        "c",
                        "ok",
                        rng.random() * 20,
                        score,
                        False,
                        score >= 0.3,
                        "{}",
                        created,
                    )
                )
                if score >= 0.2:
                    annotations.append(
                        (
                            run_id,
                            result_id,
                            0,
                            analyzer,
                            types[analyzer],
                            "Label",
                            rng.choice(severities),
                            "Why it matters.",
                            "Decathlon",
                            0,
                            9,
                            created,
                        )
                    )
            top = max(scores)
            runs.append(
                (
                    run_id,
                    "complete",
                    False,
                    "",
                    f"Question {i} about Acme?",
                    response,
                    response,
                    "[]",
                    "{}",
                    "{}",
                    0.3,
                    "{}",
                    sum(scores) / len(scores),
                    any(s >= 0.3 for s in scores),
                    created,
                    created,
                    created,
                    "",
                    1,
                    top,
                    analyzers[scores.index(top)],
                )
            )
            traces += [(run_id, p, f"[AUDIT] step {p}") for p in range(3)]
            links.append((run_id, LINK_ROW))
        with transaction.atomic(), connection.cursor() as cursor:
            _insert(
                cursor,
                AuditRun,
                [
                    "id",
                    "status",
                    "incomplete",
                    "request_hash",
                    "user_input",
                    "response",
                    "cleaned_response",
                    "sources",
                    "metadata",
                    "options",
                    "threshold",
                    "config_snapshot",
                    "overall_score",
                    "has_card",
                    "created_at",
                    "started_at",
                    "finished_at",
                    "error",
                    "attempts",
                    "top_score",
                    "top_analyzer",
                ],
                runs,
            )
            _insert(
                cursor,
                AnalyzerRunRecord,
                [
                    "id",
                    "audit",
                    "position",
                    "analyzer_id",
                    "category",
                    "status",
                    "duration_ms",
                    "score",
                    "should_surface",
                    "surfaced",
                    "supplementary",
                    "audit_created_at",
                ],
                results,
            )
            _insert(
                cursor,
                Annotation,
                [
                    "audit",
                    "result",
                    "position",
                    "analyzer_id",
                    "type",
                    "label",
                    "severity",
                    "description",
                    "evidence",
                    "start",
                    "end",
                    "audit_created_at",
                ],
                annotations,
            )
            _insert(cursor, TraceLine, ["audit", "position", "text"], traces)
            _insert(cursor, AuditLinks, ["audit", "rows"], links)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"inserted {n} audits in {time.perf_counter() - started:.1f} s")


def populate_reviews(share: float = 0.2) -> None:
    """Verdicts on `share` of the audits with a card, as the measured-quality figures read
    them: mostly whole-audit verdicts, a fifth also with one finding's own verdict."""
    from django.db import connection, transaction

    from audits.models import Annotation, AuditRun, Review

    rng = random.Random(2)
    started = time.perf_counter()
    picked = [
        (pk, created)
        for pk, created in AuditRun.objects.filter(has_card=True).values_list("id", "created_at")
        if rng.random() < share
    ]
    picked_ids = {pk for pk, _ in picked}
    one_finding: dict = {}
    for audit_id, pk in (
        Annotation.objects.filter(result__surfaced=True)
        .values_list("audit_id", "id")
        .iterator(chunk_size=20_000)
    ):
        if audit_id in picked_ids:
            one_finding.setdefault(audit_id, pk)
    verdicts = ["confirmed"] * 16 + ["false_positive"] * 3 + ["unsure"]
    reviews, stamps = [], []
    for pk, created in picked:
        at = created + timedelta(hours=rng.randint(1, 48))
        reviews.append(
            Review(audit_id=pk, verdict=rng.choice(verdicts), reviewer_name="bench", created_at=at)
        )
        if pk in one_finding and rng.random() < 0.2:
            reviews.append(
                Review(
                    audit_id=pk,
                    annotation_id=one_finding[pk],
                    verdict=rng.choice(verdicts),
                    reviewer_name="bench",
                    created_at=at,
                )
            )
        stamps.append((at.replace(tzinfo=None).isoformat(" "), pk.hex))
    with transaction.atomic():
        Review.objects.bulk_create(reviews, batch_size=2000)
        with connection.cursor() as cursor:
            cursor.executemany("UPDATE audits_auditrun SET reviewed_at = %s WHERE id = %s", stamps)
            cursor.execute("ANALYZE")
    print(
        f"reviewed {len(picked)} audits ({len(reviews)} verdicts) in "
        f"{time.perf_counter() - started:.1f} s"
    )


def deep_page_url(client, url: str, pages: int) -> str:
    """The URL of page `pages + 1` of `url`, followed through its "Load more" cursors."""
    import re

    for _ in range(pages):
        html = client.get(url).content.decode()
        found = re.search(r'hx-get="(/\?[^"]*cursor=[^"]+)"', html)
        assert found, "fewer pages than asked"
        url = found.group(1).replace("&amp;", "&")
    return url


def time_backfill() -> float:
    """Seconds the migration's set-based backfill takes for every stored audit (the values
    are reset first and equal afterwards: the bench database is left as it was)."""
    import importlib

    from django.apps import apps
    from django.db import transaction

    from audits.models import AuditRun

    migration = importlib.import_module("audits.migrations.0007_top_score_and_view_preference")
    before = dict(AuditRun.objects.values_list("id", "top_score")[:1000])
    with transaction.atomic():
        AuditRun.objects.update(top_score=None, top_analyzer="")
        started = time.perf_counter()
        migration.backfill_top_scores(apps, None)
        took = time.perf_counter() - started
    after = dict(AuditRun.objects.filter(pk__in=list(before)).values_list("id", "top_score"))
    assert after == before, "the backfill gave other scores than the populated ones"
    return took


def timed(client, url: str, rounds: int, before=None) -> list[float]:
    client.get(url)  # warm up (template loading, caches)
    times = []
    for _ in range(rounds):
        if before is not None:
            before()
        t = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - t) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--audits", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--first-load", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_load:
        first_load_child(args.db, args.first_load)
        return

    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    db_path = BENCH_DIR / f"dashboard-{args.audits}.sqlite3"
    setup_django(db_path)

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from audits.models import AuditRun

    call_command("migrate", verbosity=0)
    if AuditRun.objects.count() != args.audits:
        AuditRun.objects.all().delete()
        populate(args.audits)
    from audits.models import Review

    if not Review.objects.exists():
        populate_reviews()
    User = get_user_model()
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.com", "bench-password-1"
    )
    client = Client()
    client.force_login(user)
    from audits.models import DashboardPreference

    table_user = User.objects.filter(username="bench-table").first() or (
        User.objects.create_superuser("bench-table", "t@example.com", "bench-password-1")
    )
    DashboardPreference.objects.update_or_create(user=table_user, defaults={"audit_view": "table"})
    table = Client()
    table.force_login(table_user)
    deep = deep_page_url(table, "/?sort=-top_score", pages=20)
    flagged = AuditRun.objects.filter(has_card=True).order_by("-created_at").first()
    middle = AuditRun.objects.order_by("-created_at")[args.audits // 2]

    cases = {
        "login page (baseline)": ("/accounts/login/", Client()),
        "list page": ("/", client),
        "list page, surfaced only": ("/?surfaced=1", client),
        "list page, severity=critical": ("/?severity=critical", client),
        "list page, highest score first": ("/?sort=-top_score", client),
        "table page": ("/", table),
        "table page, highest score first": ("/?sort=-top_score", table),
        "table page, surfaced, highest score first": ("/?surfaced=1&sort=-top_score", table),
        "table page 21, highest score first (cursor)": (deep, table),
        "detail page (newest card)": (f"/audits/{flagged.pk}/", client),
        "detail page (mid-table audit)": (f"/audits/{middle.pk}/", client),
        # With verdicts on a fifth of the cards: the measured-quality figures included.
        "trends page (60 days)": ("/trends/?days=60", client),
        "trends page (7 days)": ("/trends/?days=7", client),
        "tuning page (global)": ("/tuning/?threshold=0.45", client),
        "tuning page (one analyzer)": ("/tuning/?threshold=0.45&analyzer=bias", client),
    }
    from django.core.cache import cache

    # The measured-quality figures are cached until the next verdict, the trends figures of
    # past days once settled: also time them with every cache emptied before each request.
    cold = {
        "trends page (60 days), empty caches": "/trends/?days=60",
        "trends page (7 days), empty caches": "/trends/?days=7",
        "tuning page (global), no cached evidence": "/tuning/?threshold=0.45",
    }
    results = {}
    print(f"{args.audits} audits, {args.rounds} rounds each, django.test.Client in-process")
    for name, (url, c) in cases.items():
        times = timed(c, url, args.rounds)
        results[name] = statistics.median(times)
    for name, url in cold.items():
        results[name] = statistics.median(timed(client, url, args.rounds, before=cache.clear))
    # The first request of a new process (LocMem caches are per process).
    for days in (60, 7):
        firsts = [first_load(db_path, days) for _ in range(FIRST_LOAD_RUNS)]
        results[f"trends page ({days} days), first request of a process"] = statistics.median(
            firsts
        )
    baseline = results["login page (baseline)"]
    for name, p50 in results.items():
        print(f"  {name:42s} p50 {p50:7.2f} ms   x{p50 / baseline:5.1f} baseline")
    worst = max(results["list page"], results["detail page (newest card)"])
    verdict = "OK" if worst < TARGET_MS else "OVER TARGET"
    print(f"target: list and detail p50 < {TARGET_MS:.0f} ms -> {verdict}")
    worst = max(v for k, v in results.items() if k.startswith(("table page", "list page")))
    verdict = "OK" if worst < TARGET_MS else "OVER TARGET"
    print(f"target: every list and table page p50 < {TARGET_MS:.0f} ms -> {verdict}")
    backfill_seconds = time_backfill()
    print(f"top_score backfill (migration 0006) of {args.audits} audits: {backfill_seconds:.1f} s")
    worst = max(results["trends page (60 days)"], results["trends page (7 days)"])
    verdict = "OK" if worst < TARGET_MS else "OVER TARGET"
    print(f"target: trends p50 < {TARGET_MS:.0f} ms -> {verdict}")


def first_load(db_path: Path, days: int) -> float:
    """Milliseconds of the first trends request in a fresh process (its own caches empty)."""
    out = subprocess.run(
        [sys.executable, __file__, "--first-load", str(days), "--db", str(db_path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def first_load_child(db_path: Path, days: int) -> None:
    setup_django(db_path)
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username="bench"))
    client.get("/accounts/login/")  # the template engine and middleware, not the trends page
    t = time.perf_counter()
    response = client.get(f"/trends/?days={days}")
    elapsed = (time.perf_counter() - t) * 1000
    assert response.status_code == 200, response.status_code
    print(f"{elapsed:.2f}")


if __name__ == "__main__":
    main()
