from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class PoolManager(models.Manager["Pool"]):
    def get_default(self) -> "Pool":
        pool, _ = self.get_or_create(name=settings.OCS["DEFAULT_POOL"])
        return pool


class Pool(models.Model):
    """A group of workers that a key may use (production, dev). A pool that may lend serves
    another pool's traffic when that pool has no healthy worker (the fleet issue)."""

    name = models.SlugField(max_length=50, unique=True)
    description = models.CharField(max_length=200, blank=True)
    may_lend = models.BooleanField(default=False)

    objects = PoolManager()

    def __str__(self) -> str:
        return self.name


class CatalogModel(models.Model):
    """A model as clients name it (`model` in the request) and what the gateway knows of it."""

    public_id = models.CharField(max_length=200, unique=True)
    context_length = models.PositiveIntegerField(default=8192)
    max_output_tokens = models.PositiveIntegerField(
        default=4096, help_text="Output cap applied when a client sends no max_tokens."
    )
    owned_by = models.CharField(max_length=100, default="ocs")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.public_id


class Worker(models.Model):
    """One llama-server endpoint: a whole rig, a subset of its GPUs, or a CPU process."""

    class State(models.TextChoices):
        STARTING = "starting", "Starting"
        HEALTHY = "healthy", "Healthy"
        DEGRADED = "degraded", "Degraded"
        DOWN = "down", "Down"
        DRAINING = "draining", "Draining"
        DISABLED = "disabled", "Disabled"

    name = models.CharField(max_length=100, unique=True)
    base_url = models.URLField(help_text="llama-server root, e.g. http://100.64.0.12:8080 (never shown to students)")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="workers")
    model = models.ForeignKey(CatalogModel, on_delete=models.PROTECT, related_name="workers")
    slots = models.PositiveIntegerField(default=1, help_text="llama-server -np: requests it decodes at once")
    state = models.CharField(max_length=16, choices=State.choices, default=State.STARTING)
    state_changed_at = models.DateTimeField(default=timezone.now)
    last_probe_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class WorkerEvent(models.Model):
    """A worker's state transition, kept for the teacher's dashboard and the lessons."""

    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    from_state = models.CharField(max_length=16, choices=Worker.State.choices)
    to_state = models.CharField(max_length=16, choices=Worker.State.choices)
    reason = models.CharField(max_length=300)

    class Meta:
        ordering = ["-at"]
