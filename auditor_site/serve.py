"""The shipped server: `python -m auditor_site.serve --host 127.0.0.1 --port 8000`.

uvicorn (httptools + uvloop + websockets, `uvicorn[standard]`) serving
`auditor_site.asgi:application`: HTTP through Django, WebSockets through Channels. Unlike
daphne, uvicorn hands a request body to the application as it arrives and stops reading
the socket while the application does not ask for more, so `BodyLimitMiddleware` refuses
an oversized upload before it is buffered. A WebSocket message may be at most
`AUDITOR_MAX_BODY_BYTES` plus 64 KiB of framing, and a request's line and headers
`AUDITOR_MAX_HEAD_BYTES` (auditor_site/edge/head_limit.py: httptools has no such bound). The
same protocol times heads and bodies and caps the open connections
(`AUDITOR_MAX_CONNECTIONS`). The client's address (REMOTE_ADDR: the login throttle) is the
peer's, or what `X-Forwarded-For` says when the peer is in `AUDITOR_TRUSTED_PROXIES`.

Analysis processes: unless `AUDITOR_ANALYSIS_PROCESSES` is set, this server analyses in
`default_analysis_processes()` child processes (2 on a machine with 2 cores or more, else
0: in its threads), off its interpreter lock (audits.execution.processes; measured in
docs/contributing/performance.md).

SIGTERM/SIGINT: uvicorn stops accepting, gives open requests `--graceful-timeout` seconds,
and then this process exits at once, without waiting for threads still busy with a request
or an analysis (they would delay the exit for as long as their work takes; a run cut short
this way is re-queued by the recovery of runs left behind).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

from audits.execution import heap

WS_FRAMING = 64 * 1024
# On 2 cores 2 processes beat the threads, 1 did not (docs/contributing/performance.md).
ANALYSIS_PROCESSES = 2


def default_analysis_processes() -> int:
    """Analysis processes when the setting is not given: only where there are cores for them."""
    return ANALYSIS_PROCESSES if (os.cpu_count() or 1) >= ANALYSIS_PROCESSES else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument(
        "--graceful-timeout",
        type=float,
        default=5.0,
        help="seconds open requests get after SIGTERM (default 5)",
    )
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--no-access-log", action="store_true")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "auditor_site.settings")
    os.environ.setdefault("AUDITOR_ANALYSIS_PROCESSES", str(default_analysis_processes()))
    import django
    import uvicorn
    from django.conf import settings

    django.setup()
    from django.core.exceptions import ImproperlyConfigured

    from auditor_site.secret_key import require_secret_key  # deferred: after django.setup()

    try:
        require_secret_key()
    except ImproperlyConfigured as exc:
        sys.exit(f"error: {exc}")
    import auditor_site.asgi  # deferred: after django.setup() (loaded now, settled with the rest)
    from auditor_site.edge.head_limit import HeadLimitedProtocol  # deferred: after django.setup()

    heap.settle("start")
    config = uvicorn.Config(
        "auditor_site.asgi:application",
        host=args.host,
        port=args.port,
        lifespan="off",  # Channels' router speaks http and websocket only
        # httptools, with bounds on a request's head and body and on the connections
        http=functools.partial(HeadLimitedProtocol, stream_paths=auditor_site.asgi.STREAMING_PATHS),
        # X-Forwarded-For/-Proto only from the proxies named (uvicorn's default: loopback)
        proxy_headers=bool(settings.AUDITOR_TRUSTED_PROXIES),
        forwarded_allow_ips=settings.AUDITOR_TRUSTED_PROXIES,
        ws_max_size=settings.AUDITOR_MAX_BODY_BYTES + WS_FRAMING,
        timeout_graceful_shutdown=args.graceful_timeout,
        log_level=args.log_level,
        access_log=not args.no_access_log,
    )
    server = uvicorn.Server(config)
    server.run()
    sys.stdout.flush()
    sys.stderr.flush()
    # Do not join threads still busy (a sync view, an analysis): exit now.
    os._exit(0 if server.started else 1)


if __name__ == "__main__":
    main()
