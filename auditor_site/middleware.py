"""Django's middleware, without a thread hop per hook under ASGI.

Under ASGI, `MiddlewareMixin` runs every `process_request` / `process_response` through
`sync_to_async` — about a dozen thread hops per request for the stack in settings, which
cost more server CPU than a whole API submission. The hooks of these classes only read
and write the request and response (headers, cookies, lazy objects), so these subclasses
call the very same hooks directly on the event loop. The hooks that may reach the
database run in a thread as before:

- the session's `process_response` when the session was used (it may save it);
- the messages' `process_response` when messages were read or added (they may go to the
  session);
- CSRF hooks when `CSRF_USE_SESSIONS` is on;
- the CSRF check of a view (`process_view`) unless it accepts at once (the view is
  exempt, like the API's, or the method is safe).

In a sync (WSGI, test client) stack they behave exactly like Django's classes.

settings.MIDDLEWARE lists the stock paths (so `check --deploy` runs Django's real
security checks, which look for those paths); the ASGI handler
(auditor_site/asgi_handler.py) loads the twin named in `FAST_EQUIVALENTS` for each.
`StaticFilesMiddleware` does the same for WhiteNoise, which is sync-only.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.messages.storage import default_storage
from django.contrib.sessions import middleware as sessions
from django.middleware import clickjacking, common, csp, csrf, security
from django.utils.functional import SimpleLazyObject, empty
from whitenoise.middleware import WhiteNoiseMiddleware


class InlineHooks:
    """Run `process_request` / `process_response` inline in async mode (no I/O in them)."""

    def _response_hook_needs_thread(self, request) -> bool:
        return False

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self._response_hook_needs_thread(request):
                response = await sync_to_async(self.process_response)(request, response)
            else:
                response = self.process_response(request, response)
        return response


class SecurityMiddleware(InlineHooks, security.SecurityMiddleware):
    pass


class ContentSecurityPolicyMiddleware(InlineHooks, csp.ContentSecurityPolicyMiddleware):
    pass


class SessionMiddleware(InlineHooks, sessions.SessionMiddleware):
    def _response_hook_needs_thread(self, request) -> bool:
        session = getattr(request, "session", None)
        return session is None or session.accessed or settings.SESSION_SAVE_EVERY_REQUEST


class CommonMiddleware(InlineHooks, common.CommonMiddleware):
    pass


SAFE_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")  # RFC 9110, as Django's CSRF check


class CsrfViewMiddleware(InlineHooks, csrf.CsrfViewMiddleware):
    async def __acall__(self, request):
        if settings.CSRF_USE_SESSIONS:
            return await csrf.CsrfViewMiddleware.__acall__(self, request)
        return await super().__acall__(request)

    async def process_view(self, request, callback, callback_args, callback_kwargs):
        """Django's check, inline when it accepts without reading anything (a view
        exempt from CSRF, like the API's, or a safe method); else in a thread (it may
        read the form body or the session)."""
        args = (request, callback, callback_args, callback_kwargs)
        if (
            getattr(request, "csrf_processing_done", False)
            or getattr(callback, "csrf_exempt", False)
            or request.method in SAFE_METHODS
        ):
            return super().process_view(*args)
        return await sync_to_async(super().process_view)(*args)


class AuthenticationMiddleware(InlineHooks, auth.AuthenticationMiddleware):
    pass


class MessageMiddleware(InlineHooks, messages.MessageMiddleware):
    """The message storage is made at its first use (API calls never use it); unused, it
    has nothing to store, as Django's `update` of an unused storage."""

    def process_request(self, request):
        request._messages = SimpleLazyObject(lambda: default_storage(request))

    def process_response(self, request, response):
        if _unused(getattr(request, "_messages", None)):
            return response
        return super().process_response(request, response)

    def _response_hook_needs_thread(self, request) -> bool:
        storage = getattr(request, "_messages", None)
        if _unused(storage):
            return False
        return storage is None or storage.used or storage.added_new


def _unused(storage) -> bool:
    return isinstance(storage, SimpleLazyObject) and storage._wrapped is empty


class XFrameOptionsMiddleware(InlineHooks, clickjacking.XFrameOptionsMiddleware):
    pass


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, async-capable: a collected file is looked up in memory and served
    without a thread hop; other requests pass straight on. With autorefresh (DEBUG) the
    lookup touches the disk, so it runs in a thread, and only for paths under STATIC_URL."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response=None, settings=settings):
        super().__init__(get_response, settings)
        if get_response is not None and iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        return super().__call__(request)

    async def __acall__(self, request):
        path = request.path_info
        if not self.autorefresh:
            static_file = self.files.get(path)
        elif path.startswith(self.static_prefix):
            static_file = await sync_to_async(self.find_file)(path)
        else:
            static_file = None
        if static_file is None:
            return await self.get_response(request)
        response = self.serve(static_file, request)
        filelike = getattr(response, "file_to_stream", None)
        if filelike is not None:  # an async iterator: Django streams it without a thread
            response.streaming_content = _read_blocks(filelike, response.block_size)
        return response


async def _read_blocks(filelike, size: int):
    """A local static file in blocks (small, on local disk: read on the event loop)."""
    while chunk := filelike.read(size):
        yield chunk


# Stock path in settings.MIDDLEWARE -> the class the ASGI handler loads in its place.
FAST_EQUIVALENTS = {
    "django.middleware.security.SecurityMiddleware": SecurityMiddleware,
    "whitenoise.middleware.WhiteNoiseMiddleware": StaticFilesMiddleware,
    "django.middleware.csp.ContentSecurityPolicyMiddleware": ContentSecurityPolicyMiddleware,
    "django.contrib.sessions.middleware.SessionMiddleware": SessionMiddleware,
    "django.middleware.common.CommonMiddleware": CommonMiddleware,
    "django.middleware.csrf.CsrfViewMiddleware": CsrfViewMiddleware,
    "django.contrib.auth.middleware.AuthenticationMiddleware": AuthenticationMiddleware,
    "django.contrib.messages.middleware.MessageMiddleware": MessageMiddleware,
    "django.middleware.clickjacking.XFrameOptionsMiddleware": XFrameOptionsMiddleware,
}


def fast_middleware_paths(paths: list[str]) -> list[str]:
    """`paths` with every stock class that has an inline-hook twin replaced by the twin."""
    out = []
    for path in paths:
        twin = FAST_EQUIVALENTS.get(path)
        out.append(f"{twin.__module__}.{twin.__qualname__}" if twin else path)
    return out
