"""Issue 17, finding 8 (and the login items of 7): the production profile.

DEBUG off unless asked for, Secure cookies and HSTS from the environment, static files from
WhiteNoise (hashed, compressed), `check --deploy` clean under the documented production
settings with Django's real checks running, login throttling, password reset only with
e-mail.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings as django_settings
from django.test import Client

BASE_DIR = Path(__file__).resolve().parents[2]

# The production environment of docs/operations/production.md (keep them the same).
PRODUCTION_ENV = {
    "SECRET_KEY": secrets.token_urlsafe(60),
    "ALLOWED_HOSTS": "auditor.example.com",
    "AUDITOR_HTTPS": "true",
    "SECURE_HSTS_PRELOAD": "true",
}


def manage(*args: str, env: dict[str, str], db: Path) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DEBUG", "SECRET_KEY", "AUDITOR_HTTPS"} and not k.startswith("SECURE_")
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env={**base, "DATABASE_URL": f"sqlite:///{db}", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


PROBE = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({k: getattr(s, k) for k in ('DEBUG', 'SESSION_COOKIE_SECURE', "
    "'CSRF_COOKIE_SECURE', 'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', "
    "'SECURE_HSTS_INCLUDE_SUBDOMAINS')}))"
)


def probe(env: dict[str, str], tmp_path: Path) -> dict:
    out = manage("shell", "-c", PROBE, env=env, db=tmp_path / "probe.sqlite3")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_debug_is_off_unless_the_environment_turns_it_on(tmp_path):
    assert probe({"SECRET_KEY": "k" * 60}, tmp_path)["DEBUG"] is False
    assert probe({"DEBUG": "true"}, tmp_path)["DEBUG"] is True


def test_a_bare_start_without_a_secret_key_refuses_to_run(tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY"}}
    out = subprocess.run(
        [sys.executable, "-m", "auditor_site.serve", "--port", "0"],
        cwd=BASE_DIR,
        env={**base, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0 and "SECRET_KEY must be set" in out.stderr
    assert "Traceback" not in out.stderr


def test_https_settings_come_from_the_environment(tmp_path):
    plain = probe({"SECRET_KEY": "k" * 60}, tmp_path)
    assert not plain["SESSION_COOKIE_SECURE"] and plain["SECURE_HSTS_SECONDS"] == 0
    https = probe(PRODUCTION_ENV, tmp_path)
    assert https["SESSION_COOKIE_SECURE"] and https["CSRF_COOKIE_SECURE"]
    assert https["SECURE_SSL_REDIRECT"] and https["SECURE_HSTS_INCLUDE_SUBDOMAINS"]
    assert https["SECURE_HSTS_SECONDS"] == 31_536_000
    assert (
        probe({**PRODUCTION_ENV, "SECURE_HSTS_SECONDS": "3600"}, tmp_path)["SECURE_HSTS_SECONDS"]
        == 3600
    )


def test_check_deploy_is_clean_under_the_documented_production_settings(tmp_path):
    out = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env=PRODUCTION_ENV,
        db=tmp_path / "db.sqlite3",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout


def test_check_deploy_runs_djangos_real_middleware_checks(tmp_path):
    env = {**PRODUCTION_ENV, "AUDITOR_HTTPS": "false", "SECURE_HSTS_PRELOAD": "false"}
    out = manage("check", "--deploy", env=env, db=tmp_path / "db.sqlite3")
    found = set(re.findall(r"security\.W\d{3}", out.stdout + out.stderr))
    # The stack is complete (no false W001-W003) and the checks that need it ran.
    assert found == {"security.W004", "security.W008", "security.W012", "security.W016"}


# --- the ASGI stack: inline-hook twins, static files ---------------------------------------


async def asgi_get(path: str, **headers: str) -> httpx.Response:
    from auditor_site.asgi import application

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return await client.get(path, headers=headers)


@pytest.mark.django_db(transaction=True)
async def test_the_asgi_handler_runs_the_inline_hook_twins(monkeypatch):
    from auditor_site import middleware

    calls = []
    original = middleware.SecurityMiddleware.process_response

    def counting(self, request, response):
        calls.append(request.path)
        return original(self, request, response)

    monkeypatch.setattr(middleware.SecurityMiddleware, "process_response", counting)
    response = await asgi_get("/accounts/login/")
    assert response.status_code == 200
    assert calls == ["/accounts/login/"]
    assert response.headers["X-Frame-Options"] == "DENY"
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]


@pytest.mark.django_db(transaction=True)
async def test_static_files_are_served_hashed_and_compressed_with_debug_off():
    assert not django_settings.DEBUG
    page = await asgi_get("/accounts/login/")
    [css] = re.findall(r'href="(/static/css/app\.[0-9a-f]{12}\.css)"', page.text)
    response = await asgi_get(css, **{"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["Content-Encoding"] == "gzip"
    assert "immutable" in response.headers["Cache-Control"]
    assert (BASE_DIR / "static/css/app.css").read_text() == response.text
    assert (await asgi_get("/static/css/app.css")).status_code == 404  # only hashed names


# --- logins -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_logins_are_throttled_per_username_and_address(staff_user, settings):
    settings.AXES_FAILURE_LIMIT = 3
    client = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(3):
        failed = client.post("/accounts/login/", {"username": "staff", "password": "wrong"})
        assert failed.status_code in (200, 429)
    locked = client.post("/accounts/login/", {"username": "staff", "password": "staff-password-1"})
    assert locked.status_code == 429
    assert "_auth_user_id" not in client.session
    elsewhere = Client(REMOTE_ADDR="198.51.100.9")
    ok = elsewhere.post("/accounts/login/", {"username": "staff", "password": "staff-password-1"})
    assert ok.status_code == 302


@pytest.mark.django_db
def test_password_reset_is_off_without_email(staff_user, settings):
    from django.core import mail

    assert not settings.AUDITOR_PASSWORD_RESET
    client = Client()
    for path in (
        "/accounts/password_reset/",
        "/accounts/password_reset/done/",
        "/accounts/reset/done/",
        "/accounts/reset/MQ/set-password/",
    ):
        assert client.get(path).status_code == 404, path
    assert (
        client.post("/accounts/password_reset/", {"email": "staff@example.com"}).status_code == 404
    )

    # With e-mail configured (EMAIL_HOST sets both), the pages work and mail is sent.
    settings.AUDITOR_PASSWORD_RESET = True
    settings.MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
    mail.outbox = []
    assert client.get("/accounts/password_reset/").status_code == 200
    assert (
        client.post("/accounts/password_reset/", {"email": "staff@example.com"}).status_code == 302
    )
    assert len(mail.outbox) == 1
