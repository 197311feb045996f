"""State changes for people and keys."""
from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.audit import audit_record
from accounts.keys import generate_key
from accounts.models import ApiKey, User
from fleet.models import Pool


def user_ensure(*, username: str, role: str, password: str | None = None) -> tuple[User, bool]:
    """Create the user if missing; returns (user, created). Teachers are staff (admin access)."""
    user, created = User.objects.get_or_create(
        username=username, defaults={"role": role, "is_staff": role == User.Role.TEACHER}
    )
    if password is not None:
        user.set_password(password)
        user.save(update_fields=["password"])
    return user, created


def key_issue(
    *, user: User, name: str = "default", pool: Pool | None = None, expires_at: datetime | None = None
) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the raw key, which is never stored or shown again."""
    pool = pool or Pool.objects.get_default()
    for _ in range(5):
        new = generate_key()
        try:
            with transaction.atomic():
                key = ApiKey.objects.create(
                    user=user,
                    pool=pool,
                    name=name,
                    prefix=new.prefix,
                    secret_hash=new.secret_hash,
                    expires_at=expires_at,
                )
            return key, new.raw
        except IntegrityError:  # prefix collision (~1 in 2^51): draw again
            continue
    raise RuntimeError("could not draw a unique key prefix")


def key_revoke(*, key: ApiKey, actor: User | None = None) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="key.revoked", subject=key.user.username, detail=f"{key.display} ({key.name})")
    from accounts.key_cache import key_cache_invalidate

    key_cache_invalidate(prefix=key.prefix)
    return key


def user_set_active(*, user: User, active: bool, actor: User | None = None) -> User:
    """Disable or re-enable a student; their keys stop (or resume) working in every gateway process."""
    user.is_active = active
    user.save(update_fields=["is_active"])
    audit_record(actor=actor, action="student.enabled" if active else "student.disabled", subject=user.username)
    from accounts.key_cache import key_cache_invalidate

    for prefix in user.api_keys.values_list("prefix", flat=True):
        key_cache_invalidate(prefix=prefix)
    return user
