"""Analysis makes way while a staff member waits for a page (`audits.execution.people_first`).

Only staff page views count (GET or HEAD outside the machine paths): if anyone's request
counted, an anonymous client could hold the analysis back at will with cheap requests.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from audits.execution import people_first

MACHINE_PREFIXES = ("/api/", "/v1/", "/static/", "/ws/", "/favicon.ico")


def is_page(method: str, path: str) -> bool:
    """A person's page view (the dashboard, the admin), not a machine's call."""
    return method in ("GET", "HEAD") and not path.startswith(MACHINE_PREFIXES)


class PeopleFirstMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self.__acall__(request)
        if is_page(request.method, request.path) and request.user.is_staff:
            with people_first.waiting():
                return self.get_response(request)
        return self.get_response(request)

    async def __acall__(self, request):
        if is_page(request.method, request.path) and (await request.auser()).is_staff:
            with people_first.waiting():
                return await self.get_response(request)
        return await self.get_response(request)
