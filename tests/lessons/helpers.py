"""Rows the lessons read, written as the gateway would write them."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from inference.models import RequestLog

COPILOT_AGENT = "GitHubCopilotChat/0.31.0"
CLAUDE_AGENT = "claude-cli/2.1.197 (external, cli)"


def log_request(*, user: Any, key: Any, worker: Any = None, client: str = "openai",
                user_agent: str = "curl/8.5.0", path: str = "/v1/chat/completions", status: int = 200,
                ttft_ms: int | None = 120, at: datetime | None = None, **extra: Any) -> RequestLog:
    return RequestLog.objects.create(
        at=at or timezone.now(), user=user, key=key, pool=key.pool.name if key else "production",
        model="smollm2-135m-instruct", worker=worker, worker_name=worker.name if worker else "",
        client=client, user_agent=user_agent, path=path, stream=True, status=status, ttft_ms=ttft_ms,
        total_ms=400, prompt_tokens=20, completion_tokens=10, **extra,
    )
