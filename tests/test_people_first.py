"""People first: the analysis makes way between audits while a page is being served."""

from __future__ import annotations

import asyncio
import threading
import time

from auditor_site.asgi import is_page
from audits import people_first


def test_nobody_waiting_costs_nothing():
    assert not people_first.someone_waiting()
    assert asyncio.run(people_first.make_way()) == 0.0


def test_the_analysis_waits_while_a_page_is_served_and_resumes_when_it_is_done():
    started, done = threading.Event(), threading.Event()

    def page():
        with people_first.waiting():
            started.set()
            time.sleep(0.05)
        done.set()

    thread = threading.Thread(target=page)
    thread.start()
    started.wait(5)
    slept = asyncio.run(people_first.make_way(max_pause=5.0))
    thread.join()
    assert done.is_set()
    assert 0.03 <= slept < 1.0  # until the page was done, not the full 5 s
    assert not people_first.someone_waiting()


def test_a_steady_stream_of_pages_never_stalls_the_analysis():
    with people_first.waiting():
        slept = asyncio.run(people_first.make_way(max_pause=0.05))
    assert 0.05 <= slept < 0.5


def test_only_page_views_count_as_a_person_waiting():
    assert is_page({"method": "GET", "path": "/"})
    assert is_page({"method": "GET", "path": "/audits/123/"})
    assert is_page({"method": "GET", "path": "/admin/audits/auditrun/"})
    assert not is_page({"method": "POST", "path": "/review/"})  # a verdict: quick, not a page
    assert not is_page({"method": "GET", "path": "/api/audits/export"})  # long machine reads
    assert not is_page({"method": "POST", "path": "/api/audits/batch"})
    assert not is_page({"method": "GET", "path": "/static/js/live.js"})
    assert not is_page({"method": "POST", "path": "/v1/traces"})
