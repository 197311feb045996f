"""Experiments, benchmark runs and what they measured; the pools' SLOs and promotion checks."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from fleet.models import Pool, Worker
from research.gate import BaselineShape
from research.planner.validation.records import noise_text


class Experiment(models.Model):
    """A research question with the runs that answer it and the decision taken."""

    title = models.CharField(max_length=200)
    question = models.TextField(help_text="The research question, e.g. 'Do 4 slots double capacity?'")
    hypothesis = models.TextField(blank=True)
    why_it_matters = models.TextField(blank=True, help_text="Why it matters to students, in plain words.")
    decision = models.TextField(blank=True, help_text="What was decided from the runs, and why.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.title


class Baseline(models.Model):
    """One `rig_baseline` on a worker (research/rig_baseline.py): the whole sequence of
    docs/research/rig-baseline.md. Its runs point here, each with its `baseline_kind`; `steps`
    lists every step in order with its outcome, and holds the engine-only step's llama-bench rows
    (done by the rig agent: no HTTP, so no stored requests)."""

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        ABORTED = "aborted", "Aborted"

    worker = models.ForeignKey(Worker, on_delete=models.SET_NULL, null=True, blank=True, related_name="baselines")
    worker_name = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    rehearsal = models.BooleanField(default=False, help_text="Measured on a rehearsal rig: never rig evidence.")
    options = models.JSONField(default=dict, blank=True, help_text="The sizes it was run with.")
    steps = models.JSONField(default=list, blank=True, help_text="[{kind, status, run_ids, result, error}] in order.")
    report_path = models.CharField(max_length=300, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now, db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"baseline {self.pk} of {self.worker_name} ({self.status})"


class BenchmarkRun(models.Model):
    """One load level against one target. A sweep is several runs sharing `group`.

    `summary` holds the level's JSON as `bench --json` writes it (milliseconds, tokens/s);
    `launch` the worker's full launch configuration (GPUs, split mode, slots, context, YaRN,
    speculative options) as known when the run started.
    """

    class Target(models.TextChoices):
        WORKER = "worker", "Worker (llama-server directly)"
        GATEWAY = "gateway", "Gateway (with a key)"

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    class Kind(models.TextChoices):
        LEVEL = "level", "Load level"
        CLASS_REPLAY = "class-replay", "Class replay"
        PROBE = "probe", "Probe"

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.LEVEL, db_index=True,
                            help_text="class-replay: `summary` is the replay's JSON (research/class_metrics.py); "
                                      "probe: a probe command's JSON (`scenario` names the probe: share_probe, "
                                      "bench_live_client, judge_backends).")
    experiment = models.ForeignKey(Experiment, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs")

    class BaselineKind(models.TextChoices):
        ENGINE = "engine", "Engine only (llama-bench)"
        COLD = "cold", "Cold start"
        IDLE = "idle", "Cold after idle"
        WARM = "warm", "Warm"
        CONCURRENCY = "concurrency", "Concurrency sweep"
        PROMPT_SIZE = "prompt-size", "Prompt-size sweep"
        CONTEXT = "context", "Context sweep"
        SPECULATIVE = "speculative", "Speculative on/off"
        ALLOCATION = "allocation", "GPU allocation"

    baseline = models.ForeignKey(Baseline, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs")
    baseline_kind = models.CharField(max_length=16, choices=BaselineKind.choices, blank=True,
                                     help_text="Which step of its baseline this run is.")
    group = models.CharField(max_length=64, db_index=True, help_text="Runs of one sweep share it.")
    scenario = models.CharField(max_length=64, blank=True)
    label = models.CharField(max_length=200, blank=True, help_text="What varies in this run, e.g. 'np=4'.")
    target = models.CharField(max_length=16, choices=Target.choices)
    base_url = models.CharField(max_length=255)
    worker = models.ForeignKey(Worker, on_delete=models.SET_NULL, null=True, blank=True, related_name="benchmark_runs")
    model = models.CharField(max_length=200)
    launch = models.JSONField(default=dict, blank=True)
    llama_build = models.CharField(max_length=200, blank=True)
    prompt_tokens = models.PositiveIntegerField()
    output_tokens = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField(null=True, blank=True, help_text="Closed loop: requests in flight.")
    request_rate = models.FloatField(null=True, blank=True, help_text="Open loop: Poisson arrivals per second.")
    requests = models.PositiveIntegerField()
    warmup = models.PositiveIntegerField(default=0, help_text="Requests sent first and left out of the numbers.")
    slo_ttft_ms = models.FloatField(null=True, blank=True)
    slo_tpot_ms = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now, db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"run {self.pk} {self.model} {self.load_label}"

    @property
    def load_label(self) -> str:
        if self.request_rate is not None:
            return f"rate {self.request_rate:g}/s"
        return f"concurrency {self.concurrency}"

    def metric(self, name: str, stat: str = "p90") -> float | None:
        """A number from the summary: metric('ttft_ms', 'p90'), metric('output_throughput', '')."""
        value: Any = self.summary.get(name)
        if isinstance(value, dict):
            value = value.get(stat)
        return float(value) if isinstance(value, (int, float)) else None


class RequestSample(models.Model):
    """One request of a run as the client measured it, with llama-server's own timings.
    Times in milliseconds; `sent_ms` from the run's first request."""

    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="samples")
    index = models.PositiveIntegerField()
    warmup = models.BooleanField(default=False)
    ok = models.BooleanField(default=True)
    error = models.CharField(max_length=300, blank=True)
    sent_ms = models.FloatField()
    ttft_ms = models.FloatField(null=True, blank=True)
    e2e_ms = models.FloatField()
    tpot_ms = models.FloatField(null=True, blank=True)
    inter_chunk_gaps_ms = models.JSONField(default=list, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    prompt_per_second = models.FloatField(null=True, blank=True)
    predicted_per_second = models.FloatField(null=True, blank=True)
    draft_n = models.PositiveIntegerField(null=True, blank=True)
    draft_n_accepted = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="unique_sample_index_per_run")]


