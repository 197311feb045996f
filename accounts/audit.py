"""Recording teacher actions (key revoked, student disabled, worker moved…) as AuditEvent rows."""
from __future__ import annotations

from django.http import HttpRequest

from accounts.models import AuditEvent, User


def audit_record(*, actor: User | None, action: str, subject: str, detail: str = "") -> AuditEvent:
    return AuditEvent.objects.create(actor=actor, action=action, subject=subject[:200], detail=detail[:300])


def acting_user(request: HttpRequest) -> User | None:
    """The signed-in person behind an admin or portal request, for the audit log."""
    user = getattr(request, "user", None)
    return user if isinstance(user, User) else None


def record_teacher_action(sender: object, *, actor: User | None, action: str, subject: str, detail: str = "",
                          **_: object) -> None:
    """Receiver of fleet's teacher_action signal (fleet sits below accounts and cannot import this)."""
    audit_record(actor=actor, action=action, subject=subject, detail=detail)
