from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractUser
from django.db import models
from django.utils import timezone


class User(AbstractUser):
    class Role(models.TextChoices):
        STUDENT = "student", "Student"
        TEACHER = "teacher", "Teacher"

    role = models.CharField(max_length=16, choices=Role.choices, default=Role.STUDENT)

    @property
    def is_teacher(self) -> bool:
        return self.role == self.Role.TEACHER


class ApiKey(models.Model):
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
