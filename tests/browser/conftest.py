"""Real-browser test infrastructure: the shipped server (uvicorn) and headless Debian Chromium.

The server runs in a child process (spawned, not forked: a forked server delivers no WebSocket messages once async tests ran) against the
file-based SQLite test database this pytest run created, so data a test commits (use
`transactional_db`) is what the browser sees. Every test in this folder is marked
`browser`; the Makefile runs them in their own pytest invocation.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.live_support import child_database_url, server_command

BASE_DIR = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "browser-test-password-1"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_until_up(url: str, proc: subprocess.Popen, log: Path, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            httpx.get(url + "/accounts/login/", timeout=1.0)
            return True
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"the server did not answer within {timeout} s; log: {log.read_text()}")


@pytest.fixture(scope="session")
def server_url(django_db_setup, tmp_path_factory) -> Iterator[str]:
    """The server (HTTP + WebSockets) on a free port, using this run's test database."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "auditor_site.settings",
        "DATABASE_URL": child_database_url(),
        "DEBUG": "true",  # serves /static/ the way `make run` does
        "PYTHONUNBUFFERED": "1",
        "AUDITOR_PROXY_ALLOW_PRIVATE": "true",  # the proxy's scripted upstream is on 127.0.0.1
    }
    log = tmp_path_factory.mktemp("server") / "server.log"
    for _attempt in range(3):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                server_command(port),
                cwd=BASE_DIR,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if _wait_until_up(url, proc, log):
            break
    else:
        raise RuntimeError(f"the server did not start; log: {log.read_text()}")
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    # Sync Playwright keeps an event loop running in this thread; ORM calls in the tests
    # are still synchronous and safe.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


class PageErrors(list):
    """Console errors, page errors and CSP violations seen by one page."""


@pytest.fixture
def page(browser, server_url) -> Iterator[object]:
    context = browser.new_context(base_url=server_url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors = PageErrors()
    page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    yield page
    context.close()


@pytest.fixture
def staff_user(transactional_db, django_user_model):
    return django_user_model.objects.create_user(
        "staffer", "staffer@example.com", PASSWORD, is_staff=True, is_superuser=True
    )


def log_in(page, username: str = "staffer", password: str = PASSWORD, next_url: str = "/") -> None:
    page.goto(f"/accounts/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")


@pytest.fixture
def login():
    """`login(page, next_url="/")`: sign in through the real login form."""
    return log_in
