"""The collector pause of huge paragraphs is scoped: overlapping pauses in several threads
keep the collector off until the last ends, and a collector someone else turned off stays
off."""

from __future__ import annotations

import gc
import threading

import pytest

from analyzers.engine.config import AuditorConfig
from analyzers.engine.guardrails import pipeline
from analyzers.engine.guardrails.collector import collector_paused
from analyzers.engine.guardrails.settings import settings_from_config
from analyzers.engine.guardrails.stream import audit_text


def test_overlapping_pauses_in_two_threads_end_with_the_last_one():
    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with collector_paused():
            second_in.set()
            first_out.wait(5)
            seen["after the first ended"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"after the first ended": False}
    assert gc.isenabled()


def test_a_collector_turned_off_elsewhere_stays_off():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.python_guardrails
def test_a_huge_paragraph_is_audited_with_the_collector_paused_and_turned_back_on():
    seen = []
    real = pipeline._audit_paragraph

    def spy(*args):
        seen.append(gc.isenabled())
        return real(*args)

    pipeline._audit_paragraph = spy
    try:
        settings = settings_from_config(AuditorConfig())
        audit_text("word " * (pipeline.LARGE_PARAGRAPH // 4), settings)
        audit_text("short", settings)
    finally:
        pipeline._audit_paragraph = real
    assert seen == [False, True]
    assert gc.isenabled()
