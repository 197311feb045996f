"""State changes for people and keys."""
from __future__ import annotations

from datetime import date, datetime, time, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.audit import audit_record
from accounts.key_cache import class_pause_rule, key_cache_invalidate, key_prefixes_changed
from accounts.models import ApiKey, ClassPauseWindow, Classroom, User
from accounts.pause import Window, active_pause
from core.dates import moment_text
from core.keys import chat_session_fingerprint, generate_key
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


MAX_ACTIVE_KEYS = 10


class TooManyKeys(Exception):
    """A student already holds MAX_ACTIVE_KEYS keys that are not revoked."""

    def __init__(self) -> None:
        super().__init__(f"You already have {MAX_ACTIVE_KEYS} active keys; revoke one first.")


def key_issue(
    *, user: User, name: str = "default", pool: Pool | None = None, expires_at: datetime | None = None,
    enforce_limit: bool = True, chat_session: str = "",
) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the raw key, which is never stored or shown again.

    A student holds at most MAX_ACTIVE_KEYS unrevoked keys: past that TooManyKeys is raised.
    The count and the insert are one serialized step: PostgreSQL locks the owner's row;
    SQLite's transactions here are IMMEDIATE (core/env.py), so a second writer waits for the
    first to commit. An operator (`issue_key --force`) may pass `enforce_limit=False`.
    `chat_session`: the chat page's key for that sign-in session (chat_key_issue); it never
    counts toward MAX_ACTIVE_KEYS.
    """
    pool = pool or Pool.objects.get_default()
    for _ in range(5):
        new = generate_key()
        try:
            with transaction.atomic():
                User.objects.select_for_update().filter(pk=user.pk).first()
                if enforce_limit and active_key_count(user) >= MAX_ACTIVE_KEYS:
                    raise TooManyKeys()
                key = ApiKey.objects.create(
                    user=user,
                    pool=pool,
                    name=name,
                    prefix=new.prefix,
                    secret_hash=new.secret_hash,
                    expires_at=expires_at,
                    chat_session=chat_session,
                )
            # Now, for a caller that commits later (a test, an outer transaction), and again on
            # commit, for a process that reloaded the prefixes in between and missed the row.
            key_prefixes_changed()
            transaction.on_commit(key_prefixes_changed)
            return key, new.raw
        except IntegrityError:  # prefix collision (~1 in 2^51): draw again
            continue
    raise RuntimeError("could not draw a unique key prefix")


def active_key_count(user: User) -> int:
    """The student's own unrevoked keys (the chat page's are not theirs to manage)."""
    return ApiKey.objects.filter(user=user, revoked_at__isnull=True, chat_session="").count()


CHAT_KEY_LIFETIME = timedelta(hours=2)  # the page asks for a fresh one (chat_key_issue) when it lapses


class ChatOff(Exception):
    """The chat page is turned off for this person's class."""


def chat_allowed(user: User) -> bool:
    """Teachers always; a student unless their class turned the chat page off."""
    return user.is_staff or user.classroom is None or user.classroom.chat_enabled


def chat_key_issue(*, user: User, session_key: str) -> str:
    """A fresh chat-page key for this sign-in session, valid for CHAT_KEY_LIFETIME; the session's
    earlier chat keys are revoked. Returns the raw key, which goes only into the page's HttpOnly
    cookie (portal/chat.py). An ordinary key to the gateway: the same limits, budgets, pause and
    fair share as the student's own keys, under the student's name. Raises ChatOff."""
    if not chat_allowed(user):
        raise ChatOff(f"The chat page is turned off for class {user.classroom}.")
    chat_keys_revoke(user=user, session_key=session_key)
    _, raw = key_issue(user=user, name="chat page", expires_at=timezone.now() + CHAT_KEY_LIFETIME,
                       enforce_limit=False, chat_session=chat_session_fingerprint(session_key))
    return raw