class GpuSample(models.Model):
    """A GPU's telemetry during a run: each reading the rig agent took while the run went on, once,
    `at` when the agent read it (on the control plane's clock, skew corrected)."""

    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="gpu_samples")
    at = models.DateTimeField(db_index=True)
    rig = models.CharField(max_length=100)
    gpu_index = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=100, blank=True)
    utilization_pct = models.PositiveSmallIntegerField(null=True, blank=True)
    memory_used_mib = models.PositiveIntegerField(default=0)
    memory_total_mib = models.PositiveIntegerField(default=0)
    power_w = models.FloatField(null=True, blank=True)
    temperature_c = models.PositiveSmallIntegerField(null=True, blank=True)
    sm_clock_mhz = models.PositiveIntegerField(null=True, blank=True)
    pcie_gen = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_width = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_max_gen = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_max_width = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["run", "rig", "gpu_index", "at"]


class PoolSlo(models.Model):
    """A pool's service-level objectives and the baseline workload they are stated for: a worker
    joins the pool only if its latest run of that shape meets them."""

    pool = models.OneToOneField(Pool, on_delete=models.CASCADE, related_name="research_slo")
    ttft_p90_ms = models.FloatField(help_text="Time to first token, 90th percentile, milliseconds.")
    tpot_p90_ms = models.FloatField(help_text="Time per output token, 90th percentile, milliseconds.")
    baseline_prompt_tokens = models.PositiveIntegerField(default=256, help_text="Baseline shape: prompt tokens.")
    baseline_output_tokens = models.PositiveIntegerField(default=64, help_text="Baseline shape: output tokens.")
    baseline_concurrency = models.PositiveIntegerField(default=1, help_text="Baseline shape: requests in flight.")
    baseline_min_requests = models.PositiveIntegerField(default=8, help_text="Baseline shape: fewest measured requests.")

    def __str__(self) -> str:
        return (f"{self.pool.name}: TTFT p90 <= {self.ttft_p90_ms:g} ms, TPOT p90 <= {self.tpot_p90_ms:g} ms "
                f"on {self.shape().describe()}")

    def shape(self) -> BaselineShape:
        return BaselineShape(prompt_tokens=self.baseline_prompt_tokens, output_tokens=self.baseline_output_tokens,
                             concurrency=self.baseline_concurrency, min_requests=self.baseline_min_requests)


