"""State changes the portal and the teacher's pages make (beyond accounts and fleet services)."""
from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.contrib.auth.tokens import default_token_generator
from django.db import transaction
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts.audit import audit_record
from accounts.models import Classroom, User
from accounts.selectors import email_holders, sees_everyone, students_visible_to
from portal.csv_import import StudentRow

SET_PASSWORD_PATH = "/accounts/set-password/{uid}/{token}/"


@dataclass(frozen=True)
class ImportedStudent:
    username: str
    created: bool
    set_password_path: str  # relative; the caller prefixes the site's address
    initial_password: str | None  # only when asked for printed passwords
    moved_from: str = ""  # the class an existing student left for this import's class ("no class" if none)


def set_password_path(*, user: User) -> str:
    """A one-time link for `user` to choose a password: it stops working once the password changes
    (or after PASSWORD_RESET_TIMEOUT), because the token covers the password hash and last login."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return SET_PASSWORD_PATH.format(uid=uid, token=default_token_generator.make_token(user))


def students_import(*, rows: list[StudentRow], classroom_name: str | None, actor: User | None,
                    initial_passwords: bool = False) -> list[ImportedStudent]:
    """Create (or update) students from a class list, all or none. New students get an unusable
    password and a set-password link (or, with initial_passwords, a random printed password).
    Existing students keep their password; staff accounts are never changed. Audited."""
    classroom = None
    result: list[ImportedStudent] = []
    restricted = actor is not None and not sees_everyone(actor)  # a teacher, not an admin
    with transaction.atomic():
        if classroom_name:
            classroom, created_class = Classroom.objects.get_or_create(name=classroom_name.strip()[:100])
            if restricted and actor is not None:
                if not created_class and not classroom.teachers.filter(id=actor.id).exists():
                    raise ValueError(f"class {classroom.name} belongs to other teachers; choose another name")
                classroom.teachers.add(actor)
        elif restricted:
            raise ValueError("Choose a class: the students of a teacher's import go into one of their classes.")
        existing = {u.username: u for u in User.objects.filter(username__in=[r.username for r in rows])}
        holders = email_holders([r.email for r in rows])
        mine = set(students_visible_to(actor).filter(id__in=[u.id for u in existing.values()])
                   .values_list("id", flat=True)) if restricted and actor is not None else set()
        for row in rows:
            user = existing.get(row.username)
            if user is not None and (user.is_staff or user.role != User.Role.STUDENT):
                raise ValueError(f"line {row.line}: {row.username} is a teacher or staff account; not changed")
            if user is not None and restricted and user.id not in mine:
                raise ValueError(f"line {row.line}: {row.username} is already a student of another teacher's "
                                 "class; ask an admin to move them")
            holder = holders.get(row.email.lower()) if row.email else None
            if holder is not None and holder != row.username:
                # Not who holds it: a teacher learns only that the address is taken.
                raise ValueError(f"line {row.line}: {row.email} belongs to another account; an email "
                                 "address belongs to one account (ask an admin if it is wrong)")
            password = None
            created = user is None
            if user is None:
                user = User(username=row.username, role=User.Role.STUDENT)
                if initial_passwords:
                    password = secrets.token_urlsafe(9)
                    user.set_password(password)
                else:
                    user.set_unusable_password()
            user.email = row.email or user.email
            user.first_name = row.first_name or user.first_name
            user.last_name = row.last_name or user.last_name
            moved_from = ""
            if classroom is not None:
                if not created and user.classroom_id != classroom.id:
                    moved_from = user.classroom.name if user.classroom else "no class"
                user.classroom = classroom
            user.save()
            result.append(ImportedStudent(username=user.username, created=created,
                                          set_password_path=set_password_path(user=user),
                                          initial_password=password, moved_from=moved_from))
        created_count = sum(r.created for r in result)
        audit_record(actor=actor, action="students.imported",
                     subject=f"class {classroom.name}" if classroom else "no class",
                     detail=f"{created_count} new, {len(result) - created_count} updated: "
                            + ", ".join(r.username + (f" (from {r.moved_from})" if r.moved_from else "")
                                        for r in result))
    return result
