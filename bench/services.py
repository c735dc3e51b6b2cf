"""Throwaway PostgreSQL and Redis servers (the fault drill, bench/drill.py) and control of
the cluster `make test-postgres` started (.ci/postgres-tests), for the tests that stop or
restart it. No Django here: the drill's parent process only starts and kills things.

PostgreSQL's server binaries refuse to run as root: as root they run as `postgres`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def postgres_bin() -> str | None:
    """Debian's server binaries (initdb, pg_ctl), the newest version installed."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return str(Path(found[-1]).parent) if found else None


class PgCluster:
    """A cluster in `data`, listening on 127.0.0.1:`port` (its settings in its own
    postgresql.conf, so stop/start/restart need no options)."""

    def __init__(self, data: str, bindir: str, owner: str | None, port: int) -> None:
        self.data, self.bindir, self.owner, self.port = data, bindir, owner, port

    @classmethod
    def create(cls) -> PgCluster:
        bindir = postgres_bin()
        if bindir is None:
            raise RuntimeError(
                "PostgreSQL's server binaries are not installed (apt-get install -y postgresql)"
            )
        data = tempfile.mkdtemp(prefix="auditor-drill-pg.")
        owner = "postgres" if os.geteuid() == 0 else None
        if owner:
            shutil.chown(data, owner)
        cluster = cls(data, bindir, owner, free_port())
        cluster._run("initdb", "-D", data, "-A", "trust", "-U", "auditor")
        with open(Path(data) / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {cluster.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{data}'\nmax_connections = 200\n"
                "fsync = off\nsynchronous_commit = off\n"
            )
        cluster.start()
        cluster._run(
            "createdb", "-h", "127.0.0.1", "-p", str(cluster.port), "-U", "auditor", "auditor"
        )
        return cluster

    @classmethod
    def from_environment(cls) -> PgCluster | None:
        """The cluster of `make test-postgres`, when this process runs under it."""
        data, bindir = os.environ.get("AUDITOR_TEST_PG_DATA"), os.environ.get("AUDITOR_TEST_PG_BIN")
        port = os.environ.get("AUDITOR_TEST_PG_PORT")
        if not (data and bindir and port):
            return None
        return cls(data, bindir, os.environ.get("AUDITOR_TEST_PG_USER") or None, int(port))

    @property
    def url(self) -> str:
        return f"postgres://auditor@127.0.0.1:{self.port}/auditor"

    def _run(self, tool: str, *args: str) -> None:
        command = [f"{self.bindir}/{tool}", *args]
        if self.owner:
            command = ["runuser", "-u", self.owner, "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def pg_ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", self.data, "-l", f"{self.data}/log", "-w", *args)

    def start(self) -> None:
        self.pg_ctl("start")

    def stop(self) -> None:
        self.pg_ctl("stop", "-m", "fast")

    def restart(self) -> None:
        """What an operator's `pg_ctl restart -m fast` does: every session is cut."""
        self.pg_ctl("restart", "-m", "fast")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.data, ignore_errors=True)


class RedisServer:
    """A redis-server on 127.0.0.1:`port`, nothing saved; `restart` loses every key (as a
    Redis without persistence does)."""

    def __init__(self) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install -y redis-server)")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.5) as s,
            ):
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()
