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
    description = models.CharField(
        max_length=120, blank=True,
        help_text="One line the chat page's model picker shows students (what the model is good for).")
    context_length = models.PositiveIntegerField(default=8192)
    max_output_tokens = models.PositiveIntegerField(
        default=4096, help_text="Output cap applied when a client sends no max_tokens."
    )
    owned_by = models.CharField(max_length=100, default="ocs")
    architecture = models.CharField(max_length=50, default="llama", help_text="GGUF general.architecture.")
    supports_tools = models.BooleanField(
        default=True, help_text="Advertise tool calling (Copilot's agent mode needs it; forced calls always work)."
    )
    reasoning = models.BooleanField(
        default=False, help_text="The model thinks aloud (reasoning_content); also sent as Copilot's reasoning_text."
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.public_id


class Rig(models.Model):
    """A physical machine (or Proxmox VM) on the NetBird network running the rig agent."""

    name = models.SlugField(max_length=100, unique=True)
    address = models.CharField(max_length=255, help_text="Private (NetBird) address the workers listen on.")
    token_prefix = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=50, blank=True)
    gpu_status = models.CharField(max_length=200, blank=True, help_text="'no GPUs' or the NVML error, if any.")
    rehearsal = models.BooleanField(
        default=False,
        help_text="Its agent runs with NVML faked (telemetry = \"rehearsal\"): CPU workers and made-up GPU "
                  "readings, never rig evidence. Set by its heartbeats.")
    measuring_until = models.DateTimeField(
        null=True, blank=True,
        help_text="A run measures this rig's workers until then (research's telemetry recorder keeps it a few "
                  "seconds ahead): its agent is asked for a heartbeat, with GPU readings, every second.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Gpu(models.Model):
    """One GPU of a rig, with its latest telemetry (pynvml) from the agent's heartbeat."""

    rig = models.ForeignKey(Rig, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=100, blank=True)
    name = models.CharField(max_length=100, blank=True)
    memory_total_mib = models.PositiveIntegerField(default=0)
    memory_used_mib = models.PositiveIntegerField(default=0)
    utilization_pct = models.PositiveSmallIntegerField(null=True, blank=True)
    temperature_c = models.PositiveSmallIntegerField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    sm_clock_mhz = models.PositiveIntegerField(null=True, blank=True)
    mem_clock_mhz = models.PositiveIntegerField(null=True, blank=True)
    pcie_gen = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_width = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_max_gen = models.PositiveSmallIntegerField(null=True, blank=True, help_text="The link's maximum generation.")
    pcie_max_width = models.PositiveSmallIntegerField(null=True, blank=True, help_text="The link's maximum width.")
    sampled_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the agent read NVML, on the control plane's clock (corrected for the rig's clock skew).")

    class Meta:
        ordering = ["rig", "index"]
        constraints = [models.UniqueConstraint(fields=["rig", "index"], name="unique_gpu_index_per_rig")]

    def __str__(self) -> str:
        return f"{self.rig.name}/gpu{self.index}"


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
    context_per_slot = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Tokens one request can use (llama-server's -c / -np, YaRN included); empty: unknown.")
    lane_tokens = models.PositiveIntegerField(
        default=0,
        help_text="A lane worker, kept for short prompts: it takes only prompts of at most this many tokens, "
                  "and a short prompt goes to it first (docs/classroom.md, a card for questions). 0: any prompt.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.STARTING)
    state_changed_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    # Where it runs and how it was launched (reported by the rig agent; empty for workers
    # registered by hand). The launch configuration is what research runs compare.
    rig = models.ForeignKey(Rig, on_delete=models.SET_NULL, null=True, blank=True, related_name="workers")
    gpu_indices = models.JSONField(default=list, blank=True, help_text="CUDA_VISIBLE_DEVICES; [] = CPU.")
    launch = models.JSONField(default=dict, blank=True, help_text="model file, context, split mode, YaRN, draft…")
    process_state = models.CharField(max_length=32, blank=True, help_text="As the agent last saw the process.")
    process_pid = models.PositiveIntegerField(null=True, blank=True, help_text="llama-server's pid as last reported.")
    process_started_at = models.DateTimeField(
        null=True, blank=True, help_text="When the current llama-server process started; its cold start runs from here."
    )
    slot_files_pruned = models.PositiveIntegerField(
        default=0, help_text="Slot files the rig agent deleted to keep within its slot_files_gb, since the agent "
                             "started: each costs a student a recomputed prompt. Many: raise the budget.")
    # The key llama-server was launched with (--api-key-file), sent by the gateway, the monitor,
    # verify_path and bench. A machine credential, kept whole because it must be sent; never
    # shown: not editable (no admin form shows it), in no list, page, websocket or log line
    # (core/redact.py knows its ocswk- form). New on every (re-)registration: fleet/worker_keys.py.
    api_key = models.CharField(max_length=100, blank=True, editable=False)

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
    cold_start_s = models.FloatField(
        null=True, blank=True, help_text="On starting -> healthy: seconds from process start to the first healthy probe."
    )

    class Meta:
        ordering = ["-at"]


class PoolEvent(models.Model):
    """Something that happened to a pool as a whole, e.g. dev workers lent to production."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    kind = models.CharField(max_length=32)
    detail = models.CharField(max_length=300)

    class Meta:
        ordering = ["-at"]


class RigJob(models.Model):
    """Work the control plane asks of a rig's agent (fleet/rig_jobs.py): delivered in the answer to
    the agent's next heartbeat (the agent opens no port), done on the rig, reported back."""

    class Kind(models.TextChoices):
        LLAMA_BENCH = "llama-bench", "llama-bench on the worker's GPUs (the worker stopped meanwhile)"
        RESTART = "restart", "Restart the worker (cold: --no-warmup if asked)"
        STOP = "stop", "Stop the worker (it stays stopped)"
        START = "start", "Start a stopped worker"

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        SENT = "sent", "Sent to the agent"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    rig = models.ForeignKey(Rig, on_delete=models.CASCADE, related_name="jobs")
    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="jobs")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    params = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED, db_index=True)
    cancel_requested = models.BooleanField(default=False)
    result = models.JSONField(default=dict, blank=True)
    error = models.CharField(max_length=2000, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} on {self.worker.name} ({self.state})"

    @property
    def finished(self) -> bool:
        return self.state in {self.State.DONE, self.State.FAILED, self.State.CANCELLED}
