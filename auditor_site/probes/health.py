"""`GET /healthz` and `GET /readyz`, answered in front of Django (auditor_site/asgi.py):
no session, no key, no middleware, so a probe costs almost nothing and works whatever
`ALLOWED_HOSTS` says.

- `/healthz`: the process answers (no dependency is looked at): 200 `{"status": "ok"}`.
- `/readyz`: the database answers a `SELECT 1`, a message goes round the channel layer
  (sent to a fresh channel and received back), and no migration is left to apply (looked
  at until it first succeeds, then remembered): 200, or 503 naming the checks that failed.
  Each check has `CHECK_TIMEOUT_S`; the database's runs in one thread of its own and
  concurrent probes share the check under way, so a hung database holds one thread, not
  one per probe.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.layers import get_channel_layer
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from audits.api.asgi_body import Receive, Send

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
PATHS = frozenset({HEALTH_PATH, READY_PATH})
CHECK_TIMEOUT_S = 3.0
OK = "ok"


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """A whole response in two messages, never cached."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def respond_json(send: Send, status: int, payload: dict[str, Any]) -> None:
    await respond(send, status, json.dumps(payload).encode(), b"application/json")


class Readiness:
    """The checks of `/readyz`; one database check at a time, shared by the probes."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="readyz")
        self.migrated = False
        self.inflight: asyncio.Future[dict[str, str]] | None = None

    def _database(self) -> dict[str, str]:
        """`SELECT 1`, then (until it first passes) the migration plan; the connection is
        closed afterwards (probes are seconds apart; a kept one could be broken)."""
        connection = connections["default"]
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchone()
            if not self.migrated:
                executor = MigrationExecutor(connection)
                plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
                if plan:
                    return {"database": OK, "migrations": f"{len(plan)} unapplied"}
                self.migrated = True
            return {"database": OK, "migrations": OK}
        except Exception as exc:
            logger.warning("readyz: the database check failed: %r", exc)
            return {"database": type(exc).__name__, "migrations": "unknown"}
        finally:
            connection.close()

    async def database(self) -> dict[str, str]:
        if self.inflight is None or self.inflight.done():
            loop = asyncio.get_running_loop()
            self.inflight = asyncio.ensure_future(
                loop.run_in_executor(self.executor, self._database)
            )
        try:
            return await asyncio.wait_for(asyncio.shield(self.inflight), CHECK_TIMEOUT_S)
        except TimeoutError:
            return {"database": "timeout", "migrations": "unknown"}

    @staticmethod
    async def channel_layer() -> dict[str, str]:
        layer = get_channel_layer()
        if layer is None:
            return {"channel_layer": "not configured"}
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                channel = await layer.new_channel("readyz.")
                await layer.send(channel, {"type": "readyz"})
                await layer.receive(channel)
        except TimeoutError:
            return {"channel_layer": "timeout"}
        except Exception as exc:
            logger.warning("readyz: the channel layer check failed: %r", exc)
            return {"channel_layer": type(exc).__name__}
        return {"channel_layer": OK}

    async def checks(self) -> dict[str, str]:
        database, layer = await asyncio.gather(self.database(), self.channel_layer())
        return {**database, **layer}


readiness = Readiness()


async def health_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["method"] not in ("GET", "HEAD"):
        body = json.dumps({"detail": "method not allowed"}).encode()
        await respond(send, 405, body, b"application/json", [(b"allow", b"GET, HEAD")])
        return
    if scope["path"] == HEALTH_PATH:
        await respond_json(send, 200, {"status": OK})
        return
    checks = await readiness.checks()
    failed = [name for name, state in checks.items() if state not in (OK, "unknown")]
    if failed:
        await respond_json(send, 503, {"status": "unavailable", "failed": failed, "checks": checks})
    else:
        await respond_json(send, 200, {"status": OK, "checks": checks})