def chat_keys_revoke(*, user: User | None = None, session_key: str | None = None,
                     classroom: Classroom | None = None) -> int:
    """Revoke chat-page keys: one session's (sign-out, a new key for it), a person's, or a class's
    students' (the class turned the chat page off). Refused at once by every gateway process.
    Not audited one by one: a sign-out is not a teacher's action. Returns how many."""
    keys = ApiKey.objects.filter(revoked_at__isnull=True).exclude(chat_session="")
    if user is not None:
        keys = keys.filter(user=user)
    if session_key is not None:
        keys = keys.filter(chat_session=chat_session_fingerprint(session_key))
    if classroom is not None:
        keys = keys.filter(user__classroom=classroom)
    prefixes = list(keys.values_list("prefix", flat=True))
    if prefixes:
        ApiKey.objects.filter(prefix__in=prefixes).update(revoked_at=timezone.now())
        for prefix in prefixes:
            key_cache_invalidate(prefix=prefix)
    return len(prefixes)


def class_set_chat(*, classroom: Classroom, enabled: bool, actor: User | None = None) -> bool:
    """Turn the chat page on or off for a class's students; off revokes their open pages' keys.
    True if it changed. Audited as class.chat."""
    if classroom.chat_enabled == enabled:
        return False
    classroom.chat_enabled = enabled
    classroom.save(update_fields=["chat_enabled"])
    audit_record(actor=actor, action="class.chat", subject=f"class {classroom.name}",
                 detail="chat page on" if enabled else "chat page off")
    if not enabled:
        chat_keys_revoke(classroom=classroom)
    return True


def key_revoke(*, key: ApiKey, actor: User | None = None) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="key.revoked", subject=key.user.username, detail=f"{key.display} ({key.name})")
    key_cache_invalidate(prefix=key.prefix)
    return key


def user_set_active(*, user: User, active: bool, actor: User | None = None) -> User:
    """Disable or re-enable a student; their keys stop (or resume) working in every gateway process."""
    user.is_active = active
    user.save(update_fields=["is_active"])
    audit_record(actor=actor, action="student.enabled" if active else "student.disabled", subject=user.username)
    for prefix in user.api_keys.values_list("prefix", flat=True):
        key_cache_invalidate(prefix=prefix)
    return user


LIMIT_FIELDS = ("requests_per_minute", "tokens_per_day", "tokens_per_week", "tokens_per_term", "concurrency",
                "allowed_models", "allowed_pools")


def limits_set(*, target: Classroom | User | ApiKey, actor: User | None = None, **changes: object) -> list[str]:
    """Change limit fields on a class, a student or a key (None / "" = inherit). Audited as
    "limits.changed"; every gateway process applies the change on its next request. Returns the
    fields that changed."""
    unknown = set(changes) - set(LIMIT_FIELDS) - {"access_expires_at"}
    if unknown:
        raise ValueError(f"not limit fields: {', '.join(sorted(unknown))}")
    changed = [name for name, value in changes.items() if getattr(target, name) != value]
    if not changed:
        return []
    for name in changed:
        setattr(target, name, changes[name])
    target.save(update_fields=changed)
    limits_changed(target=target, actor=actor, fields=changed)
    return changed


def classroom_set_weight(*, classroom: Classroom, weight: float, actor: User | None = None) -> bool:
    """Set a class's share weight (0.1-10; inference/admission/fair_share.py): audited as "limits.changed",
    applied by every gateway process on its students' next request. True if it changed."""
    if not 0.1 <= weight <= 10.0:
        raise ValueError(f"a class's share weight is between 0.1 and 10, not {weight}")
    if classroom.fair_weight == weight:
        return False
    classroom.fair_weight = weight
    classroom.save(update_fields=["fair_weight"])
    limits_changed(target=classroom, actor=actor, fields=["fair_weight"])
    return True


def limits_describe(target: Classroom | User | ApiKey, fields: list[str]) -> str:
    """"requests_per_minute=5, tokens_per_day=inherit" for the audit log and the command line."""
    return ", ".join(f"{name}={value if (value := getattr(target, name)) not in (None, '') else 'inherit'}"
                     for name in fields)


def limits_changed(*, target: Classroom | User | ApiKey, actor: User | None, fields: list[str]) -> None:
    """Audit and propagate a limit change already saved (the admin saves forms itself)."""
    audit_record(actor=actor, action="limits.changed", subject=_subject(target), detail=limits_describe(target, fields))
    key_cache_invalidate()


