"""Per-user dashboard choices, stored server-side (`DashboardPreference`): they follow
the user to another browser, unlike a cookie."""

from __future__ import annotations

from audits.models import DashboardPreference

AuditView = DashboardPreference.AuditView


def audit_view(user) -> str:
    """ "cards" or "table" (cards until the user chose)."""
    if not getattr(user, "is_authenticated", False):
        return AuditView.CARDS
    value = (
        DashboardPreference.objects.filter(user=user).values_list("audit_view", flat=True).first()
    )
    return value or AuditView.CARDS


def set_audit_view(user, view: str) -> str:
    """Remember `view` for `user` (an unknown value is refused with ValueError)."""
    if view not in AuditView.values:
        raise ValueError(f"view must be one of {', '.join(AuditView.values)}")
    DashboardPreference.objects.update_or_create(user=user, defaults={"audit_view": view})
    return view
