"""Forced tool calls that hold with any model. Pure: no Django, no I/O.

The pinned llama-server ignores an object `tool_choice` ("type must be string", falls back to
auto), and with "required" a small model can ramble until max_tokens without calling anything.
Its `response_format: json_schema` is enforced by grammar, reliably. So a named tool_choice (or
"required") is rewritten into a schema-constrained request, and the JSON that comes back is
returned as a real tool call: `tool_calls` with an id, streamed as deltas, and
finish_reason "tool_calls".

- one candidate tool: the schema is the tool's `parameters`; the output IS the arguments, so
  arguments stream as they are generated;
- several ("required" with many tools): the schema is anyOf {name: const, arguments: params};
  the name is known only at the end, so the call is emitted once complete.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from core.errors import invalid_request
from inference.sse import SseRewriter

EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ForcedTool:
    names: tuple[str, ...]
    schema: dict[str, Any]
    instruction: str

    @property
    def single(self) -> bool:
        return len(self.names) == 1


def _functions(tools: Any) -> dict[str, dict[str, Any]]:
    if tools is None:
        return {}
    if not isinstance(tools, list):
        raise invalid_request("`tools` must be an array.", param="tools")
    functions: dict[str, dict[str, Any]] = {}
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise invalid_request(f"`tools[{index}]` must be {{\"type\": \"function\", \"function\": {{\"name\": …}}}}.",
                                  param=f"tools[{index}]")
        parameters = function.get("parameters", EMPTY_OBJECT_SCHEMA)
        if not isinstance(parameters, dict):
            raise invalid_request(f"`tools[{index}].function.parameters` must be a JSON schema object.",
                                  param=f"tools[{index}].function.parameters")
        functions[function["name"]] = function
    return functions


def plan_forced_tool(body: dict[str, Any]) -> ForcedTool | None:
    """The forcing a request needs, or None when tool_choice is auto/none/absent."""
    choice = body.get("tool_choice")
    functions = _functions(body.get("tools"))
    if choice is None or (isinstance(choice, str) and choice in ("auto", "none")):
        return None
    if isinstance(choice, dict):
        function = choice.get("function") if choice.get("type") == "function" else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise invalid_request("`tool_choice` must be \"auto\", \"none\", \"required\" or "
                                  "{\"type\": \"function\", \"function\": {\"name\": …}}.", param="tool_choice")
        if name not in functions:
            raise invalid_request(f"`tool_choice` names `{name}`, which is not in `tools`.", param="tool_choice")
        return _single(functions[name])
    if choice == "required":
        if not functions:
            raise invalid_request("`tool_choice` is \"required\" but no `tools` were given.", param="tool_choice")
        if len(functions) == 1:
            return _single(next(iter(functions.values())))
        return _several(functions)
    raise invalid_request(f"`tool_choice` {str(choice)[:40]!r} is not supported.", param="tool_choice")


def _single(function: dict[str, Any]) -> ForcedTool:
    name = function["name"]
    description = f" ({function['description']})" if function.get("description") else ""
    return ForcedTool(
        names=(name,),
        schema=function.get("parameters") or EMPTY_OBJECT_SCHEMA,
        instruction=f"Call the function `{name}`{description}. Reply with its JSON arguments only.",
    )


def _several(functions: dict[str, dict[str, Any]]) -> ForcedTool:
    variants = [
        {
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": f.get("parameters") or EMPTY_OBJECT_SCHEMA},
            "required": ["name", "arguments"],
        }
        for name, f in functions.items()
    ]
    listing = "; ".join(f"`{name}`: {f.get('description', '')}".rstrip(": ") for name, f in functions.items())
    return ForcedTool(
        names=tuple(functions),
        schema={"anyOf": variants},
        instruction=f"Call one of these functions: {listing}. Reply with JSON "
                    "{\"name\": <function>, \"arguments\": {…}} only.",
    )


def rewrite_request(body: dict[str, Any], plan: ForcedTool) -> dict[str, Any]:
    """The request the worker gets: no tools, the output constrained by the schema."""
    rewritten = {k: v for k, v in body.items() if k not in {"tools", "tool_choice", "parallel_tool_calls"}}
    rewritten["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "forced_tool_call", "schema": plan.schema},
    }
    rewritten["messages"] = [{"role": "system", "content": plan.instruction}, *body["messages"]]
    return rewritten


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def _split_output(text: str, plan: ForcedTool) -> tuple[str, str]:
    """(function name, arguments JSON text) from the constrained output."""
    if plan.single:
        try:
            return plan.names[0], json.dumps(json.loads(text))
        except ValueError:
            return plan.names[0], text  # cut short by max_tokens: pass on what there is
    try:
        parsed = json.loads(text)
        return str(parsed["name"]), json.dumps(parsed.get("arguments", {}))
    except (ValueError, KeyError, TypeError):
        return plan.names[0], text


def convert_response(data: dict[str, Any], plan: ForcedTool) -> dict[str, Any]:
    """A non-streamed chat completion whose content is the constrained JSON -> a tool call."""
    for choice in data.get("choices", []):
        message = choice.get("message") or {}
        name, arguments = _split_output(message.get("content") or "", plan)
        choice["message"] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": new_call_id(), "type": "function",
                            "function": {"name": name, "arguments": arguments}}],
        }
        if choice.get("finish_reason") == "stop":
            choice["finish_reason"] = "tool_calls"
    return data


class StreamConverter(SseRewriter):
    """Rewrites a worker's SSE stream of content deltas into tool-call deltas, event by event."""

    def __init__(self, plan: ForcedTool) -> None:
        super().__init__()
        self.plan = plan
        self.call_id = new_call_id()
        self.started = False
        self.buffered = ""

    def rewrite(self, chunk: dict[str, Any]) -> dict[str, Any]:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content = delta.pop("content", None)
            if content:
                self._arguments(delta, content)
            if choice.get("finish_reason") is not None:
                if not self.plan.single:
                    name, arguments = _split_output(self.buffered, self.plan)
                    delta["tool_calls"] = [{"index": 0, "id": self.call_id, "type": "function",
                                            "function": {"name": name, "arguments": arguments}}]
                elif not self.started:  # an empty answer still yields a (empty) call
                    self._arguments(delta, "")
                if choice["finish_reason"] == "stop":
                    choice["finish_reason"] = "tool_calls"
            choice["delta"] = delta
        return chunk

    def _arguments(self, delta: dict[str, Any], text: str) -> None:
        if not self.plan.single:
            self.buffered += text
            return
        call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
        if not self.started:
            call.update(id=self.call_id, type="function")
            call["function"]["name"] = self.plan.names[0]
            self.started = True
        delta["tool_calls"] = [call]
        delta.setdefault("role", "assistant")
