from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class StepDone(models.Model):
    """A hands-on step the site verified for a person, with the evidence it found.
    Kept after the evidence is pruned (request rows go after 180 days): done stays done."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lesson_steps")
    step = models.SlugField(max_length=60, help_text="Step slug from lessons/content/lessons.toml.")
    done_at = models.DateTimeField(default=timezone.now)
    request_log_id = models.BigIntegerField(null=True, blank=True,
                                            help_text="The RequestLog row that proved it, if one did.")
    evidence = models.CharField(max_length=300, help_text="What the site saw, in words.")
    reported_ttft_ms = models.FloatField(null=True, blank=True, help_text="For the TTFT step: the student's number.")

    class Meta:
        ordering = ["-done_at"]
        constraints = [models.UniqueConstraint(fields=["user", "step"], name="lesson_step_once")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.step}"


class Answer(models.Model):
    """A person's latest answer to a check question (re-answering replaces it)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lesson_answers")
    question = models.SlugField(max_length=60, help_text="Question id from lessons.toml.")
    choice = models.PositiveSmallIntegerField(help_text="0-based index into the question's choices.")
    correct = models.BooleanField(help_text="Right when answered, by the catalogue of that day (pages and progress "
                                  "judge by the current catalogue).")
    answered_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=1)
    first_try_correct = models.BooleanField(null=True, blank=True,
                                            help_text="Whether the first attempt was right (None: answered before "
                                                      "attempts were recorded).")

    class Meta:
        ordering = ["question"]
        constraints = [models.UniqueConstraint(fields=["user", "question"], name="lesson_answer_once")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.question}={self.choice}"


class AnswerAttempt(models.Model):
    """Every answer a person submitted, in order; Answer holds only the latest."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lesson_attempts")
    question = models.SlugField(max_length=60)
    choice = models.PositiveSmallIntegerField(help_text="0-based index into the catalogue's choices.")
    correct = models.BooleanField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["user", "question"])]


class FleetSighting(models.Model):
    """The fleet view, polled by a signed-in person, saw one of their requests running or
    waiting (their concurrency leases in live state). Evidence for "watch your request"."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="fleet_sightings")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    in_flight = models.PositiveSmallIntegerField(help_text="Their requests running or waiting at that moment.")

    class Meta:
        ordering = ["-at"]


class ManualCheck(models.Model):
    """A Ground 0 deliverable that the system cannot verify, ticked by a teacher (staff)."""

    deliverable = models.SlugField(max_length=60, unique=True)
    ticked_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                  related_name="ground0_ticks")
    ticked_at = models.DateTimeField(default=timezone.now)
    note = models.CharField(max_length=300, blank=True)

    def __str__(self) -> str:
        return self.deliverable


class PathVerification(models.Model):
    """One run of `manage.py verify_path` (ocsweb/management/commands/verify_path.py): the public
    URL it checked, whether every hop passed, and whether the TLS hop did. Evidence for the
    burndown's "deployment path" row."""

    base_url = models.CharField(max_length=255)
    passed = models.BooleanField()
    tls_ok = models.BooleanField(help_text="The public TLS hop passed (a trusted, unexpired certificate).")
    verdict = models.CharField(max_length=500, blank=True)
    checked_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-checked_at"]


class DeliverableAchieved(models.Model):
    """The first time a burndown row was seen done, with what proved it. Kept when the evidence
    later lapses (a 24-hour window passes, a rig goes quiet): achieved stays achieved, while the
    page also shows whether it is still true now."""

    deliverable = models.SlugField(max_length=60, unique=True)
    achieved_at = models.DateTimeField(default=timezone.now)
    evidence = models.CharField(max_length=300)
    link = models.CharField(max_length=200, blank=True)


class BurndownSnapshot(models.Model):
    """Each burndown row's live state on one day (the last look of that day wins): the history
    the chart on /ground0/ draws."""

    day = models.DateField(db_index=True)
    deliverable = models.SlugField(max_length=60)
    state = models.CharField(max_length=16, help_text="done, rehearsed, partial or open.")
    taken_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["day", "deliverable"]
        constraints = [models.UniqueConstraint(fields=["day", "deliverable"], name="burndown_snapshot_once_a_day")]


class Ownership(models.Model):
    """Who owns a burndown row or a research question (the team split), set by a teacher on /ground0/."""

    subject = models.SlugField(max_length=60, unique=True, help_text="A burndown row's slug, or a question: q1, q2, …")
    owner = models.CharField(max_length=100, help_text="A group or a person, as the team names them.")
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    set_at = models.DateTimeField(default=timezone.now)


class WorkerPrediction(models.Model):
    """A student's prediction of the worker their next request will get (lesson 3's step): the
    site then compares it with the worker the scheduler chose for their next served request."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="worker_predictions")
    worker_name = models.CharField(max_length=100)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at"]


class Sprint(models.Model):
    """The team's sprint dates, set by a teacher on /ground0/: the burndown's history chart spans
    the latest sprint, and the page says how much is left against a straight line to zero."""

    name = models.CharField(max_length=80)
    starts_on = models.DateField()
    ends_on = models.DateField()
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    set_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-starts_on", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.starts_on}–{self.ends_on})"


class RooflineLab(models.Model):
    """Lesson 7's roofline lab: a student's predicted decode ceiling (from a bandwidth and the
    bytes of weights read per token), the short measurement they started from the page (a
    research web run through the gateway, as their own request), and their explanation of the gap."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="roofline_labs")
    bandwidth_gbs = models.FloatField()
    weights_gb = models.FloatField()
    predicted_tok_s = models.FloatField()
    web_run = models.ForeignKey("research.WebRun", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    explanation = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at"]


class PathLab(models.Model):
    """Lesson 2's path lab: one run of the `verify_path` checks that the site made for a student
    against this deployment (with a key issued for the run, revoked after it), what each check
    found, and the student's answer: which checks were private, and why a worker must refuse a laptop."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="path_labs")
    base_url = models.CharField(max_length=255, help_text="This site's address as the student reached it.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    results = models.JSONField(default=list, blank=True,
                               help_text="verify_path's checks: hop, target, outcome, latency_ms, detail (redacted).")
    verdict = models.CharField(max_length=500, blank=True)
    error = models.CharField(max_length=500, blank=True)
    private_picked = models.JSONField(default=list, blank=True)
    explanation = models.TextField(blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-at"]
