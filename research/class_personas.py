"""The students of a class replay: request shapes per persona, and how each grows a conversation.

Pure: no Django, no network (the captured first requests are read from tests/fixtures/clients/).

Personas (the names `class_replay --mix` takes):

- `agent`: the Copilot CLI (`copilot -p`, OpenAI chat completions). Its captured first request:
  a ~22 kB system prompt, 17 tools, the user's task.
- `claude`: Claude Code (Anthropic Messages): system blocks, a `system`-role message inside
  `messages` (the agent list), 24 tools, `thinking`, `context_management`, ...
- `codex`: the Codex CLI (OpenAI Responses): two `developer` items, the environment context, the
  task, 9 tools (one of type `namespace`).
- `chat`: a student asking short questions in a chat window (OpenAI chat completions).
- `burst`: a student firing requests back to back (a script in a loop): independent prompts of a
  few hundred tokens, no think time.

Each agent turn after the first appends what its client appends: the assistant's answer with a
tool call, then the tool's result (a file read or a command's output); every third turn the
student also types a follow-up. A conversation that would outgrow the slot's context starts a
new task, as a student would (`/clear`, a new `copilot -p`).

Sizing: SmolLM2's chat template drops tool definitions, so on the demo the model would see far
less than a rig's model sees. With `tools_inline` (the default) the tool definitions are also
written into the system prompt as text, so the worker computes a prompt of the size the rigs'
models see (5,000-22,000 tokens at scale 1). `scale` shrinks every long text (system prompt,
tool list, tool results, answers' caps) by the same factor and keeps the shape.

Deviation from the real clients, on purpose: every request carries an output cap (`max_tokens`,
`max_output_tokens`) scaled like the prompt; the Copilot CLI sends none (the gateway applies its own).
"""
from __future__ import annotations

import copy
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "clients"
PERSONAS = ("agent", "claude", "codex", "chat", "burst")
AGENT_PERSONAS = frozenset({"agent", "claude", "codex"})
MIN_TEXT_CHARS = 40  # shorter texts stay whole
CHARS_PER_TOKEN = 3.0  # a cautious estimate for JSON-heavy prompts (SmolLM2's tokenizer: ~3.5-4)

WORDS = (
    "def return import class self value list dict item index count total result error check print "
    "file path line open read write test assert student answer token model request response worker "
    "slot cache prompt time queue fair share class lesson score grade data table row column name"
).split()

TASKS = (
    "Add a unit test for the parser in src/parse.py and make it pass.",
    "Why does my loop in main.py never end? Fix it.",
    "Refactor the grade calculator into smaller functions.",
    "Explain what the function load_scores does and add type hints.",
    "The CSV export drops the last row; find the bug and fix it.",
    "Write a README section on how to run the tests.",
    "Add input validation to the signup form handler.",
    "Speed up the search in search.py; it is slow on large lists.",
)

QUESTIONS = (
    "What is a list comprehension?",
    "How do I read a file line by line in Python?",
    "What does 'self' mean in a class?",
    "Why is my variable undefined inside the function?",
    "What is the difference between a tuple and a list?",
    "How do I sort a dict by value?",
    "What does a 404 error mean?",
    "Can you explain recursion with a short example?",
)


@dataclass(frozen=True)
class Persona:
    """How one kind of student behaves. Token counts and think times at scale 1."""

    name: str
    dialect: str  # openai_chat, anthropic or responses: the wire its client speaks
    path: str  # the gateway route it posts to
    output_tokens: int  # the cap on each answer
    think_s: tuple[float, float]  # pause between turns (running a tool, reading, typing)
    task_think_s: tuple[float, float]  # pause before a new task or question thread
    turns_per_task: tuple[int, int]
    tool_result_tokens: tuple[int, int] = (0, 0)  # size of what a tool returns (agents)
    fixture: str = ""  # tests/fixtures/clients/<fixture>.json, the captured first request


