"""Prometheus metrics of the gateway process (prometheus-client's default registry, which also
carries the process's CPU and memory). Each gateway process serves its own /metrics; scrape each."""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from inference.usage import Usage

REQUESTS = Counter("ocs_requests", "API requests answered, by client protocol, model, pool and status",
                   ["client", "model", "pool", "status"])
REFUSALS = Counter("ocs_rate_limit_refusals", "Requests refused with 429, by reason", ["reason"])
FIRST_BYTE = Histogram("ocs_first_byte_seconds",
                       "Request arrival to the worker's first chunk (streams) or whole answer (others)",
                       ["model"], buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
QUEUE_WAIT = Histogram("ocs_queue_wait_seconds", "Time a request waited for a free worker slot", ["model"],
                       buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60))
# One observation per step a request reached (inference/request_context.py STEPS): the seconds
# from the step before it (or its arrival) to this one. Their sums, divided by their counts, say
# where a request's time before its first byte goes.
REQUEST_STEP = Histogram("ocs_request_step_seconds",
                         "Time from a request's previous step (or its arrival) to this step, by step",
                         ["step"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                            2.5, 5, 10, 30, 60))
TOKENS = Counter("ocs_tokens", "Tokens processed by the workers", ["model", "direction"])
WORKER_STATE = Gauge("ocs_worker_state", "1 for the state each worker is in", ["worker", "pool", "state"])
WORKER_SLOTS = Gauge("ocs_worker_slots", "Slots (llama-server --parallel) per worker", ["worker", "pool"])
WORKER_BUSY = Gauge("ocs_worker_busy_slots", "Slots held by requests, across gateway processes", ["worker", "pool"])
WORKER_LANE = Gauge("ocs_worker_lane_tokens",
                    "A lane worker's limit: it takes only prompts of at most this many tokens (0: any prompt)",
                    ["worker", "pool"])
LANE_CLAIMS = Counter("ocs_lane_claims", "Slots claimed on lane workers (kept for short prompts), by this process",
                      ["worker"])
QUEUE_DEPTH = Gauge("ocs_queue_depth", "Requests waiting for a slot, across gateway processes", ["pool_model"])


def count_tokens(model: str, usage: Usage) -> None:
    if usage.prompt_tokens:
        TOKENS.labels(model, "prompt").inc(usage.prompt_tokens)
    if usage.completion_tokens:
        TOKENS.labels(model, "completion").inc(usage.completion_tokens)
