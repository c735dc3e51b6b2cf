"""Audit ids are UUID version 7: they sort by creation time, so stored audits append to
the end of every index keyed by them instead of landing on random pages."""

from __future__ import annotations

import time
import uuid

import pytest

from audits import ids
from audits.intake.submit import submit_audit, submit_audits


def test_an_id_is_a_version_7_uuid_carrying_the_time_in_milliseconds():
    before = time.time_ns() // 1_000_000
    value = ids.new_audit_id()
    after = time.time_ns() // 1_000_000
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert before <= value.int >> 80 <= after


def test_the_fallback_builds_the_same_layout_as_the_standard_library(monkeypatch):
    monkeypatch.setattr(ids, "_stdlib_uuid7", None)
    values = [ids.new_audit_id() for _ in range(2000)]
    assert len(set(values)) == len(values)
    assert {v.version for v in values} == {7}
    assert {v.variant for v in values} == {uuid.RFC_4122}
    # 74 random bits: across 2,000 ids every one of them is seen both set and clear.
    random_mask = (1 << 76) - 1 ^ (0b11 << 62)
    ones = 0
    zeros = 0
    for v in values:
        ones |= v.int & random_mask
        zeros |= ~v.int & random_mask
    assert ones == zeros == random_mask


def test_ids_made_a_millisecond_apart_sort_in_that_order():
    first = ids.new_audit_id()
    time.sleep(0.002)
    second = ids.new_audit_id()
    assert first.hex < second.hex  # as SQLite and PostgreSQL compare them


@pytest.mark.django_db
def test_stored_audits_get_time_ordered_ids():
    one = submit_audit(user_input="q", response="First answer.", enqueue=False)
    time.sleep(0.002)
    batch = submit_audits([{"user_input": "q", "response": f"Answer {i}."} for i in range(3)])
    assert {run.pk.version for run in [one, *batch]} == {7}
    assert one.pk.hex < min(run.pk.hex for run in batch)


@pytest.mark.django_db
def test_pages_name_an_audit_by_the_random_end_of_its_id(staff_user):
    """The first hex digits of a version 7 id are its time: audits of one minute share
    them, so the detail page's title names an audit by the id's last eight."""
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(staff_user)
    first, second = (
        submit_audit(user_input="q", response=f"Answer {i}.", enqueue=False) for i in range(2)
    )
    titles = []
    for run in (first, second):
        page = client.get(reverse("audits:detail", args=[run.pk])).content.decode()
        titles.append(page.split("<title>", 1)[1].split("</title>", 1)[0])
        assert f"Audit {str(run.pk)[-8:]}" in titles[-1]
    assert titles[0] != titles[1]
