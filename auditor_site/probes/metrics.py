"""`GET /metrics` in Prometheus' text format (prometheus-client), answered in front of
Django (auditor_site/asgi.py).

What the store knows is read from the database at scrape time, so every server gives the
same numbers whichever process ingested or analysed: audits by status (ingested and
analysed counters), the queue (pending audits, the oldest one's age), analysis and queue
times and analyzer outcomes of the last `AUDITOR_METRICS_WINDOW_S` (gauge histograms:
`histogram_quantile` works on them without `rate`). What only this process knows: its open
WebSockets (`auditor_live_connections`) and the client library's process metrics.

Off unless configured (404): a scraper passes with `Authorization: Bearer
<AUDITOR_METRICS_TOKEN>` or from an address in `AUDITOR_METRICS_ALLOW` (addresses or
networks). One scrape reads at a time; concurrent scrapes share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum
from django.utils import timezone
from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
)
from prometheus_client.registry import Collector

from auditor_site.probes.health import respond
from audits.api.asgi_body import Receive, Send
from audits.models import AnalyzerRunRecord, AuditRun

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
PATH = "/metrics"
# Seconds: analysis of one batch of audits, and an audit's wait in the queue.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
Status = AuditRun.Status

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)
LIVE_CONNECTIONS = Gauge(
    "auditor_live_connections", "WebSockets open on this process", ["kind"], registry=REGISTRY
)


@contextlib.contextmanager
def live_connection(kind: str) -> Iterator[None]:
    """Counts a WebSocket while it is open (`kind`: live pages or ingest)."""
    gauge = LIVE_CONNECTIONS.labels(kind)
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


def _histogram(name: str, doc: str, row: dict[str, Any], prefix: str) -> GaugeHistogramMetricFamily:
    buckets = [(str(b), row[f"{prefix}_le_{i}"]) for i, b in enumerate(BUCKETS)]
    buckets.append(("+Inf", row[f"{prefix}_count"]))
    total = row[f"{prefix}_sum"]
    return GaugeHistogramMetricFamily(
        name, doc, buckets=buckets, gsum_value=total.total_seconds() if total else 0.0
    )


def _window_histograms(since) -> dict[str, Any]:
    """Bucket counts of analysis time (started -> finished) and queue time (created ->
    started) of the audits finished after `since`, in one query."""
    analysis = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    wait = ExpressionWrapper(F("started_at") - F("created_at"), output_field=DurationField())
    aggregates: dict[str, Any] = {}
    for prefix in ("analysis", "wait"):
        aggregates[f"{prefix}_count"] = Count("id")
        aggregates[f"{prefix}_sum"] = Sum(prefix)
        for i, b in enumerate(BUCKETS):
            aggregates[f"{prefix}_le_{i}"] = Count(
                "id", filter=Q(**{f"{prefix}__lte": timedelta(seconds=b)})
            )
    return (
        AuditRun.objects.filter(
            status__in=(Status.COMPLETE, Status.FAILED),
            started_at__gte=since,
            finished_at__isnull=False,
        )
        .annotate(analysis=analysis, wait=wait)
        .aggregate(**aggregates)
    )


class StoreCollector(Collector):
    """The metrics read from the database (at scrape time, in the scrape's thread)."""

    def collect(self) -> Iterator[Any]:
        up = GaugeMetricFamily("auditor_store_up", "1 when the database answered this scrape")
        try:
            families = list(self._from_store())
        except Exception as exc:
            logger.warning("metrics: the database did not answer: %r", exc)
            up.add_metric([], 0)
            yield up
            return
        finally:
            connections["default"].close()
        up.add_metric([], 1)
        yield up
        yield from families

    @staticmethod
    def _from_store() -> Iterator[Any]:
        now = timezone.now()
        window = settings.AUDITOR_METRICS_WINDOW_S
        since = now - timedelta(seconds=window)
        counts = {
            row["status"]: row["n"]
            for row in AuditRun.objects.order_by().values("status").annotate(n=Count("id"))
        }
        by_status = GaugeMetricFamily(
            "auditor_audits", "Audits stored, by status", labels=["status"]
        )
        for status in Status.values:
            by_status.add_metric([status], counts.get(status, 0))
        yield by_status
        yield CounterMetricFamily(
            "auditor_audits_ingested",
            "Audits stored since the database was created",
            value=sum(counts.values()),
        )
        analysed = CounterMetricFamily(
            "auditor_audits_analysed", "Audits analysed, by outcome", labels=["outcome"]
        )
        for status in (Status.COMPLETE, Status.FAILED):
            analysed.add_metric([status], counts.get(status, 0))
        yield analysed
        yield GaugeMetricFamily(
            "auditor_queue_depth",
            "Audits waiting for analysis (pending)",
            value=counts.get(Status.PENDING, 0),
        )
        oldest = AuditRun.objects.filter(status=Status.PENDING).aggregate(oldest=Min("created_at"))[
            "oldest"
        ]
        yield GaugeMetricFamily(
            "auditor_queue_oldest_age_seconds",
            "Age of the oldest pending audit (0: none)",
            value=(now - oldest).total_seconds() if oldest else 0.0,
        )
        row = _window_histograms(since)
        yield _histogram(
            "auditor_analysis_seconds",
            f"Analysis time of the audits started in the last {window} s",
            row,
            "analysis",
        )
        yield _histogram(
            "auditor_queue_wait_seconds",
            f"Time from stored to started of the audits started in the last {window} s",
            row,
            "wait",
        )
        results = GaugeMetricFamily(
            "auditor_analyzer_results",
            f"Analyzer results of the audits stored in the last {window} s, by analyzer and outcome",
            labels=["analyzer", "status"],
        )
        rows = (
            AnalyzerRunRecord.objects.filter(audit_created_at__gte=since)
            .order_by()
            .values("analyzer_id", "status")
            .annotate(n=Count("id"))
        )
        for r in rows:
            results.add_metric([r["analyzer_id"], r["status"]], r["n"])
        yield results


REGISTRY.register(StoreCollector())


def _allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(item, strict=False) for item in settings.AUDITOR_METRICS_ALLOW]


