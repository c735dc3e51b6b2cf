"""The live sockets' same-origin check compares scheme, host AND port."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from auditor_site.asgi import application
from tests.live_support import session_headers

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


async def handshake(staff_user, *, host: bytes, origin: bytes, extra=()) -> bool:
    headers = await sync_to_async(session_headers)(staff_user, origin=origin)
    headers = [(k, v) for k, v in headers if k != b"host"] + [(b"host", host), *extra]
    communicator = WebsocketCommunicator(application, "/ws/audits/", headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    if connected:
        await communicator.disconnect()
    return connected


@pytest.mark.parametrize(
    ("host", "origin", "accepted"),
    [
        (b"127.0.0.1:8000", b"http://127.0.0.1:8000", True),
        (b"127.0.0.1:8000", b"http://127.0.0.1:9999", False),  # another app on the host
        (b"127.0.0.1:8000", b"http://127.0.0.1", False),
        (b"127.0.0.1:8000", b"https://127.0.0.1:8000", False),
        (b"127.0.0.1", b"http://127.0.0.1:80", True),  # default ports, written or not
        (b"localhost:8000", b"http://127.0.0.1:8000", False),
        (b"evil.example:8000", b"http://evil.example:8000", False),  # not an allowed host
        (b"127.0.0.1:8000", b"null", False),
    ],
)
async def test_only_the_exact_origin_is_accepted(staff_user, host, origin, accepted):
    assert await handshake(staff_user, host=host, origin=origin) is accepted


async def test_behind_a_tls_proxy_the_origin_is_https(staff_user, settings):
    settings.ALLOWED_HOSTS = ["auditor.example"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    proto = [(b"x-forwarded-proto", b"https")]
    host = b"auditor.example"
    assert await handshake(staff_user, host=host, origin=b"https://auditor.example", extra=proto)
    assert not await handshake(staff_user, host=host, origin=b"http://auditor.example", extra=proto)
    assert not await handshake(staff_user, host=host, origin=b"https://auditor.example")


async def test_csrf_trusted_origins_are_accepted(staff_user, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://dash.example:8443"]
    host = b"127.0.0.1:8000"
    assert await handshake(staff_user, host=host, origin=b"https://dash.example:8443")
    assert not await handshake(staff_user, host=host, origin=b"https://dash.example")
