"""The account pages: django.contrib.auth's URLs, with password reset only when e-mail is set.

Without EMAIL_HOST (settings.AUDITOR_PASSWORD_RESET off) the reset pages answer 404: a
public form that tries to send mail through an SMTP server on localhost helps nobody.
"""

from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.contrib.auth import views
from django.http import Http404
from django.urls import path


def needs_email(view):
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not settings.AUDITOR_PASSWORD_RESET:
            raise Http404("Password reset is off: no e-mail server is configured.")
        return view(request, *args, **kwargs)

    return wrapper


urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("password_change/", views.PasswordChangeView.as_view(), name="password_change"),
    path(
        "password_change/done/",
        views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path(
        "password_reset/",
        needs_email(views.PasswordResetView.as_view()),
        name="password_reset",
    ),
    path(
        "password_reset/done/",
        needs_email(views.PasswordResetDoneView.as_view()),
        name="password_reset_done",
    ),
    path(
        "reset/<uidb64>/<token>/",
        needs_email(views.PasswordResetConfirmView.as_view()),
        name="password_reset_confirm",
    ),
    path(
        "reset/done/",
        needs_email(views.PasswordResetCompleteView.as_view()),
        name="password_reset_complete",
    ),
]
