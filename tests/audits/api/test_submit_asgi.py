"""`POST /api/audits` answered in front of Django (audits/api/submit_asgi.py).

In-process, with a stand-in for Django's handler: which requests the endpoint answers and
which it hands to Django (with the body intact, before anything is counted or stored).
Then the shipped server on 127.0.0.1: its answers (202, 200, 409, 422, 429) are Django's
own, status, body and headers, and nothing the endpoint hands on is answered by it.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.core.handlers.asgi import ASGIHandler

from analyzers.auth import authenticate_token, rate_limiter
from analyzers.models import ApiKey
from auditor_site.api import api
from audits.api.submit_asgi import SubmitEndpoint
from audits.models import AuditRun
from tests.live_support import free_port, start_server, stop

BODY = {"user_input": "Which retailers use Acme?", "response": "Decathlon uses Acme."}


class StandInDjango(ASGIHandler):
    """Django's handler as the endpoint sees it: records what it is handed, answers 599."""

    def __init__(self) -> None:  # no middleware: it never handles a request here
        self.bodies: list[bytes] = []

    async def __call__(self, scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 599, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def scope(
    token: str, *, query: bytes = b"", host: bytes = b"127.0.0.1", scheme: str = "http", headers=()
) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": scheme,
        "path": "/api/audits",
        "raw_path": b"/api/audits",
        "query_string": query,
        "root_path": "",
        "headers": [
            (b"host", host),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            *headers,
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }


def call(endpoint, scope: dict, body: bytes | list[bytes], disconnect: bool = False):
    """Drive the endpoint: the body in `body`'s chunks; status, headers and JSON it sent."""
    chunks = [body] if isinstance(body, bytes) else list(body)
    messages = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    if disconnect:
        messages[-1] = {"type": "http.disconnect"}
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    async_to_sync(endpoint)(scope, receive, send)
    if not sent:
        return None, {}, None
    headers = {k.decode().lower(): v.decode() for k, v in sent[0].get("headers", [])}
    content = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], headers, json.loads(content) if content else None


@pytest.fixture
def endpoint():
    django = StandInDjango()
    return SubmitEndpoint(api, django), django


@pytest.fixture
def verified(db):
    """An ingest key verified in this process (as after its first request)."""
    key, raw = ApiKey.create_key("ingest", scope="ingest")
    assert authenticate_token(raw) == key
    return key, raw


def body_bytes(**fields) -> bytes:
    return json.dumps({**BODY, **fields}).encode()


@pytest.mark.django_db(transaction=True)
def test_a_valid_submission_with_a_verified_key_is_stored_and_answered_here(endpoint, verified):
    submit, django = endpoint
    key, raw = verified
    status, headers, answer = call(
        submit, scope(raw), [b'{"user_input": "Which retailers ', body_bytes()[33:]]
    )
    assert status == 202 and django.bodies == []
    run = AuditRun.objects.get(pk=answer["id"])
    assert answer == {"id": str(run.pk), "status": "pending"}  # analysed since
    assert run.api_key_id == key.pk and run.response == BODY["response"]
    # Django's header middleware had their say.
    assert headers["content-type"] == "application/json; charset=utf-8"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert "content-security-policy" in headers
    assert int(headers["content-length"]) == len(json.dumps(answer))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "case",
    [
        "unverified key",
        "no key",
        "query string",
        "host not allowed",
        "invalid JSON",
        "invalid body",
        "NUL in text",
        "nested too deep",
    ],
)
def test_what_it_does_not_answer_goes_to_django_untouched_and_uncounted(
    endpoint,
    verified,
    make_key,
    case,
):
    submit, django = endpoint
    _, raw = verified
    request, body = scope(raw), body_bytes()
    assert verified[0].prefix not in rate_limiter._windows
    if case == "unverified key":
        request = scope(make_key("ingest"))
    elif case == "no key":
        request["headers"] = [h for h in request["headers"] if h[0] != b"authorization"]
    elif case == "query string":
        request = scope(raw, query=b"wait=true")
    elif case == "host not allowed":
        request = scope(raw, host=b"evil.example")
    elif case == "invalid JSON":
        body = b'{"user_input": "q", "response": '
    elif case == "invalid body":
        body = json.dumps({"user_input": "q"}).encode()
    elif case == "NUL in text":
        body = body_bytes(response="a\x00b")
    elif case == "nested too deep":
        body = (
            body_bytes(metadata={"x": 1})[:-1]
            + b', "sources": '
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}"
        )
    status, _, _ = call(submit, request, body)
    assert status == 599 and django.bodies == [body]
    assert AuditRun.objects.count() == 0
    assert verified[0].prefix not in rate_limiter._windows  # Django counts, not this


@pytest.mark.django_db(transaction=True)
def test_plain_http_under_ssl_redirect_goes_to_django_and_https_does_not(
    endpoint,
    verified,
    settings,
):
    settings.SECURE_SSL_REDIRECT = True
    submit, django = endpoint
    _, raw = verified
    assert call(submit, scope(raw), body_bytes())[0] == 599
    settings.SECURE_HSTS_SECONDS = 3600  # read by the middleware when they are made
    status, headers, _ = call(SubmitEndpoint(api, django), scope(raw, scheme="https"), body_bytes())
    assert status == 202 and len(django.bodies) == 1
    assert headers["strict-transport-security"] == "max-age=3600"  # as Django's answers


