"""Why the scheduler put a logged request on its worker, in words. Pure: no Django.

The request log keeps the scheduler's note for the chosen worker (RequestLog.route_reason, e.g.
"1/4 slots busy" or "served this conversation before"), not its whole ranking. What the row
holds besides tells the rest of the story: failover
(`retries`), lending between pools, time in the queue, prompt-cache hits. The last line
always says which rule applied when nothing special happened.
"""
from __future__ import annotations


def why_chosen(*, retries: int, request_pool: str, worker_pool: str | None, queue_wait_ms: int,
               cached_tokens: int, scheduler_reason: str = "") -> list[str]:
    reasons = []
    if worker_pool and request_pool and worker_pool != request_pool:
        reasons.append(f"Your pool `{request_pool}` had no routable worker for this model, so pool "
                       f"`{worker_pool}` lent one (promotion).")
    if retries:
        plural = "s" if retries > 1 else ""
        reasons.append(f"{retries} worker{plural} failed before this one answered: the gateway failed over "
                       "before the first byte, invisibly to you.")
    if queue_wait_ms:
        reasons.append(f"Every slot was busy: your request waited {queue_wait_ms} ms in the fair queue.")
    if cached_tokens:
        reasons.append(f"{cached_tokens} prompt tokens were already in this worker's cache: the scheduler "
                       "prefers the worker that served your conversation before.")
    if scheduler_reason:
        reasons.append(f"The scheduler's own note when it chose this worker: {scheduler_reason} (it ranks the "
                       "healthy workers of your pool serving this model, least busy relative to its slots first).")
    else:
        reasons.append("Among the healthy workers of your pool serving this model, it was the least busy relative "
                       "to its slots (the scheduler's rule; this request's row kept no note of its own).")
    return reasons
