"""Waiting for SQLite's write lock (analyzers/lock_wait.py) on this run's file database:
a transaction's BEGIN tries again every POLL_S up to its bound, instead of SQLite's own
growing sleeps that overslept the lock's release."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from django.db import OperationalError, connection, transaction

from analyzers.lock_wait import waiting_at_most
from audits.models import AuditRun

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's write lock only"),
]


def hold_write_lock(seconds: float, released: list[float], holding: threading.Event) -> None:
    holder = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holding.set()
    time.sleep(seconds)
    released.append(time.monotonic())
    holder.execute("ROLLBACK")
    holder.close()


def test_a_transaction_starts_as_soon_as_another_writer_lets_go():
    # 230 ms: SQLite's own waits (1, 2, 5 … 100 ms steps) would notice at 328 ms.
    released, holding = [], threading.Event()
    thread = threading.Thread(target=hold_write_lock, args=(0.23, released, holding))
    thread.start()
    holding.wait(5)
    with transaction.atomic():
        started = time.monotonic()
        AuditRun.objects.create(user_input="q", response="r")
    thread.join()
    assert started >= released[0]
    assert started - released[0] < 0.05
    assert AuditRun.objects.count() == 1


def test_a_transaction_gives_up_at_its_bound_and_other_statements_keep_theirs():
    released, holding = [], threading.Event()
    thread = threading.Thread(target=hold_write_lock, args=(0.5, released, holding))
    thread.start()
    holding.wait(5)
    began = time.monotonic()
    with pytest.raises(OperationalError, match="locked"), waiting_at_most(60), transaction.atomic():
        AuditRun.objects.create(user_input="q", response="r")
    waited = time.monotonic() - began
    assert 0.055 <= waited < 0.4
    thread.join()
    # the connection's configured wait is back for what follows
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        assert cursor.fetchone()[0] == int(connection.settings_dict["OPTIONS"]["timeout"] * 1000)


class FakeShared:
    """The shared count as the server hands it to its analysis processes (a RawValue)."""

    def __init__(self) -> None:
        self.value = 0


@pytest.fixture
def shared(monkeypatch):
    from analyzers import lock_wait

    count = FakeShared()
    monkeypatch.setattr(lock_wait, "_requests_waiting", count)
    monkeypatch.setattr(lock_wait, "_deferring", False)
    return count


def test_a_request_waiting_for_the_lock_is_counted_where_the_analysis_sees_it(shared):
    released, holding = [], threading.Event()
    thread = threading.Thread(target=hold_write_lock, args=(0.3, released, holding))
    thread.start()
    holding.wait(5)
    seen = []
    watcher = threading.Thread(target=lambda: (time.sleep(0.1), seen.append(shared.value)))
    watcher.start()
    with waiting_at_most(5000), transaction.atomic():  # a request (its wait is bounded)
        AuditRun.objects.create(user_input="q", response="r")
    thread.join()
    watcher.join()
    assert seen == [1] and shared.value == 0
    # a task's transaction (no request bound) waits uncounted
    thread = threading.Thread(target=hold_write_lock, args=(0.3, released, holding))
    holding.clear()
    thread.start()
    holding.wait(5)
    watcher = threading.Thread(target=lambda: (time.sleep(0.1), seen.append(shared.value)))
    watcher.start()
    with transaction.atomic():
        AuditRun.objects.create(user_input="q", response="r")
    thread.join()
    watcher.join()
    assert seen == [1, 0]


def test_an_analysis_process_lets_waiting_requests_go_first_for_a_bounded_time(shared, monkeypatch):
    from analyzers import lock_wait

    monkeypatch.setattr(lock_wait, "_deferring", True)
    monkeypatch.setattr(lock_wait, "MAX_DEFER_S", 5.0)
    shared.value = 1  # a request of the server waits for the lock
    threading.Timer(0.2, lambda: setattr(shared, "value", 0)).start()
    began = time.monotonic()
    with transaction.atomic():
        started = time.monotonic()
        AuditRun.objects.create(user_input="q", response="r")
    assert 0.19 <= started - began < 0.4
    shared.value = 1  # never goes away: the analysis goes on after MAX_DEFER_S
    monkeypatch.setattr(lock_wait, "MAX_DEFER_S", 0.3)
    began = time.monotonic()
    with transaction.atomic():
        AuditRun.objects.create(user_input="q", response="r")
    assert 0.29 <= time.monotonic() - began < 1.0
    assert AuditRun.objects.count() == 2


def test_an_analysis_process_polling_for_the_lock_lets_a_request_that_came_later_go_first(
    shared, monkeypatch
):
    """Already waiting when the request began to wait, the analysis process still leaves
    the lock's next turn to the request (at most MAX_DEFER_S)."""
    from analyzers import lock_wait

    monkeypatch.setattr(lock_wait, "_deferring", True)
    monkeypatch.setattr(lock_wait, "MAX_DEFER_S", 5.0)
    released, holding = [], threading.Event()
    thread = threading.Thread(target=hold_write_lock, args=(0.3, released, holding))
    thread.start()
    holding.wait(5)
    began = time.monotonic()
    # the request waits from 0.1 s (the analysis already polls) until 0.6 s
    threading.Timer(0.1, lambda: setattr(shared, "value", 1)).start()
    threading.Timer(0.6, lambda: setattr(shared, "value", 0)).start()
    with transaction.atomic():
        started = time.monotonic()
        AuditRun.objects.create(user_input="q", response="r")
    thread.join()
    assert 0.59 <= started - began < 1.0