def _bearer(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


def access(scope: Scope) -> int:
    """200 for an allowed scraper; 404 when metrics are off; 401 otherwise."""
    token = settings.AUDITOR_METRICS_TOKEN
    allow = _allowed_networks()
    if not token and not allow:
        return 404
    if token and hmac.compare_digest(_bearer(scope).encode(), token.encode()):
        return 200
    client = (scope.get("client") or ("",))[0]
    with contextlib.suppress(ValueError):
        address = ipaddress.ip_address(client)
        if any(address in net for net in allow):
            return 200
    return 401


class Scrapes:
    """One scrape at a time in a thread of its own; concurrent requests share it."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics")
        self.inflight: asyncio.Future[bytes] | None = None

    async def latest(self) -> bytes:
        if self.inflight is None or self.inflight.done():
            loop = asyncio.get_running_loop()
            self.inflight = asyncio.ensure_future(
                loop.run_in_executor(self.executor, generate_latest, REGISTRY)
            )
        return await asyncio.shield(self.inflight)


scrapes = Scrapes()


async def metrics_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    status = access(scope)
    if status == 404:
        await respond(send, 404, b"Not Found\n", b"text/plain")
        return
    if status == 401:
        await respond(
            send, 401, b"Unauthorized\n", b"text/plain", [(b"www-authenticate", b"Bearer")]
        )
        return
    if scope["method"] not in ("GET", "HEAD"):
        await respond(send, 405, b"Method Not Allowed\n", b"text/plain", [(b"allow", b"GET, HEAD")])
        return
    await respond(send, 200, await scrapes.latest(), CONTENT_TYPE_PLAIN_0_0_4.encode())
