"""Rows the lessons read, written as the gateway would write them, and what a real editor sends."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from inference.models import RequestLog

COPILOT_AGENT = "GitHubCopilotChat/0.31.0"
CLAUDE_AGENT = "claude-cli/2.1.197 (external, cli)"
# What Claude Code 2.1.197 carries on every request (tests/fixtures/clients/claude-code-anthropic.json).
AGENT_SHAPE: dict[str, Any] = {"tools_n": 24, "system_chars": 5_749}


def copilot_agent_session() -> tuple[list[dict[str, Any]], list[list[dict[str, str]]]]:
    """(tools, turns): what Copilot's agent sends on two turns of one conversation — a long
    system prompt and tool definitions with every request — as the editor step expects."""
    system = {"role": "system", "content": "You are an AI programming assistant in VS Code. " * 45}
    tools = [{"type": "function", "function": {"name": name, "description": f"{name} a file",
                                               "parameters": {"type": "object", "properties": {}}}}
             for name in ("read_file", "edit_file", "run_in_terminal")]
    turns = [[system, {"role": "user", "content": "Say hi"}],
             [system, {"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi"},
              {"role": "user", "content": "Again"}]]
    return tools, turns


def log_session(*, user: Any, key: Any, worker: Any, turns: int = 2, conversation: str = "c0ffee",
                **extra: Any) -> list[RequestLog]:
    """`turns` served requests of one editor session, each carrying the agent's tools and system prompt."""
    fields = {"client": "anthropic", "path": "/v1/messages", "user_agent": CLAUDE_AGENT, **AGENT_SHAPE, **extra}
    return [log_request(user=user, key=key, worker=worker, conversation=conversation, turns=turn + 1, **fields)
            for turn in range(turns)]


def log_request(*, user: Any, key: Any, worker: Any = None, client: str = "openai",
                user_agent: str = "curl/8.5.0", path: str = "/v1/chat/completions", status: int = 200,
                ttft_ms: int | None = 120, at: datetime | None = None, **extra: Any) -> RequestLog:
    return RequestLog.objects.create(
        at=at or timezone.now(), user=user, key=key, pool=key.pool.name if key else "production",
        model="smollm2-135m-instruct", worker=worker, worker_name=worker.name if worker else "",
        client=client, user_agent=user_agent, path=path, stream=True, status=status, ttft_ms=ttft_ms,
        total_ms=400, prompt_tokens=20, completion_tokens=10, **extra,
    )
