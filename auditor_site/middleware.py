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
- CSRF hooks when `CSRF_USE_SESSIONS` is on.

In a sync (WSGI, test client) stack they behave exactly like Django's classes.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.middleware import clickjacking, common, csp, csrf, security


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


class CsrfViewMiddleware(InlineHooks, csrf.CsrfViewMiddleware):
    async def __acall__(self, request):
        if settings.CSRF_USE_SESSIONS:
            return await csrf.CsrfViewMiddleware.__acall__(self, request)
        return await super().__acall__(request)


class AuthenticationMiddleware(InlineHooks, auth.AuthenticationMiddleware):
    pass


class MessageMiddleware(InlineHooks, messages.MessageMiddleware):
    def _response_hook_needs_thread(self, request) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is None or storage.used or storage.added_new


class XFrameOptionsMiddleware(InlineHooks, clickjacking.XFrameOptionsMiddleware):
    pass