def _subject(target: Classroom | User | ApiKey) -> str:
    if isinstance(target, Classroom):
        return f"class {target.name}"
    if isinstance(target, ApiKey):
        return f"{target.user.username} key {target.display}"
    return target.username


# --- pausing a class (exam mode); the rules are in accounts/pause.py ---------------------------


def class_pause(*, classroom: Classroom, actor: User | None = None, until: datetime | None = None,
                starts: datetime | None = None, message: str = "") -> Classroom:
    """Pause a class now (or from `starts`) until `until` (None: until resumed). Its students'
    requests are refused on their next request in every gateway process; running streams finish."""
    if until is not None and until <= (starts or timezone.now()):
        raise ValueError("The pause must end after it starts.")
    classroom.paused, classroom.pause_starts, classroom.pause_until = True, starts, until
    classroom.paused_by, classroom.pause_message = actor, message[:200]
    classroom.pause_lifted_until = None
    classroom.save(update_fields=["paused", "pause_starts", "pause_until", "paused_by", "pause_message",
                                  "pause_lifted_until"])
    span = ((f"from {moment_text(starts)} " if starts else "")
            + (f"until {moment_text(until)}" if until else "until resumed"))
    audit_record(actor=actor, action="class.paused", subject=f"class {classroom.name}",
                 detail=span + (f": {message}" if message else ""))
    key_cache_invalidate()
    return classroom


def class_resume(*, classroom: Classroom, actor: User | None = None) -> Classroom:
    """End the one-off pause, and lift a timetable window holding now (the next one still pauses)."""
    now = timezone.localtime()
    holding = active_pause(class_pause_rule(classroom), now)
    classroom.paused, classroom.pause_starts, classroom.pause_until = False, None, None
    classroom.pause_message = ""
    if holding is not None and holding.scheduled:
        classroom.pause_lifted_until = holding.until
    classroom.save(update_fields=["paused", "pause_starts", "pause_until", "pause_message", "pause_lifted_until"])
    audit_record(actor=actor, action="class.resumed", subject=f"class {classroom.name}",
                 detail="timetable window lifted" if holding is not None and holding.scheduled else "")
    key_cache_invalidate()
    return classroom


def class_pause_window_add(*, classroom: Classroom, weekday: int, starts: time, ends: time, message: str = "",
                           actor: User | None = None) -> ClassPauseWindow:
    if not 0 <= weekday <= 6:
        raise ValueError("weekday is 0 (Monday) to 6 (Sunday)")
    if starts == ends:
        raise ValueError("A window must not start and end at the same time.")
    window = ClassPauseWindow.objects.create(classroom=classroom, weekday=weekday, starts=starts, ends=ends,
                                             message=message[:200])
    audit_record(actor=actor, action="class.timetable", subject=f"class {classroom.name}",
                 detail=f"added {Window(weekday, starts, ends).describe()}")
    key_cache_invalidate()
    return window


def class_pause_window_remove(*, window: ClassPauseWindow, actor: User | None = None) -> None:
    described = Window(window.weekday, window.starts, window.ends).describe()
    room = window.classroom
    window.delete()
    audit_record(actor=actor, action="class.timetable", subject=f"class {room.name}", detail=f"removed {described}")
    key_cache_invalidate()


def teacher_ensure(*, username: str, class_names: list[str], actor: User | None = None) -> tuple[User, bool]:
    """Create a teacher (staff, with no usable password until they set one) if missing, and make
    them a teacher of each named class (created if missing). Returns (teacher, created). Audited."""
    username = username.strip().lower()
    with transaction.atomic():
        teacher, created = User.objects.get_or_create(
            username=username, defaults={"role": User.Role.TEACHER, "is_staff": True})
        if created:
            teacher.set_unusable_password()
            teacher.save(update_fields=["password"])
        elif not teacher.is_staff:
            raise ValueError(f"{username} exists and is not a staff account (a student?); choose another username")
        rooms = [Classroom.objects.get_or_create(name=name.strip()[:100])[0] for name in class_names if name.strip()]
        for room in rooms:
            room.teachers.add(teacher)
        audit_record(actor=actor, action="teacher.created" if created else "teacher.classes",
                     subject=teacher.username, detail=", ".join(f"class {room.name}" for room in rooms))
    return teacher, created


