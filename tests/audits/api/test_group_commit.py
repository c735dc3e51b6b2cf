"""Group commit of single submissions (audits/api/group_commit.py).

The committer in-process (groups, their bound, no wait when idle, per-item outcomes, one
bad item in a group), then the shipped server on 127.0.0.1: concurrent `POST /api/audits`
requests stored in one transaction, with their conflicts, repeats and errors answered
request by request, and every accepted audit complete in the end.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid

import httpx
import pytest
from django.conf import settings
from django.db import IntegrityError, OperationalError, connection
from django.test.utils import CaptureQueriesContext
from ninja.errors import HttpError

from analyzers.models import ApiKey
from audits.api import group_commit
from audits.api.group_commit import GroupCommitter, Submission, store_submissions
from audits.intake import submit
from audits.models import AuditRun
from tests.live_support import free_port, start_server, stop

# These hold SQLite's write lock from a second connection so that requests pile up into a
# group (another database: no such lock to hold).
HOLDS_SQLITE_LOCK = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="holds SQLite's write lock"
)

BODY = {
    "user_input": "Which retailers use Acme?",
    "response": "Decathlon uses Acme.",
    "sources": [],
    "metadata": {},
    "collision_key": None,
    "options": {},
}


def item(key, external_id=None, **fields) -> Submission:
    body = {**BODY, **fields}
    return Submission(fields=body, api_key=key, external_id=external_id, options=body["options"])


def api_key(name: str = "ingest") -> ApiKey:
    key, _ = ApiKey.create_key(name, scope="ingest")
    return key


def run_inserts(queries) -> int:
    """INSERT statements into the runs' table (an executemany is one: "N times: INSERT";
    on PostgreSQL a COPY)."""
    return sum(
        1
        for q in queries
        if 'INSERT INTO "audits_auditrun"' in q["sql"]
        or q["sql"].startswith('COPY "audits_auditrun"')
    )


# --- storing a group --------------------------------------------------------------------


@pytest.mark.django_db
def test_a_group_is_stored_with_one_insert_and_each_item_gets_its_own_outcome(
    django_capture_on_commit_callbacks,
):
    key, other = api_key(), api_key("other")
    submit.submit_audit(**BODY, external_id="known", api_key=key)
    items = [
        item(key),  # 0 new
        item(key, "known"),  # 1 stored before: the same
        item(key, "new"),  # 2 new, with an id
        item(key, "new"),  # 3 a repeat inside the group
        item(key, "new", response="another body"),  # 4 a conflict inside the group
        item(key, "known", response="another body"),  # 5 a conflict with the stored
        item(key, options={"nope": {}}),  # 6 invalid options: 422
        item(other, "new"),  # 7 the same id, another key
        item(key, user_input="second plain"),  # 8 new
    ]
    with (
        CaptureQueriesContext(connection) as queries,
        django_capture_on_commit_callbacks(execute=False),
    ):
        out = store_submissions(items)
    created = [o.was_created if isinstance(o, AuditRun) else None for o in out]
    assert created == [True, False, True, False, None, None, None, True, True]
    assert out[3].pk == out[2].pk
    assert isinstance(out[4], submit.ExternalIdConflict)
    assert isinstance(out[5], submit.ExternalIdConflict)
    assert isinstance(out[6], HttpError) and out[6].status_code == 422
    assert out[7].pk != out[2].pk
    # One insert per key and kind (plain / with external_id), not one per audit.
    assert run_inserts(queries.captured_queries) == 3
    assert AuditRun.objects.count() == 1 + 4


@pytest.mark.django_db(transaction=True)
def test_one_bad_item_does_not_fail_the_others_of_its_group():
    key = api_key()
    missing = AuditRun(pk=uuid.uuid4())  # a re-run of nothing: the commit breaks a foreign key
    items = [
        item(key, user_input="first"),
        item(key, rerun_of=missing),
        item(key, "kept", user_input="third"),
    ]
    out = store_submissions(items)
    assert isinstance(out[1], IntegrityError)
    assert out[0].was_created and out[2].was_created
    assert set(AuditRun.objects.values_list("user_input", flat=True)) == {"first", "third"}


@HOLDS_SQLITE_LOCK
@pytest.mark.django_db(transaction=True)
def test_a_locked_database_fails_every_item_of_the_group_alike(settings):
    key = api_key()
    path = settings.DATABASES["default"]["NAME"]
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        from analyzers.lock_wait import waiting_at_most

        with waiting_at_most(50):
            out = store_submissions([item(key), item(key, user_input="other")])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert isinstance(out[0], OperationalError) and "locked" in str(out[0])
    assert out[1] is out[0]  # not tried one by one: each would wait for the lock again
    assert AuditRun.objects.count() == 0


# --- the committer ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_concurrent_submissions_form_bounded_groups_and_a_lone_one_commits_at_once(
    monkeypatch,
):
    from asgiref.sync import sync_to_async

    key = await sync_to_async(api_key)()
    committer = GroupCommitter(max_group=4)
    groups = []
    real = group_commit.store_submissions

    def recording(items):
        groups.append(len(items))
        return real(items)

    monkeypatch.setattr(group_commit, "store_submissions", recording)
    outs = await asyncio.gather(
        *(committer.submit(None, item(key, user_input=f"q{i}")) for i in range(10))
    )
    assert groups == [4, 4, 2]  # all were waiting: groups of at most 4
    assert len({o.pk for o in outs}) == 10 and all(o.was_created for o in outs)
    started = time.perf_counter()
    lone = await committer.submit(None, item(key, user_input="alone"))
    assert groups[-1] == 1 and lone.was_created
    assert time.perf_counter() - started < 2  # no linger waiting for company
    assert committer.committing is None and committer.waiting == []
    assert await sync_to_async(AuditRun.objects.count)() == 11


# --- the shipped server -----------------------------------------------------------------


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("group-commit") / "server.log"
    # The group log lines; requests wait long enough for the lock a test holds.
    proc = start_server(port, log, LOG_LEVEL="DEBUG", AUDITOR_REQUEST_LOCK_WAIT_MS="15000")
    yield port, log
    stop(proc)


def groups_in(log) -> list[int]:
    return [
        int(line.split("group commit: ")[1].split()[0])
        for line in log.read_text().splitlines()
        if "group commit: " in line
    ]


class WriteLock:
    """SQLite's write lock, held by the test while requests pile up behind the first."""

    def __enter__(self):
        self.conn = sqlite3.connect(settings.DATABASES["default"]["NAME"], isolation_level=None)
        self.conn.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, *exc):
        self.conn.execute("COMMIT")
        self.conn.close()


