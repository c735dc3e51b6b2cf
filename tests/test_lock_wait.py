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

pytestmark = pytest.mark.django_db(transaction=True)


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
    with (pytest.raises(OperationalError, match="locked"), waiting_at_most(60),
          transaction.atomic()):
        AuditRun.objects.create(user_input="q", response="r")
    waited = time.monotonic() - began
    assert 0.055 <= waited < 0.4
    thread.join()
    # the connection's configured wait is back for what follows
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        assert cursor.fetchone()[0] == int(connection.settings_dict["OPTIONS"]["timeout"] * 1000)
