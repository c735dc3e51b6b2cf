"""Who may see the staff pages (dashboard and review alike)."""

from __future__ import annotations

from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse


def staff_required(view):
    """Anonymous users go to the login page; signed-in non-staff users get a 403."""

    @wraps(view)
    @login_required
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("The dashboard is for staff accounts.")
        return view(request, *args, **kwargs)

    return wrapper
