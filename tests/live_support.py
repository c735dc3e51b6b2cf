"""Helpers of the live tests: sessions for WebSocket clients, a server process.

The server is the shipped one (`python -m auditor_site.serve`, uvicorn); `server="daphne"`
starts the old one (benchmarks compare them). `start_daphne` and `daphne` are the old
names of `start_server` and `live_server`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection
from django.test import Client

BASE_DIR = Path(__file__).resolve().parents[1]
ORIGIN = b"http://127.0.0.1"


def session_headers(user=None, origin: bytes | None = ORIGIN) -> list[tuple[bytes, bytes]]:
    """Headers of a browser WebSocket handshake (same-site origin, the user's session)."""
    headers = [(b"host", b"127.0.0.1")]
    if origin is not None:
        headers.append((b"origin", origin))
    if user is not None:
        client = Client()
        client.force_login(user)
        sid = client.cookies[settings.SESSION_COOKIE_NAME].value
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={sid}".encode()))
    return headers


def child_database_url() -> str:
    """DATABASE_URL of this run's test database, for server and worker child processes."""
    from urllib.parse import quote

    db = settings.DATABASES["default"]
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    user = quote(db.get("USER") or "")
    password = f":{quote(db['PASSWORD'])}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{auth}{db.get('HOST') or ''}{port}/{db['NAME']}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(port: int, server: str = "uvicorn") -> list[str]:
    """The command line of a server on 127.0.0.1:`port` (`uvicorn`: the shipped one)."""
    if server == "daphne":
        return [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "auditor_site.asgi:application",
        ]
    return [
        sys.executable,
        "-m",
        "auditor_site.serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
        "--log-level",
        "warning",
    ]


def start_server(
    port: int, log: Path, server: str = "uvicorn", **env_extra: str
) -> subprocess.Popen:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "auditor_site.settings",
        "DATABASE_URL": child_database_url(),
        "AUDITOR_TASK_BACKEND": "thread",
        "PYTHONUNBUFFERED": "1",
        **env_extra,
    }
    with log.open("ab") as out:
        proc = subprocess.Popen(
            server_command(port, server),
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{server} exited; log: {log.read_text()}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=1.0)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{server} did not answer; log: {log.read_text()}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def live_server(tmp_path: Path, server: str = "uvicorn", **env_extra: str):
    """A server on a free port using this run's (file) test database: its host:port."""
    port = free_port()
    proc = start_server(port, tmp_path / f"{server}-{port}.log", server, **env_extra)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)


start_daphne = start_server
daphne = live_server
