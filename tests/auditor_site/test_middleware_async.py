"""The inline-hook middleware (auditor_site/middleware.py) keeps Django's protections under ASGI."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

pytestmark = pytest.mark.django_db(transaction=True)


async def test_csrf_is_enforced_on_the_async_stack(staff_user):
    client = AsyncClient(enforce_csrf_checks=True)
    await sync_to_async(client.force_login)(staff_user)
    refused = await client.post("/tuning/", {"threshold": "0.4"})
    assert refused.status_code == 403
    page = await client.get("/tuning/")
    token = page.cookies["csrftoken"].value
    accepted = await client.post("/tuning/", {"threshold": "0.4", "csrfmiddlewaretoken": token})
    assert accepted.status_code == 302


async def test_security_headers_and_session_on_the_async_stack(staff_user):
    client = AsyncClient()
    anonymous = await client.get("/")
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    await sync_to_async(client.force_login)(staff_user)
    page = await client.get("/")
    assert page.status_code == 200
    assert "script-src 'self'" in page["Content-Security-Policy"]
    assert page["X-Frame-Options"] == "DENY"
    assert page["X-Content-Type-Options"] == "nosniff"
