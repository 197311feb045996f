from __future__ import annotations

from datetime import date, datetime
from typing import Any

from django.contrib.auth.models import AbstractUser
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone


class LimitFields(models.Model):
    """Caps a teacher sets on a class, a student or a key. Empty = inherit from the level above
    (key -> student -> class -> site defaults); see accounts/limits/resolution.py."""

    requests_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests in any 60-second window. Empty: inherit.")
    tokens_per_day = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Prompt + completion tokens per day (school time zone). Empty: inherit.")
    concurrency = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests running or waiting at the same time. Empty: inherit.")
    tokens_per_week = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Prompt + completion tokens per week, Monday to Sunday (school time zone). "
                                         "Empty: inherit.")
    tokens_per_term = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Prompt + completion tokens per term (the class's term dates). Empty: inherit.")
    allowed_models = models.CharField(
        max_length=500, blank=True, help_text="Public model ids, separated by spaces or commas. Empty: inherit (all).")
    allowed_pools = models.CharField(
        max_length=200, blank=True, help_text="Pool names, separated by spaces or commas. Empty: inherit (all).")

    class Meta:
        abstract = True


class Classroom(LimitFields):
    """A class of students: its limits are the defaults for every student in it. A class can be
    paused (exam mode): once, or by a weekly timetable (ClassPauseWindow); see accounts/pause.py."""

    name = models.CharField(max_length=100, unique=True)
    is_replay = models.BooleanField(
        default=False, help_text="Made by `class_replay` (a load, not people): left out of usage and progress pages.")
    fair_weight = models.FloatField(
        default=1.0, validators=[MinValueValidator(0.1), MaxValueValidator(10.0)], verbose_name="share weight",
        help_text="While the workers are busy, each student of this class receives service in proportion to "
                  "this weight (1 = an equal share; 2 = twice the share of a student in a class with 1).")
    teachers: models.ManyToManyField[User, Any] = models.ManyToManyField("User", blank=True, related_name="taught_classes",
                                      help_text="Teachers who see and act on this class's students (staff "
                                                "superusers see every class).")
    paused = models.BooleanField(default=False, help_text="A one-off pause is set (see its start and end).")
    pause_starts = models.DateTimeField(null=True, blank=True, help_text="Empty: paused from when it was set.")
    pause_until = models.DateTimeField(null=True, blank=True, help_text="Empty: until resumed.")
    paused_by = models.ForeignKey("User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    pause_message = models.CharField(max_length=200, blank=True)
    term_starts = models.DateField(null=True, blank=True, help_text="First day of the term (school time zone).")
    term_ends = models.DateField(null=True, blank=True, help_text="Last day of the term.")
    pause_lifted_until = models.DateTimeField(
        null=True, blank=True, help_text="A resume during a timetable window lifts windows ending by then.")
    archived_at = models.DateTimeField(
        null=True, blank=True, help_text="Archived: left off the teacher's dashboard and class pickers; its history "
                                         "(usage, requests, audit) is kept and its students keep their accounts.")
    self_enrolment = models.BooleanField(
        default=False, help_text="A school account (OpenID Connect sign-in) that matches no student joins this "
                                 "class as a new student. One class at a time; off: such accounts are refused.")
    chat_enabled = models.BooleanField(
        default=True, verbose_name="chat page on",
        help_text="The students may use the chat page (/chat/). Off: it says so and every open chat page's "
                  "key is revoked at once; their own keys and editors are unaffected.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def term(self) -> tuple[date, date] | None:
        return (self.term_starts, self.term_ends) if self.term_starts and self.term_ends else None


class ClassPauseWindow(models.Model):
    """A weekly pause of a class, in the school's time zone. An end not after the start ends
    the next day."""

    classroom = models.ForeignKey(Classroom, on_delete=models.CASCADE, related_name="pause_windows")
    weekday = models.PositiveSmallIntegerField(choices=[(n, day) for n, day in enumerate(
        ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"))])
    starts = models.TimeField()
    ends = models.TimeField()
    message = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["weekday", "starts"]


class User(AbstractUser, LimitFields):
    class Role(models.TextChoices):
        STUDENT = "student", "Student"
        TEACHER = "teacher", "Teacher"

    role = models.CharField(max_length=16, choices=Role.choices, default=Role.STUDENT)
    classroom = models.ForeignKey(Classroom, on_delete=models.SET_NULL, null=True, blank=True, related_name="students")
    access_expires_at = models.DateTimeField(
        null=True, blank=True, help_text="After this, every key of this person stops working. Empty: no end.")
    is_replay = models.BooleanField(
        default=False, help_text="A student made by `class_replay` (research/replay_services.py), not a person: "
                                 "left out of the teacher's usage and of Ground 0 progress.")

    @property
    def is_teacher(self) -> bool:
        """The one notion of "teacher" for pages, APIs, the fleet websocket and commands: an
        active account with the staff flag (a teacher, or an admin). The role is a label for
        people; the flag is access, so removing it takes teacher access away everywhere."""
        return self.is_active and self.is_staff


class ApiKey(LimitFields):
    """A student's personal key. The raw key is shown once; only its sha256 is stored."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_keys")
    pool = models.ForeignKey("fleet.Pool", on_delete=models.PROTECT, related_name="api_keys")
    name = models.CharField(max_length=100, default="default")
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    chat_session = models.CharField(
        max_length=64, blank=True, db_index=True,
        help_text="Set: the chat page's key for one sign-in session (a fingerprint of it), held in an HttpOnly "
                  "cookie, never shown; revoked at sign-out. Empty: a key the student made.")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"ocs-{self.prefix}-… ({self.name})"

    @property
    def display(self) -> str:
        return f"ocs-{self.prefix}-…"

    def usable_at(self, now: datetime) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > now


class AuditEvent(models.Model):
    """A teacher's (or operator's) action, kept for accountability: who did what to whom, when."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="audit_events",
                              help_text="Empty: done from the command line or by the system.")
    action = models.CharField(max_length=50, db_index=True)
    subject = models.CharField(max_length=200)
    detail = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.action} {self.subject}"


class BudgetGrant(models.Model):
    """A teacher's one-off extra allowance for a student's current day, week or term
    (accounts/limits/budgets.py). The live counter is lowered by it; this row lets the pages say
    "10,530 of 11,000 used (5,000 extra)" rather than show the allowance as usage going down."""

    student = models.ForeignKey(User, on_delete=models.CASCADE, related_name="budget_grants")
    period = models.CharField(max_length=8, help_text="day, week or term")
    counter = models.CharField(max_length=40, help_text="The live counter's name for that period (e.g. the day).")
    tokens = models.PositiveBigIntegerField()
    at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        indexes = [models.Index(fields=["student", "counter"])]
