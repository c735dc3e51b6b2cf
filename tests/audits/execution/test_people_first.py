"""People first: the analysis makes way between audits while a page is being served."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpResponse

from auditor_site.people_first import PeopleFirstMiddleware, is_page
from audits.execution import people_first


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
    assert is_page("GET", "/")
    assert is_page("GET", "/audits/123/")
    assert is_page("GET", "/admin/audits/auditrun/")
    assert not is_page("POST", "/review/")  # a verdict: quick, not a page
    assert not is_page("GET", "/api/audits/export")  # long machine reads
    assert not is_page("POST", "/api/audits/batch")
    assert not is_page("GET", "/static/js/live.js")
    assert not is_page("POST", "/v1/traces")


def _seen_while_served(request, *, run_async: bool) -> bool:
    seen = []
    if run_async:

        async def view(req):
            seen.append(people_first.someone_waiting())
            return HttpResponse("ok")

        asyncio.run(PeopleFirstMiddleware(view)(request))
    else:

        def view(req):
            seen.append(people_first.someone_waiting())
            return HttpResponse("ok")

        PeopleFirstMiddleware(view)(request)
    assert not people_first.someone_waiting()  # released after the response
    return seen[0]


@pytest.mark.parametrize("run_async", [False, True])
def test_only_staff_page_views_make_the_analysis_wait(rf, run_async):
    """Anyone else's requests would let an anonymous client hold the analysis back."""

    def request(path, user, method="get"):
        req = getattr(rf, method)(path)
        req.user = user

        async def auser():
            return user

        req.auser = auser
        return req

    staff, anonymous = User(username="s", is_staff=True), AnonymousUser()
    assert _seen_while_served(request("/", staff), run_async=run_async)
    assert not _seen_while_served(request("/", anonymous), run_async=run_async)
    assert not _seen_while_served(request("/api/audits", staff), run_async=run_async)
    assert not _seen_while_served(request("/review/", staff, "post"), run_async=run_async)


def test_the_middleware_is_in_the_stack():
    from django.conf import settings

    stack = settings.MIDDLEWARE
    assert stack.index("auditor_site.people_first.PeopleFirstMiddleware") > stack.index(
        "django.contrib.auth.middleware.AuthenticationMiddleware"
    )
