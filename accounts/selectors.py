"""What a person may see about keys and people: their own, or, for a teacher, anyone's; a student's limits."""
from __future__ import annotations

from django.db.models import QuerySet

from accounts.key_cache import site_defaults
from accounts.limits.resolution import UNSET, Policy, resolve
from accounts.models import ApiKey, User


def keys_visible_to(viewer: User) -> QuerySet[ApiKey]:
    keys = ApiKey.objects.select_related("user", "pool")
    return keys if viewer.is_teacher else keys.filter(user=viewer)


def people_visible_to(viewer: User) -> QuerySet[User]:
    return User.objects.all() if viewer.is_teacher else User.objects.filter(id=viewer.id)


def student_policy(user: User) -> Policy:
    """The limits that apply to the student (before any key of theirs adds its own)."""
    return resolve(defaults=site_defaults(), classroom=user.classroom, student=user, key=UNSET,
                   access_expires_at=user.access_expires_at)
