"""What a person may see and act on: their own keys and usage; a teacher, also their classes'
students (a staff superuser: everyone); a student's limits and their class's pause.

One notion of "teacher" for pages, APIs, the websocket and commands: an active staff account
(`acts_as_teacher`). The role field is a label; removing the staff flag (or disabling the
account) ends a teacher's access everywhere at once."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.access import is_teacher
from accounts.key_cache import class_pause_rule, site_defaults
from accounts.limits.resolution import UNSET, Policy, resolve
from accounts.models import ApiKey, Classroom, User
from accounts.pause import ActivePause, active_pause, pause_text, upcoming_pause, when
from core.keys import chat_session_fingerprint, hash_key


def sees_everyone(user: object) -> bool:
    """A staff superuser (an admin): every class, student and key."""
    return is_teacher(user) and bool(getattr(user, "is_superuser", False))


def classes_visible_to(viewer: User) -> QuerySet[Classroom]:
    if sees_everyone(viewer):
        return Classroom.objects.all()
    if is_teacher(viewer):
        return Classroom.objects.filter(teachers=viewer)
    return Classroom.objects.none()


def classes_in_use(viewer: User) -> QuerySet[Classroom]:
    """The viewer's classes that are not archived: the dashboard's and the class pickers'
    (an archived class's page, history and students stay reachable through classes_visible_to)."""
    return classes_visible_to(viewer).filter(archived_at__isnull=True)


def students_visible_to(viewer: User) -> QuerySet[User]:
    """The people a teacher acts on: the students of their classes; never another teacher, staff
    member or admin (an admin acts on everyone)."""
    if sees_everyone(viewer):
        return User.objects.all()
    if is_teacher(viewer):
        return User.objects.filter(classroom__teachers=viewer, is_staff=False, is_superuser=False).distinct()
    return User.objects.none()


def email_holders(emails: list[str]) -> dict[str, str]:
    """Which accounts hold these email addresses, compared case-insensitively: {lower-cased
    email: username}. A school email belongs to one account (school sign-in matches by it)."""
    wanted = {email.strip().lower() for email in emails if email.strip()}
    if not wanted:
        return {}
    query = Q()
    for email in wanted:
        query |= Q(email__iexact=email)
    return {email.lower(): username for email, username in User.objects.filter(query).values_list("email", "username")}


def may_manage(viewer: User, person: User) -> bool:
    """May `viewer` change `person`'s account, limits or keys?"""
    return students_visible_to(viewer).filter(id=person.id).exists()


def keys_visible_to(viewer: User) -> QuerySet[ApiKey]:
    keys = ApiKey.objects.select_related("user", "pool")
    if sees_everyone(viewer):
        return keys
    if is_teacher(viewer):
        return keys.filter(Q(user=viewer) | Q(user__in=students_visible_to(viewer)))
    return keys.filter(user=viewer)


def people_visible_to(viewer: User) -> QuerySet[User]:
    if sees_everyone(viewer):
        return User.objects.all()
    return User.objects.filter(Q(id=viewer.id) | Q(id__in=students_visible_to(viewer)))


def student_policy(user: User) -> Policy:
    """The limits that apply to the student (before any key of theirs adds its own)."""
    return resolve(defaults=site_defaults(), classroom=user.classroom, student=user, key=UNSET,
                   access_expires_at=user.access_expires_at, term=user.classroom.term if user.classroom else None)


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


CHAT_KEY_RENEW_BEFORE = timedelta(minutes=30)


def chat_key_current(*, user: User, session_key: str, raw: str | None) -> bool:
    """Whether `raw` (the chat page's cookie) is this session's live chat key, with at least
    CHAT_KEY_RENEW_BEFORE left: then the page keeps it rather than making a new one."""
    if not raw:
        return False
    return ApiKey.objects.filter(
        user=user, chat_session=chat_session_fingerprint(session_key), secret_hash=hash_key(raw),
        revoked_at__isnull=True, expires_at__gt=timezone.now() + CHAT_KEY_RENEW_BEFORE).exists()
