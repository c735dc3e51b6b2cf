"""Polling `GET /api/audits/{id}` on the shipped server: ETags and 304, `?wait=`, the burst.

The server runs with small bounds (a burst of 20 requests a second per key, a 2 s longest
wait, 2 waiting GETs per key) and logs each GET answered in front of Django
(audits/api/poll_asgi.py). Audits are written by this process, as a worker in another
process would: what the server caches must follow those writes.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from django.utils import timezone

from audits.api.polling import Answer, AnswerCache
from audits.models import AuditRun
from tests.factories import make_audit
from tests.live_support import free_port, start_server, stop

pytestmark = pytest.mark.django_db(transaction=True)

BURST = 20
LONGEST_WAIT_S = 2


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("polling") / "server.log"
    proc = start_server(
        port,
        log,
        LOG_LEVEL="DEBUG",
        AUDITOR_RATE_BURST_PER_S=str(BURST),
        AUDITOR_WAIT_TIMEOUT_S=str(LONGEST_WAIT_S),
        AUDITOR_POLL_WAIT_PER_KEY="2",
        AUDITOR_RECOVER_PENDING_AFTER_S="3600",  # the pending audits here stay pending
    )
    yield port, log
    stop(proc)


def client(port: int, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"http://127.0.0.1:{port}", timeout=30, headers={"Authorization": f"Bearer {key}"}
    )


def answered_here(log) -> int:
    return log.read_text().count("answered in front of Django")


def test_a_finished_audit_gets_an_etag_and_304_while_it_is_unchanged(server, read_key):
    port, log = server
    run = make_audit()
    with client(port, read_key) as http:
        http.get(f"/api/audits/{run.pk}")  # Django verifies the key
        before = answered_here(log)
        first = http.get(f"/api/audits/{run.pk}")
        again = http.get(f"/api/audits/{run.pk}", headers={"If-None-Match": first.headers["etag"]})
        weak = http.get(
            f"/api/audits/{run.pk}", headers={"If-None-Match": "W/" + first.headers["etag"]}
        )
        other = http.get(f"/api/audits/{run.pk}", headers={"If-None-Match": '"other"'})
    assert answered_here(log) == before + 4
    assert first.status_code == 200 and first.json()["id"] == str(run.pk)
    etag = first.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", etag)
    assert weak.status_code == 304
    assert (other.status_code, other.content) == (200, first.content)


def test_answers_in_front_of_django_are_djangos(server, read_key):
    port, log = server
    run = make_audit()
    missing = "00000000-0000-4000-8000-000000000000"
    with client(port, read_key) as http:
        http.get(f"/api/audits/{run.pk}")
        pairs = [
            (http.get(f"/api/audits/{audit_id}"), http.get(f"/api/audits/{audit_id}?via=django"))
            for audit_id in (run.pk, missing)
        ]
    for here, django in pairs:
        assert here.status_code == django.status_code
        assert here.content == django.content
        drop = ("date", "content-length")
        assert {k: v for k, v in here.headers.items() if k not in drop} == {
            k: v for k, v in django.headers.items() if k not in drop
        }
    assert [here.status_code for here, _ in pairs] == [200, 404]


def test_a_verdict_changes_the_etag_and_the_answer(server, read_key, make_key):
    port, _ = server
    run = make_audit()
    with client(port, read_key) as http:
        first = http.get(f"/api/audits/{run.pk}")
        etag = first.headers["etag"]
        with client(port, make_key("review")) as reviewer:
            assert (
                reviewer.post(
                    f"/api/audits/{run.pk}/reviews", json={"verdict": "confirmed"}
                ).status_code
                == 201
            )
        after = http.get(f"/api/audits/{run.pk}", headers={"If-None-Match": etag})
        via_django = http.get(f"/api/audits/{run.pk}?via=django")
    assert after.status_code == 200 and after.headers["etag"] != etag
    assert [r["verdict"] for r in after.json()["reviews"]] == ["confirmed"]
    assert after.content == via_django.content


def test_a_change_written_by_another_process_is_seen_at_the_next_get(server, read_key):
    port, _ = server
    run = make_audit()
    with client(port, read_key) as http:
        first = http.get(f"/api/audits/{run.pk}")
        # A re-surfacing under new thresholds, as audits.surfacing writes it.
        AuditRun.objects.filter(pk=run.pk).update(threshold=0.9, has_card=not run.has_card)
        after = http.get(f"/api/audits/{run.pk}", headers={"If-None-Match": first.headers["etag"]})
    assert after.status_code == 200
    assert (after.json()["threshold"], after.json()["has_card"]) == (0.9, not run.has_card)


def finish_later(run: AuditRun, delay: float) -> threading.Thread:
    def finish():
        time.sleep(delay)
        AuditRun.objects.filter(pk=run.pk).update(
            status=AuditRun.Status.COMPLETE,
            started_at=timezone.now(),
            finished_at=timezone.now(),
            overall_score=0.1,
        )

    thread = threading.Thread(target=finish)
    thread.start()
    return thread


def test_wait_answers_as_soon_as_a_pending_audit_finishes(server, read_key):
    port, _ = server
    run = make_audit(status="pending", results=[])
    with client(port, read_key) as http:
        http.get(f"/api/audits/{run.pk}")
        finisher = finish_later(run, 0.5)
        start = time.monotonic()
        answer = http.get(f"/api/audits/{run.pk}?wait=10")
        took = time.monotonic() - start
        finisher.join()
    assert answer.status_code == 200 and answer.json()["status"] == "complete"
    assert 0.45 <= took < 1.0


def test_wait_answers_the_pending_state_when_its_time_is_up(server, read_key):
    port, _ = server
    run = make_audit(status="pending", results=[])
    with client(port, read_key) as http:
        start = time.monotonic()
        short = http.get(f"/api/audits/{run.pk}?wait=0.5")
        middle = time.monotonic()
        longest = http.get(f"/api/audits/{run.pk}?wait=3600")  # bounded by the setting
        end = time.monotonic()
        bad = http.get(f"/api/audits/{run.pk}?wait=soon")
    assert [short.status_code, longest.status_code] == [200, 200]
    assert short.json()["status"] == longest.json()["status"] == "pending"
    assert 0.5 <= middle - start < 1.5
    assert LONGEST_WAIT_S <= end - middle < LONGEST_WAIT_S + 1.5
    assert bad.status_code == 422 and "wait" in bad.text


def test_past_the_waiting_gets_of_a_key_a_get_is_answered_at_once(server, read_key):
    port, _ = server
    run = make_audit(status="pending", results=[])
    took: list[float] = []

    def waiting_get():
        with client(port, read_key) as http:
            start = time.monotonic()
            assert http.get(f"/api/audits/{run.pk}?wait=true").json()["status"] == "pending"
            took.append(time.monotonic() - start)

    with client(port, read_key) as http:
        http.get(f"/api/audits/{run.pk}")
    waiters = [threading.Thread(target=waiting_get) for _ in range(2)]
    for thread in waiters:
        thread.start()
    time.sleep(0.3)
    with client(port, read_key) as http:
        start = time.monotonic()
        third = http.get(f"/api/audits/{run.pk}?wait=true")
        third_took = time.monotonic() - start
    for thread in waiters:
        thread.join()
    assert third.status_code == 200 and third.json()["status"] == "pending"
    assert third_took < 0.5
    assert min(took) >= LONGEST_WAIT_S


@pytest.mark.parametrize("path", ["/api/audits/{id}", "/api/audits"])
def test_a_burst_past_the_per_second_limit_gets_429_with_retry_after(server, make_key, path):
    port, _ = server
    run = make_audit()
    key = make_key("read")
    with client(port, key) as http:
        assert http.get(path.format(id=run.pk)).status_code == 200
    lock = threading.Lock()
    answers: list[httpx.Response] = []

    def burst():
        with client(port, key) as http:
            for _ in range(BURST):
                answer = http.get(path.format(id=run.pk))
                with lock:
                    answers.append(answer)

    start = time.monotonic()
    threads = [threading.Thread(target=burst) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - start
    served = sum(a.status_code == 200 for a in answers)
    limited = [a for a in answers if a.status_code == 429]
    assert served + len(limited) == len(answers)
    assert served <= BURST * (1 + took)  # the bucket, refilled at BURST a second
    assert limited and all(int(a.headers["retry-after"]) >= 1 for a in limited)
    assert "rate limit" in limited[0].json()["detail"]
    time.sleep(int(limited[-1].headers["retry-after"]))
    with client(port, key) as http:
        assert http.get(path.format(id=run.pk)).status_code == 200


def test_the_cache_of_finished_audits_is_bounded_in_entries_and_bytes(settings):
    settings.AUDITOR_POLL_CACHE_ENTRIES = 3
    settings.AUDITOR_POLL_CACHE_BYTES = 1000
    cache = AnswerCache()
    version = ("complete",)
    for i in range(5):
        cache.put(i, Answer(version, b"x" * 100, str(i)))
    assert [i for i in range(5) if cache.get(i, version)] == [2, 3, 4]
    cache.put(5, Answer(version, b"x" * 900, "5"))  # the oldest go to make room
    assert [i for i in range(6) if cache.get(i, version)] == [4, 5]
    cache.put(6, Answer(version, b"x" * 1001, "6"))  # larger than the whole cache
    assert cache.get(6, version) is None
    assert cache.get(5, ("failed",)) is None  # another version is no hit