PERSONA_SHAPES: dict[str, Persona] = {
    "agent": Persona("agent", "openai_chat", "/v1/chat/completions", 300, (1.0, 4.0), (8.0, 20.0), (4, 10),
                     (300, 1500), "copilot-completions"),
    "claude": Persona("claude", "anthropic", "/v1/messages", 300, (1.0, 4.0), (8.0, 20.0), (4, 10),
                      (300, 1500), "claude-code-anthropic"),
    "codex": Persona("codex", "responses", "/v1/responses", 300, (1.0, 4.0), (8.0, 20.0), (4, 10),
                     (300, 1500), "codex-responses"),
    "chat": Persona("chat", "openai_chat", "/v1/chat/completions", 120, (6.0, 15.0), (10.0, 25.0), (2, 6)),
    "burst": Persona("burst", "openai_chat", "/v1/chat/completions", 150, (0.0, 0.0), (0.0, 0.0), (1, 1)),
}


def parse_mix(text: str) -> dict[str, int]:
    """`agent:12,claude:6` -> {"agent": 12, "claude": 6}. Raises ValueError with a plain message."""
    mix: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, number = part.partition(":")
        name = name.strip()
        if not sep or name not in PERSONA_SHAPES:
            raise ValueError(f"--mix {part!r}: expected PERSONA:COUNT with PERSONA one of {', '.join(PERSONAS)}")
        try:
            count = int(number)
        except ValueError:
            raise ValueError(f"--mix {part!r}: {number!r} is not a whole number") from None
        if count < 0:
            raise ValueError(f"--mix {part!r}: a count cannot be negative")
        mix[name] = mix.get(name, 0) + count
    if sum(mix.values()) < 1:
        raise ValueError("--mix names no student: expected e.g. agent:4,chat:2")
    return {name: count for name, count in mix.items() if count}


def roster(mix: dict[str, int]) -> list[tuple[str, str]]:
    """(student name, persona) for each student, in a fixed order: replay-agent-01, ..."""
    return [(f"replay-{persona}-{number:02d}", persona)
            for persona in PERSONAS for number in range(1, mix.get(persona, 0) + 1)]


