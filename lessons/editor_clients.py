"""Which coding tool sent a request, and whether the requests look like that tool at work, from
what the request log records. Pure: no Django.

A header is one line to fake (`curl -A claude-cli/2.1`), so the "first request from your editor"
step asks for what a real client carries on every request and a script rarely does:
- the tool named by its headers (`editor_kind`): Claude Code's `claude-cli/…` agent, Copilot's
  `GitHubCopilotChat/…`, the Copilot CLI's headers (inference/client_tools.py), or the
  `/ollama/<key>/` route that only Copilot's Ollama provider uses;
- the agent's payload (`carries_agent_payload`): at least MIN_TOOLS tool definitions and a system
  prompt of at least MIN_SYSTEM_CHARS characters. The pinned clients send 9-24 tools and
  5,700-21,600 characters (tests/fixtures/clients: Claude Code 24 tools / ~5,750, Copilot CLI 17 /
  ~21,570, Codex 9 / ~17,590), so the thresholds sit far below them and far above a hand-typed
  request;
- several turns of one session (`session_turns`): at least MIN_SESSION_REQUESTS such requests in
  one conversation (the request log's conversation key: same student, model, system prompt and
  first message; every later turn and tool round repeats it).
Faking all three means replaying a captured 20 kB agent request turn by turn: more work than
opening the editor. The teacher still sees the recorded agent beside the evidence.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

EditorKind = Literal["copilot", "claude-code"]
EDITOR_LABELS: dict[str, str] = {"copilot": "GitHub Copilot", "claude-code": "Claude Code"}
CHAT_PATH_ENDINGS = ("/v1/chat/completions", "/v1/messages", "/v1/responses")
MIN_TOOLS = 3
MIN_SYSTEM_CHARS = 1_500
MIN_SESSION_REQUESTS = 2


def editor_kind(*, client: str, user_agent: str, path: str, tool: str = "") -> EditorKind | None:
    """The editor a logged request's headers name, or None. Only chat requests count (not
    discovery routes such as `api/tags` or `count_tokens`). `tool` is what the gateway recorded
    from all the request's headers (inference/client_tools.py)."""
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


def carries_agent_payload(*, tools_n: int, system_chars: int) -> bool:
    """The request carried a coding agent's tool definitions and system prompt."""
    return tools_n >= MIN_TOOLS and system_chars >= MIN_SYSTEM_CHARS


@dataclass(frozen=True)
class Seen:
    """One served request as the rule needs it (newest first when given as a list)."""

    request_id: int
    kind: EditorKind
    conversation: str
    tools_n: int
    system_chars: int
    turns: int


@dataclass(frozen=True)
class Verdict:
    passed: bool
    kind: EditorKind | None
    request_id: int | None  # the newest request of the session that passed
    requests: int  # requests of the best session found
    reason: str  # what is missing, for the student; empty when passed


def session_turns(seen: Iterable[Seen]) -> Verdict:
    """Does some conversation hold MIN_SESSION_REQUESTS agent-payload requests of one editor?"""
    rows = list(seen)
    if not rows:
        return Verdict(False, None, None, 0, "No chat request from Copilot or Claude Code with your own key "
                                               "has been served yet.")
    payload = [r for r in rows if carries_agent_payload(tools_n=r.tools_n, system_chars=r.system_chars)]
    if not payload:
        return Verdict(False, rows[0].kind, None, 0,
                       f"Your {EDITOR_LABELS[rows[0].kind]} requests carried no coding agent's tools and system "
                       f"prompt (at least {MIN_TOOLS} tools and {MIN_SYSTEM_CHARS:,} characters). Use the editor's "
                       "agent chat, not a script with its User-Agent.")
    sessions: dict[tuple[str, str], list[Seen]] = defaultdict(list)
    for row in payload:
        if row.conversation:
            sessions[(row.kind, row.conversation)].append(row)
    best = max(sessions.values(), key=len, default=[])
    if len(best) >= MIN_SESSION_REQUESTS:
        return Verdict(True, best[0].kind, best[0].request_id, len(best), "")
    return Verdict(False, payload[0].kind, None, len(best),
                   f"One agent request so far; ask a second question in the same chat (the site looks for "
                   f"{MIN_SESSION_REQUESTS} turns of one session).")