def post_in_order(port, key, bodies, pause=0.05):
    """POST each body on its own thread and connection, `pause` apart (their order of
    arrival); the threads and the answers they fill in."""
    answers = [None] * len(bodies)
    clients = [httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) for _ in bodies]
    for client in clients:  # connected before the clock starts
        client.get("/api/openapi.json")

    def post(i, body, query):
        try:
            answers[i] = clients[i].post(
                f"/api/audits{query}", json=body, headers={"Authorization": f"Bearer {key}"}
            )
        finally:
            clients[i].close()

    threads = []
    for i, (body, query) in enumerate(bodies):
        thread = threading.Thread(target=post, args=(i, body, query))
        thread.start()
        threads.append(thread)
        time.sleep(pause)
    return threads, answers


def wait_complete(ids, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = AuditRun.objects.filter(pk__in=ids, status=AuditRun.Status.COMPLETE).count()
        if done == len(ids):
            return
        time.sleep(0.1)
    raise AssertionError(f"{done} of {len(ids)} audits complete")


@HOLDS_SQLITE_LOCK
@pytest.mark.django_db(transaction=True)
def test_requests_arriving_during_a_commit_are_stored_in_one_transaction(server, make_key):
    port, log = server
    key = make_key("ingest")
    body = {"user_input": "q", "response": "Plain answer."}
    warm = httpx.post(
        f"http://127.0.0.1:{port}/api/audits", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    assert warm.status_code == 202
    before = len(groups_in(log))
    with WriteLock():  # the first request's commit waits: the others queue behind it
        threads, answers = post_in_order(
            port, key, [({**body, "user_input": f"q{i}"}, "") for i in range(12)], pause=0.02
        )
        time.sleep(1.5)
    for thread in threads:
        thread.join()
    assert [a.status_code for a in answers] == [202] * 12
    ids = [a.json()["id"] for a in answers]
    assert len(set(ids)) == 12
    groups = groups_in(log)[before:]
    assert sum(groups) == 12 and len(groups) <= 3 and max(groups) >= 8
    wait_complete(ids)  # nothing lost: every accepted audit is analysed and stored


@HOLDS_SQLITE_LOCK
@pytest.mark.django_db(transaction=True)
def test_repeats_conflicts_and_bad_options_inside_one_group_answer_each_request(
    server,
    make_key,
):
    port, log = server
    key = make_key("ingest")
    plain = {"user_input": "q", "response": "Plain answer."}
    same = {**plain, "external_id": "order-1"}
    before = len(groups_in(log))
    with WriteLock():
        threads, answers = post_in_order(
            port,
            key,
            [
                ({**plain, "user_input": "leader"}, ""),  # commits alone, after the lock
                (same, ""),  # the next group, in this order
                (same, ""),
                ({**same, "response": "another body"}, ""),
                ({**plain, "options": {"no_such_analyzer": {}}}, ""),
                ({**plain, "user_input": "last"}, "?wait=true"),
            ],
            pause=0.3,
        )  # the order is the point: arrivals well apart, even under load
        time.sleep(1.5)
    for thread in threads:
        thread.join()
    codes = [a.status_code for a in answers]
    assert codes == [202, 202, 200, 409, 422, 201]
    assert groups_in(log)[before:] == [1, 5]
    first, repeat = answers[1].json(), answers[2].json()
    assert repeat["id"] == first["id"] and repeat["external_id"] == "order-1"
    assert "order-1" in answers[3].json()["detail"]
    assert "no_such_analyzer" in answers[4].text
    waited = answers[5].json()
    assert waited["status"] == "complete" and waited["user_input"] == "last"
    assert AuditRun.objects.filter(external_id="order-1").count() == 1
    wait_complete([answers[0].json()["id"], first["id"]])


@pytest.mark.django_db(transaction=True)
def test_a_lone_request_is_answered_without_waiting_for_company(server, make_key):
    port, log = server
    key = make_key("ingest")
    with httpx.Client(timeout=30) as client:
        before = len(groups_in(log))
        answer = client.post(
            f"http://127.0.0.1:{port}/api/audits?wait=true",
            json={"user_input": "q", "response": "Alone."},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert answer.status_code == 201 and answer.json()["status"] == "complete"
    assert groups_in(log)[before:] == [1]