def class_term_set(*, classroom: Classroom, starts: date | None, ends: date | None,
                   actor: User | None = None) -> bool:
    """Set (or, with None, clear) a class's term; its students' budgets per term count within
    it. Audited; applies to the next request everywhere. Returns whether anything changed."""
    if (starts is None) != (ends is None) or (starts is not None and ends is not None and ends < starts):
        raise ValueError("A term needs a first and a last day, the last not before the first.")
    if (classroom.term_starts, classroom.term_ends) == (starts, ends):
        return False
    classroom.term_starts, classroom.term_ends = starts, ends
    classroom.save(update_fields=["term_starts", "term_ends"])
    audit_record(actor=actor, action="class.term", subject=f"class {classroom.name}",
                 detail=f"{starts} to {ends}" if starts else "no term")
    key_cache_invalidate()
    return True


# --- classes made and changed in the site ------------------------------------------------------


def _class_name(name: str) -> str:
    cleaned = " ".join(name.split())[:100]
    if not cleaned:
        raise ValueError("Give the class a name, e.g. Year 10 Computing.")
    return cleaned


def classroom_create(*, name: str, actor: User | None = None) -> Classroom:
    """A new class, taught by `actor` when they are a teacher (an admin's class has no teacher
    until one is added). Names are unique, archived classes included. Audited."""
    cleaned = _class_name(name)
    with transaction.atomic():
        if Classroom.objects.filter(name__iexact=cleaned).exists():
            raise ValueError(f"A class called {cleaned} exists already (perhaps archived); choose another name.")
        room = Classroom.objects.create(name=cleaned)
        if actor is not None and actor.is_staff and not actor.is_superuser:
            room.teachers.add(actor)
        audit_record(actor=actor, action="class.created", subject=f"class {room.name}")
    return room


def classroom_rename(*, classroom: Classroom, name: str, actor: User | None = None) -> bool:
    """Rename a class (its students, limits and history stay). True if the name changed. Audited."""
    cleaned = _class_name(name)
    if cleaned == classroom.name:
        return False
    if Classroom.objects.filter(name__iexact=cleaned).exclude(id=classroom.id).exists():
        raise ValueError(f"A class called {cleaned} exists already (perhaps archived); choose another name.")
    before = classroom.name
    classroom.name = cleaned
    classroom.save(update_fields=["name"])
    audit_record(actor=actor, action="class.renamed", subject=f"class {classroom.name}", detail=f"was {before}")
    key_cache_invalidate()
    return True


def classroom_archive(*, classroom: Classroom, archived: bool, actor: User | None = None) -> bool:
    """Archive a class (it leaves the dashboard and the class pickers; its usage, requests and
    audit stay, its students keep their accounts and their class) or bring it back. Archiving
    turns self-enrolment off: no new student joins an archived class. True if it changed."""
    if (classroom.archived_at is not None) == archived:
        return False
    classroom.archived_at = timezone.now() if archived else None
    classroom.self_enrolment = classroom.self_enrolment and not archived
    classroom.save(update_fields=["archived_at", "self_enrolment"])
    audit_record(actor=actor, action="class.archived" if archived else "class.restored",
                 subject=f"class {classroom.name}")
    return True


def student_move(*, student: User, classroom: Classroom | None, actor: User | None = None) -> bool:
    """Move a student into `classroom` (None: into no class): from their next request they have
    its limits, pause and share weight. Who may move whom is the caller's check (a teacher moves
    only between classes they teach). True if it changed. Audited."""
    if student.is_staff or student.role != User.Role.STUDENT:
        raise ValueError(f"{student.username} is not a student; staff accounts are managed in the admin.")
    if classroom is not None and classroom.archived_at is not None:
        raise ValueError(f"Class {classroom.name} is archived; bring it back before moving students into it.")
    before = student.classroom
    if (before.id if before else None) == (classroom.id if classroom else None):
        return False
    student.classroom = classroom
    student.save(update_fields=["classroom"])
    audit_record(actor=actor, action="student.moved", subject=student.username,
                 detail=f"from {before.name if before else 'no class'} to {classroom.name if classroom else 'no class'}")
    for prefix in student.api_keys.values_list("prefix", flat=True):
        key_cache_invalidate(prefix=prefix)
    return True