class PromotionCheck(models.Model):
    """One promotion-gate decision: the run it judged, the SLOs, the numbers and why."""

    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="promotion_checks")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(BenchmarkRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    at = models.DateTimeField(default=timezone.now, db_index=True)
    passed = models.BooleanField()
    moved = models.BooleanField(default=False)
    ttft_p90_ms = models.FloatField(null=True, blank=True)
    tpot_p90_ms = models.FloatField(null=True, blank=True)
    slo_ttft_p90_ms = models.FloatField(null=True, blank=True)
    slo_tpot_p90_ms = models.FloatField(null=True, blank=True)
    reasons = models.JSONField(default=list, blank=True, help_text="Why it was refused; [] when it passed.")

    class Meta:
        ordering = ["-at"]


class WebRun(models.Model):
    """A run a staff member started from /research/start/: what was asked, its progress while the
    runs cluster works on it, and the stored run it became."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    class What(models.TextChoices):
        LEVEL = "level", "One load level"
        BASELINE = "baseline", "The rig baseline (rig_baseline)"

    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                     related_name="+")
    what = models.CharField(max_length=16, choices=What.choices, default=What.LEVEL)
    idle_s = models.JSONField(default=list, blank=True, help_text="A baseline's idle gaps, seconds.")
    max_context = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="A baseline's largest context-sweep prompt (None: the slot's).")
    baseline = models.ForeignKey(Baseline, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    worker = models.ForeignKey(Worker, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                               help_text="The worker measured directly, or through the gateway with `via_gateway`.")
    via_gateway = models.BooleanField(default=False)
    gateway_url = models.CharField(max_length=255, blank=True, help_text="The gateway's URL, when via_gateway.")
    model = models.CharField(max_length=200, blank=True, help_text="Public model id (through the gateway).")
    prompt_tokens = models.PositiveIntegerField()
    output_tokens = models.PositiveIntegerField()
    requests = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField()
    label = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    done_requests = models.PositiveIntegerField(default=0)
    total_requests = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    run = models.ForeignKey(BenchmarkRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def progress(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "done": self.done_requests, "total": self.total_requests,
                "run_id": self.run_id, "baseline_id": self.baseline_id, "error": self.error}


class Calibration(models.Model):
    """A worker's cost model for the capacity planner (research/planner/cost.py), fitted to stored
    runs (`source` runs: `runs` their ids, `residuals` how well it fits) or built from stated
    assumptions (`source` assumptions: each with its source and what measurement replaces it)."""

    class Source(models.TextChoices):
        RUNS = "runs", "Fitted to benchmark runs"
        ASSUMPTIONS = "assumptions", "Stated assumptions"

    label = models.CharField(max_length=200, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    worker = models.ForeignKey(Worker, on_delete=models.SET_NULL, null=True, blank=True, related_name="calibrations")
    runs = models.JSONField(default=list, blank=True, help_text="Ids of the benchmark runs it was fitted to.")
    cost = models.JSONField(help_text="The cost model: research.planner.cost.CostModel as a dict (seconds).")
    residuals = models.JSONField(default=dict, blank=True)
    assumptions = models.JSONField(default=list, blank=True,
                                   help_text="[{name, value, unit, source, replaced_by}]; [] for a fit.")
    memory = models.JSONField(default=dict, blank=True,
                              help_text="Facts for the planner's memory check (cards, GB, KV bytes per token).")
    notes = models.JSONField(default=list, blank=True)
    slots = models.PositiveIntegerField(null=True, blank=True, help_text="The measured worker's slots.")
    context = models.PositiveIntegerField(null=True, blank=True, help_text="The measured worker's context per slot.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"calibration {self.pk} ({self.source}) {self.label}".strip()


class PlannerCheck(models.Model):
    """One predict-then-measure check of the capacity planner (research/planner/compare.py): the
    planner's prediction for one or more configurations against real class replays of each, judged
    figure by figure (agent and chat TTFT p50 and p95) within ±`bound` or the replays' spread.
    `planner_check --name` writes one; the twenty passes of docs/research/planner-validation.md
    were imported as rows (migration 0015, research/data/planner_checks.json)."""

    class Source(models.TextChoices):
        RUN = "run", "Written by planner_check"
        FILES = "files", "Imported from the pass's raw files"
        SUMMARY = "summary", "Imported from the pass's printed table (figures to 10 ms)"

    name = models.SlugField(max_length=64, unique=True, help_text="pass-20, pass-19-quiet, ...")
    title = models.CharField(max_length=200, blank=True)
    measured_on = models.DateField(null=True, blank=True, db_index=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.RUN)
    bound = models.FloatField(default=0.25, help_text="Relative bound of a figure (0.25: ±25 %).")
    configurations = models.JSONField(
        default=list, blank=True,
        help_text="[{label, workers, slots, context, students, mix, seed, scale, duration_s, policy, notes, turns}]")
    noise = models.JSONField(default=dict, blank=True,
                             help_text="Per configuration: {jitter, load_factor, speed: [...], drift: [...]}.")
    ranking = models.JSONField(default=dict, blank=True, help_text="compare.Ranking.as_dict(); {} for one configuration.")
    figures_within = models.PositiveSmallIntegerField(default=0, help_text="Figures within the bound or the spread.")
    figures_total = models.PositiveSmallIntegerField(default=0)
    reproduce = models.TextField(blank=True, help_text="The command that measures it again.")
    finding = models.TextField(blank=True, help_text="What it showed, in a sentence or two.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-measured_on", "-name"]

    def __str__(self) -> str:
        return f"{self.name}: {self.figures_within} of {self.figures_total}"

    @property
    def all_within(self) -> bool:
        return self.figures_total > 0 and self.figures_within == self.figures_total

    @property
    def noise_summary(self) -> str:
        """The machine's noise over its configurations in a few words (records.noise_text)."""
        return noise_text(self.noise)


class PlannerCheckFigure(models.Model):
    """One figure of one configuration in a check: predicted against each replay, the ratio to
    their mean, their spread (the noise) and the verdict."""

    class Verdict(models.TextChoices):
        WITHIN_BOUND = "within_bound", "within the bound"
        WITHIN_SPREAD = "within_spread", "within the replays' spread"
        OUTSIDE = "outside", "outside"
        NO_DATA = "no_data", "no data"

    planner_check = models.ForeignKey(PlannerCheck, on_delete=models.CASCADE, related_name="figures")
    position = models.PositiveSmallIntegerField()
    configuration = models.CharField(max_length=32)
    figure = models.CharField(max_length=32, help_text="agent TTFT p50, agent TTFT p95, chat TTFT p50, chat TTFT p95")
    predicted_ms = models.FloatField(null=True, blank=True)
    measured_ms = models.JSONField(default=list, blank=True, help_text="Each replay's figure, ms.")
    mean_ms = models.FloatField(null=True, blank=True)
    ratio = models.FloatField(null=True, blank=True, help_text="Predicted ÷ the replays' mean.")
    spread = models.FloatField(null=True, blank=True, help_text="(Largest − smallest replay) ÷ their mean.")
    verdict = models.CharField(max_length=16, choices=Verdict.choices)

    class Meta:
        ordering = ["planner_check", "position"]
        constraints = [models.UniqueConstraint(fields=["planner_check", "configuration", "figure"],
                                               name="unique_figure_per_check_configuration")]

    @property
    def holds(self) -> bool:
        return self.verdict in {self.Verdict.WITHIN_BOUND, self.Verdict.WITHIN_SPREAD}


class RigPlan(models.Model):
    """One run of `plan_rigs`: the configurations the rigs could run, ranked by students served
    (research/planner/rigs.py's `search` result, as its --json writes it). The "Plan the rigs" page
    shows the newest; the search is too slow for a page request."""

    label = models.CharField(max_length=200, blank=True)
    command = models.TextField(help_text="The plan_rigs command line that made it (to refresh it).")
    calibration = models.CharField(max_length=32, default="assumptions",
                                   help_text="What the speeds rest on: assumptions, or measured calibrations.")
    result = models.JSONField(help_text="rigs.search's result: rows, rejected, curves, targets, assumptions.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"rig plan {self.pk} {self.label}".strip()