@pytest.mark.django_db(transaction=True)
def test_turned_off_every_submission_goes_to_django(endpoint, verified, settings):
    settings.AUDITOR_API_FAST_SUBMIT = False
    submit, django = endpoint
    assert call(submit, scope(verified[1]), body_bytes())[0] == 599


@pytest.mark.django_db(transaction=True)
def test_a_client_that_leaves_mid_body_gets_nothing_stored(endpoint, verified):
    submit, django = endpoint
    status, _, _ = call(submit, scope(verified[1]), [b'{"user_input": ', b"more"], disconnect=True)
    assert status is None and django.bodies == [] and AuditRun.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_repeats_conflicts_options_and_the_rate_limit_are_answered_as_the_view_does(
    endpoint,
    make_key,
):
    submit, django = endpoint
    key, raw = ApiKey.create_key("limited", scope="ingest", rate_limit_per_minute=4)
    authenticate_token(raw)
    first = call(submit, scope(raw), body_bytes(external_id="order-7"))
    repeat = call(submit, scope(raw), body_bytes(external_id="order-7"))
    conflict = call(submit, scope(raw), body_bytes(external_id="order-7", response="other"))
    options = call(submit, scope(raw), body_bytes(options={"no_such_analyzer": {}}))
    limited = call(submit, scope(raw), body_bytes())
    assert [a[0] for a in (first, repeat, conflict, options, limited)] == [202, 200, 409, 422, 429]
    assert django.bodies == []
    assert repeat[2]["id"] == first[2]["id"] and repeat[2]["external_id"] == "order-7"
    assert "order-7" in conflict[2]["detail"]
    assert "no_such_analyzer" in json.dumps(options[2]["detail"])
    assert limited[2]["detail"].startswith("rate limit exceeded") and "retry-after" in limited[1]
    assert AuditRun.objects.filter(api_key=key).count() == 1


# --- the shipped server -----------------------------------------------------------------


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("submit-asgi") / "server.log"
    proc = start_server(port, log, LOG_LEVEL="DEBUG")  # a line per answer given here
    yield port, log
    stop(proc)


def answered_here(log) -> int:
    return log.read_text().count("answered in front of Django")


def comparable(answer: httpx.Response) -> tuple:
    headers = {k: v for k, v in answer.headers.items() if k not in ("date", "content-length")}
    return answer.status_code, headers


@pytest.mark.django_db(transaction=True)
def test_the_servers_answers_in_front_of_django_are_djangos(server, make_key):
    port, log = server
    key = make_key("ingest")
    limited = make_key("ingest", rate_limit_per_minute=2)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:

        def both(body, token=key):
            """The same request answered here, then by Django (`?wait=false`)."""
            headers = {"Authorization": f"Bearer {token}"}
            return (
                client.post("/api/audits", json=body, headers=headers),
                client.post("/api/audits?wait=false", json=body, headers=headers),
            )

        assert (
            client.post(
                "/api/audits",
                json=BODY,  # Django verifies the key
                headers={"Authorization": f"Bearer {key}"},
            ).status_code
            == 202
        )
        stored = client.post(
            "/api/audits?wait=true",
            json={**BODY, "external_id": "e-1"},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert stored.json()["status"] == "complete"  # the same audit for both repeats
        before = answered_here(log)
        new = both(BODY)
        repeat = both({**BODY, "external_id": "e-1"})
        conflict = both({**BODY, "external_id": "e-1", "response": "Another body."})
        options = both({**BODY, "options": {"no_such_analyzer": {}}})
        assert answered_here(log) - before == 4
        invalid = both({"user_input": "no response"})  # handed to Django: its 422
        unknown = both(BODY, token="ra_unknown")  # handed to Django: its 401
        assert answered_here(log) - before == 4
        client.post(
            "/api/audits?wait=false",
            json=BODY,  # verified, 1 of 2
            headers={"Authorization": f"Bearer {limited}"},
        )
        over = both(BODY, token=limited)  # 2 of 2 here, then Django's 429
        over = (
            client.post("/api/audits", json=BODY, headers={"Authorization": f"Bearer {limited}"}),
            over[1],
        )
        assert answered_here(log) - before == 6

    assert [pair[0].status_code for pair in (new, repeat, conflict, options, invalid, unknown)] == [
        202,
        200,
        409,
        422,
        422,
        401,
    ]
    assert over[0].status_code == over[1].status_code == 429
    for here, django in (new, repeat, conflict, options, invalid, unknown, over):
        assert comparable(here) == comparable(django)
    assert new[0].json().keys() == new[1].json().keys() == {"id", "status"}
    for here, django in (repeat, conflict, options, invalid, unknown, over):
        assert here.json() == django.json()


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_over_the_limit_gets_413_with_a_verified_key(server, make_key, settings):
    port, _ = server
    key = make_key("ingest")
    limit = settings.AUDITOR_MAX_BODY_BYTES
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}", timeout=30, headers={"Authorization": f"Bearer {key}"}
    ) as client:
        assert client.post("/api/audits", json=BODY).status_code == 202  # verified now

        def chunks():  # no Content-Length: counted as it arrives
            yield b'{"user_input": "q", "response": "'
            for _ in range(limit // 65536 + 2):
                yield b"x" * 65536

        answer = client.post("/api/audits", content=chunks())
    assert answer.status_code == 413
    assert AuditRun.objects.filter(user_input="q").count() == 0
    deadline = time.monotonic() + 60  # the accepted one analysed before the next test
    while AuditRun.objects.exclude(status__in=["complete", "failed"]).exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