def scale_text(text: str, scale: float, min_chars: int = MIN_TEXT_CHARS) -> str:
    """The first `scale` of a long text, cut at a space; texts up to `min_chars` stay whole."""
    if len(text) <= min_chars or scale >= 1:
        return text
    keep = max(min_chars, math.ceil(len(text) * scale))
    cut = text.rfind(" ", min_chars // 2, keep)
    return text[: cut if cut > 0 else keep]


PROSE_KEYS = frozenset({"text", "content", "description", "instructions", "system"})


def scale_strings(value: Any, scale: float, *, prose: bool = False) -> Any:
    """Every long prose string inside `value` (under PROSE_KEYS, at any depth) scaled by `scale`;
    structure, ids, names and metadata unchanged."""
    if isinstance(value, str):
        return scale_text(value, scale) if prose else value
    if isinstance(value, list):
        return [scale_strings(item, scale, prose=prose) for item in value]
    if isinstance(value, dict):
        return {key: scale_strings(item, scale, prose=prose or key in PROSE_KEYS) for key, item in value.items()}
    return value


def filler(words: int, rng: random.Random) -> str:
    """Code-like text of about `words` tokens (what a file read or a command prints)."""
    lines, line = [], []
    for _ in range(max(words, 1)):
        line.append(rng.choice(WORDS))
        if len(line) >= rng.randint(5, 10):
            lines.append("    " + " ".join(line))
            line = []
    if line:
        lines.append("    " + " ".join(line))
    return "\n".join(lines)


def captured_body(fixture: str, fixtures_dir: Path = FIXTURES) -> dict[str, Any]:
    """The JSON body of the client's captured generating request (the POST with a body)."""
    data = json.loads((fixtures_dir / f"{fixture}.json").read_text())
    for request in data["requests"]:
        if request.get("method") == "POST" and isinstance(request.get("body"), dict):
            return dict(request["body"])
    raise ValueError(f"{fixture}: no POST request with a JSON body")


def tools_text(tools: list[dict[str, Any]], scale: float) -> str:
    """The tool definitions as the system prompt's last section (what a template that renders
    tools would add), scaled as one text."""
    return "\n\n# Tools\n" + scale_text(json.dumps(tools, separators=(",", ":")), scale)


def estimate_tokens(body: dict[str, Any]) -> int:
    """A cautious estimate of the prompt a body makes (tool definitions counted once, as text)."""
    visible = {key: value for key, value in body.items() if key != "tools"}
    return math.ceil(len(json.dumps(visible)) / CHARS_PER_TOKEN)


@dataclass
class Conversation:
    """One student's current conversation in their client's dialect. `request()` gives the next
    body; `grow(answer)` appends what the client appends after an answer; a new task starts when
    the turns of this one are done or the next request would not fit in `context_tokens`."""

    persona: Persona
    student_index: int
    rng: random.Random
    scale: float = 1.0
    tools_inline: bool = True
    context_tokens: int = 4096
    model: str = "smollm2-135m-instruct"
    fixtures_dir: Path = FIXTURES
    body: dict[str, Any] = field(default_factory=dict)
    turn: int = 0  # turns sent in this task
    task_turns: int = 0
    tasks: int = 0
    _calls: int = 0

    def __post_init__(self) -> None:
        self.new_task()

    # --- what is sent -------------------------------------------------------------------------

    @property
    def output_tokens(self) -> int:
        return max(8, round(self.persona.output_tokens * self.scale))

    def request(self) -> tuple[str, dict[str, Any]]:
        """(route, body) of the next turn; starts a new task first if this one is done or full."""
        if self.turn >= self.task_turns or (self.turn and not self.fits()):
            self.new_task()
        self.turn += 1
        return self.persona.path, copy.deepcopy(self.body)

    def fits(self) -> bool:
        return estimate_tokens(self.body) + self.output_tokens <= self.context_tokens * 0.9

    def think_s(self) -> float:
        """The pause after an answer: longer before a new task than between a task's turns."""
        low, high = self.persona.task_think_s if self.turn >= self.task_turns else self.persona.think_s
        return self.rng.uniform(low, high)

    # --- building and growing -----------------------------------------------------------------

    def new_task(self) -> None:
        self.tasks += 1
        self.turn = 0
        low, high = self.persona.turns_per_task
        self.task_turns = self.rng.randint(low, high)
        build = {"openai_chat": self._first_openai, "anthropic": self._first_anthropic,
                 "responses": self._first_responses}[self.persona.dialect]
        self.body = build()

    def _task_text(self) -> str:
        return f"{self.rng.choice(TASKS)} (student {self.student_index}, task {self.tasks})"

    def _result_text(self) -> str:
        low, high = self.persona.tool_result_tokens
        words = max(4, round(self.rng.randint(low, high) * self.scale))
        return f"$ cat src/module_{self.rng.randint(1, 40)}.py\n" + filler(words, self.rng)

    def _next_call_id(self) -> str:
        self._calls += 1
        return f"call_{self.student_index}_{self.tasks}_{self._calls}"

    def _tool_names(self) -> list[str]:
        names = []
        for tool in self.body.get("tools") or []:
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            if name and (tool.get("type", "function") == "function" or "input_schema" in tool):
                names.append(name)
        return names or ["read_file"]

    def _first_openai(self) -> dict[str, Any]:
        if self.persona.name == "chat":
            return {"model": self.model, "stream": True, "stream_options": {"include_usage": True},
                    "max_tokens": self.output_tokens,
                    "messages": [{"role": "system", "content": "You are a patient teaching assistant for a "
                                                               "programming class. Answer briefly."},
                                 {"role": "user", "content": self.rng.choice(QUESTIONS)}]}
        if self.persona.name == "burst":
            words = max(8, round(300 * self.scale))
            return {"model": self.model, "stream": True, "stream_options": {"include_usage": True},
                    "max_tokens": self.output_tokens,
                    "messages": [{"role": "user", "content": "Review this code:\n" + filler(words, self.rng)}]}
        captured = captured_body(self.persona.fixture, self.fixtures_dir)
        body = scale_strings(captured, self.scale)
        body["model"], body["max_tokens"] = self.model, self.output_tokens
        messages = body["messages"]
        if self.tools_inline and captured.get("tools"):
            messages[0]["content"] = str(messages[0]["content"]) + tools_text(captured["tools"], self.scale)
        messages[-1]["content"] = self._task_text()
        return body

    def _first_anthropic(self) -> dict[str, Any]:
        captured = captured_body(self.persona.fixture, self.fixtures_dir)
        body = scale_strings(captured, self.scale)
        body["model"], body["max_tokens"] = self.model, self.output_tokens
        if self.tools_inline and captured.get("tools"):
            system = body.get("system")
            blocks = system if isinstance(system, list) else [{"type": "text", "text": str(system or "")}]
            body["system"] = [*blocks, {"type": "text", "text": tools_text(captured["tools"], self.scale)}]
        last = body["messages"][0]
        if isinstance(last.get("content"), list):
            last["content"][-1] = {"type": "text", "text": self._task_text()}
        else:
            last["content"] = self._task_text()
        return body

    def _first_responses(self) -> dict[str, Any]:
        captured = captured_body(self.persona.fixture, self.fixtures_dir)
        body = scale_strings(captured, self.scale)
        body["model"], body["max_output_tokens"] = self.model, self.output_tokens
        items = body["input"]
        if self.tools_inline and captured.get("tools"):
            items[0]["content"] = [*items[0]["content"],
                                   {"type": "input_text", "text": tools_text(captured["tools"], self.scale)}]
        items[-1]["content"] = [{"type": "input_text", "text": self._task_text()}]
        return body

    def grow(self, answer: str) -> None:
        """Append what the client appends after `answer` (the streamed text; may be empty)."""
        answer = answer or "Let me look at the code."
        follow_up = self.turn % 3 == 0
        name = self.persona.name
        if name == "burst":
            self.body = self._first_openai()
            return
        if name == "chat":
            self.body["messages"] += [{"role": "assistant", "content": answer},
                                      {"role": "user", "content": self.rng.choice(QUESTIONS)}]
            return
        tool = self.rng.choice(self._tool_names())
        call_id = self._next_call_id()
        arguments = {"path": f"src/module_{self.rng.randint(1, 40)}.py"}
        result = self._result_text()
        if self.persona.dialect == "openai_chat":
            self.body["messages"] += [
                {"role": "assistant", "content": answer, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": tool, "arguments": json.dumps(arguments)}}]},
                {"role": "tool", "tool_call_id": call_id, "content": result},
            ]
            if follow_up:
                self.body["messages"].append({"role": "user", "content": self._task_text()})
        elif self.persona.dialect == "anthropic":
            content: list[dict[str, Any]] = [{"type": "tool_result", "tool_use_id": call_id, "content": result}]
            if follow_up:
                content.append({"type": "text", "text": self._task_text()})
            self.body["messages"] += [
                {"role": "assistant", "content": [{"type": "text", "text": answer},
                                                  {"type": "tool_use", "id": call_id, "name": tool,
                                                   "input": arguments}]},
                {"role": "user", "content": content},
            ]
        else:
            self.body["input"] += [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]},
                {"type": "function_call", "call_id": call_id, "name": tool, "arguments": json.dumps(arguments)},
                {"type": "function_call_output", "call_id": call_id, "output": result},
            ]
            if follow_up:
                self.body["input"].append({"role": "user", "content": [{"type": "input_text",
                                                                        "text": self._task_text()}]})
