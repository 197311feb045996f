"""Which student tool sent a request, from its headers. Pure: no Django.

Recorded in the request log (`RequestLog.tool`) so the teacher, the usage pages and the Ground 0
steps can tell Claude Code, Copilot and Codex from scripts. Evidence, not proof: a student can
fake headers. What each tool sends was captured from the pinned clients (tests/fixtures/clients):
- Claude Code: `User-Agent: claude-cli/<version> …`;
- Codex: `User-Agent: codex_exec/…` or `codex_cli_rs/…`, and an `originator` header;
- Copilot CLI: the openai/anthropic JS SDKs' agent, plus `x-interaction-type` and `x-initiator`;
- Copilot in VS Code: `GitHubCopilotChat/<version>`; its Ollama provider uses /ollama/<key>/.
The site's own chat page (/chat/) is known by its route, whatever its headers say: 'chat'.
"""
from __future__ import annotations

from collections.abc import Mapping


def client_tool(headers: Mapping[str, str], *, path: str = "") -> str:
    """'chat' (the chat page's route), 'claude-code', 'copilot', 'codex', or '' for anything else
    (SDKs, curl)."""
    if path.startswith("/chat/"):
        return "chat"
    agent = headers.get("User-Agent", "").lower()
    if agent.startswith("claude-cli/") or "claude-code" in agent:
        return "claude-code"
    if agent.startswith(("codex_", "codex/")) or headers.get("Originator", "").startswith("codex"):
        return "codex"
    if "githubcopilot" in agent or agent.startswith("copilot/") or path.startswith("/ollama/") \
            or ("X-Interaction-Type" in headers and "X-Initiator" in headers):
        return "copilot"
    return ""
