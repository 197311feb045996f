"""What a person may see about keys and people: their own, or, for a teacher, anyone's; a student's limits."""
from __future__ import annotations

from django.db.models import QuerySet

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from accounts.key_cache import class_pause_rule, site_defaults
from accounts.pause import ActivePause, active_pause, pause_text, upcoming_pause, when
from accounts.limits import UNSET, Policy, resolve
from accounts.models import ApiKey, Classroom, User


def keys_visible_to(viewer: User) -> QuerySet[ApiKey]:
    keys = ApiKey.objects.select_related("user", "pool")
    return keys if viewer.is_teacher else keys.filter(user=viewer)


def people_visible_to(viewer: User) -> QuerySet[User]:
    return User.objects.all() if viewer.is_teacher else User.objects.filter(id=viewer.id)


def student_policy(user: User) -> Policy:
    """The limits that apply to the student (before any key of theirs adds its own)."""
    return resolve(defaults=site_defaults(), classroom=user.classroom, student=user, key=UNSET,
                   access_expires_at=user.access_expires_at)


UPCOMING_PAUSE = timedelta(hours=1)


@dataclass(frozen=True)
class PauseStatus:
    """A class's pause as a page shows it: holding now and/or starting within the hour."""

    now: ActivePause | None
    coming: ActivePause | None
    text: str  # what a student reads ("" when neither)


def pause_status(room: Classroom | None) -> PauseStatus:
    if room is None:
        return PauseStatus(None, None, "")
    rule = class_pause_rule(room)
    local = timezone.localtime()
    holding = active_pause(rule, local)
    coming = upcoming_pause(rule, local, within=UPCOMING_PAUSE) if holding is None else None
    if holding is not None:
        text = pause_text(holding, local)
    elif coming is not None and coming.starts is not None:
        text = (f"Your class {room.name} will be paused from {when(coming.starts, local)}"
                + (f" until {when(coming.until, local)}" if coming.until else "")
                + (f": {coming.message}" if coming.message else "."))
    else:
        text = ""
    return PauseStatus(holding, coming, text)
