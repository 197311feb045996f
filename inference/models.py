from __future__ import annotations

from django.db import models


class RequestLog(models.Model):
    """One API request: who, what, where it ran, how it went. Written in batches off the
    request path (inference/request_log.py); pruned after OCS_REQUEST_LOG_RETENTION_DAYS."""

    at = models.DateTimeField(db_index=True, help_text="When the request arrived.")
    request_id = models.CharField(max_length=32, blank=True, db_index=True,
                                  help_text="Sent to the client as X-Request-Id.")
    # No database constraints on these references: a row is history, written a moment after the
    # request, and must not be refused because the key, person or worker was deleted meanwhile.
    user = models.ForeignKey("accounts.User", on_delete=models.SET_NULL, null=True, blank=True, db_constraint=False,
                             related_name="requests", help_text="Empty: the key was missing or unknown.")
    key = models.ForeignKey("accounts.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, db_constraint=False,
                            related_name="requests")
    pool = models.CharField(max_length=50, blank=True)
    model = models.CharField(max_length=100, blank=True)
    worker = models.ForeignKey("fleet.Worker", on_delete=models.SET_NULL, null=True, blank=True, db_constraint=False,
                               related_name="requests")
    worker_name = models.CharField(max_length=100, blank=True)
    client = models.CharField(max_length=20, help_text="openai, responses, anthropic or ollama (the route's dialect).")
    user_agent = models.CharField(max_length=200, blank=True)
    route_reason = models.CharField(max_length=200, blank=True,
                                    help_text="Why the scheduler chose the worker (fleet/scheduler.py), e.g. '1/4 slots busy'.")
    tool = models.CharField(max_length=20, blank=True, db_index=True,
                            help_text="claude-code, copilot or codex, from the headers (inference/client_tools.py).")
    tools_n = models.PositiveSmallIntegerField(default=0, help_text="Tool definitions the request carried.")
    system_chars = models.PositiveIntegerField(default=0, help_text="Characters of system / developer text it carried.")
    turns = models.PositiveSmallIntegerField(default=0, help_text="User turns in its conversation so far.")
    conversation = models.CharField(max_length=32, blank=True,
                                    help_text="Its conversation's key (fleet/scheduler.py conversation_key): "
                                              "the same for every turn of one session.")
    path = models.CharField(max_length=100)
    stream = models.BooleanField(default=False)
    status = models.PositiveSmallIntegerField()
    error_code = models.CharField(max_length=50, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cached_tokens = models.PositiveIntegerField(default=0, help_text="Prompt tokens the worker had in its cache.")
    usage_estimated = models.BooleanField(
        default=False, help_text="The worker never reported its counts (a stream cut short): the prompt is the "
                                 "gateway's byte estimate, the output the content events relayed.")
    queue_wait_ms = models.PositiveIntegerField(default=0)
    ttft_ms = models.PositiveIntegerField(null=True, blank=True, help_text="Arrival to first byte from the worker.")
    total_ms = models.PositiveIntegerField(default=0)
    tokens_per_s = models.FloatField(null=True, blank=True, help_text="Generation speed (llama-server timings).")
    prompt_tokens_per_s = models.FloatField(null=True, blank=True, help_text="Prompt eval rate (timings).")
    retries = models.PositiveSmallIntegerField(default=0, help_text="Workers that failed before one answered.")
    steps_ms = models.JSONField(
        default=dict, blank=True,
        help_text="Milliseconds from arrival to each step it reached: authenticated, admitted, slot_claimed, "
                  "upstream_first_byte, client_first_byte (inference/request_context.py STEPS).")

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["user", "at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.model or '-'} {self.status}"


class DailyUsage(models.Model):
    """Per student, model and day (school time zone): the roll-up charts read, kept after the
    request rows are pruned. A class's usage is the sum over its students."""

    day = models.DateField()
    user = models.ForeignKey("accounts.User", on_delete=models.CASCADE, related_name="daily_usage")
    classroom = models.ForeignKey("accounts.Classroom", on_delete=models.SET_NULL, null=True, blank=True,
                                  related_name="daily_usage", help_text="The student's class on that day.")
    model = models.CharField(max_length=100, blank=True)
    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-day", "user"]
        constraints = [models.UniqueConstraint(fields=["day", "user", "model"], name="daily_usage_once")]

    def __str__(self) -> str:
        return f"{self.day} {self.user_id} {self.model}"
