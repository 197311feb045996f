"""Which coding tool sent a request, from what the request log records. Pure: no Django.

The one rule the "first request from your editor" step and the Ground 0 burndown share:
- Claude Code identifies itself as `claude-cli/<version> …` (User-Agent); `claude-code` also counts.
- Copilot in VS Code sends `GitHubCopilotChat/<version>`; the Copilot CLI's agent names `copilot`.
- The Ollama route (`/ollama/<key>/…`, RequestLog.client == "ollama") exists only for Copilot's
  Ollama provider (docs/clients.md), so a chat request on it counts as Copilot whatever its agent.
Anything else (curl, the openai or anthropic SDKs, a browser) is not an editor.
A student could fake a User-Agent; the step checks that a student *can* reach the gateway from a
tool, it is not an exam, and the teacher sees the recorded agent beside it.
"""
from __future__ import annotations

from typing import Literal

EditorKind = Literal["copilot", "claude-code"]
EDITOR_LABELS: dict[str, str] = {"copilot": "GitHub Copilot", "claude-code": "Claude Code"}
CHAT_PATH_ENDINGS = ("/v1/chat/completions", "/v1/messages", "/v1/responses")


def editor_kind(*, client: str, user_agent: str, path: str, tool: str = "") -> EditorKind | None:
    """The editor behind a logged request, or None. Only chat requests count (not discovery
    routes such as `api/tags` or `count_tokens`). `tool` is what the gateway recorded from all
    the request's headers (inference/client_tools.py; the Copilot CLI is known by headers, not
    by its agent)."""
    if not path.endswith(CHAT_PATH_ENDINGS):
        return None
    if tool in EDITOR_LABELS:
        return tool  # type: ignore[return-value]
    agent = user_agent.lower()
    if agent.startswith("claude-cli/") or "claude-code" in agent:
        return "claude-code"
    if "githubcopilot" in agent or agent.startswith("copilot/") or "copilot-cli" in agent:
        return "copilot"
    if client == "ollama":
        return "copilot"
    return None
