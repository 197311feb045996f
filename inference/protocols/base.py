"""What each client protocol (dialect) gives the request pipeline. Pure: no Django.

A dialect owns everything about its wire format: parsing and checking the body, the allow-list
of fields a worker gets, rewriting, its error envelope, its stream events and keep-alives.
The pipeline (inference/pipeline.py) knows none of its field names: it calls `parse`, asks for
a `Plan` (where the worker is asked, with which body, and how its answer is turned back into
the dialect), and renders errors with `error_response` / `error_event`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from core.errors import ApiError


class StreamTransform:
    """Turns a worker's stream into the client's: `feed` gets the worker's bytes as they arrive
    (cut anywhere) and yields what the client gets; `end` runs once the worker's stream ended
    normally and yields what must close the client's stream (events the worker left out)."""

    def feed(self, raw: bytes) -> Iterator[bytes]:
        raise NotImplementedError

    def end(self) -> Iterator[bytes]:
        return iter(())


class Chain(StreamTransform):
    """`first`'s output is `second`'s input, including what `first` yields at the end."""

    def __init__(self, first: StreamTransform, second: StreamTransform) -> None:
        self.first, self.second = first, second

    def feed(self, raw: bytes) -> Iterator[bytes]:
        for converted in self.first.feed(raw):
            yield from self.second.feed(converted)

    def end(self) -> Iterator[bytes]:
        for converted in self.first.end():
            yield from self.second.feed(converted)
        yield from self.second.end()


@dataclass(frozen=True)
class Shape:
    """What a request carries besides its text, in numbers the request log keeps: the tool
    definitions, the system (or developer / instructions) text's length in characters, and the
    user turns of the conversation so far. Real coding tools send large system prompts and many
    tools on every request (tests/fixtures/clients); a hand-made request rarely does. Never the
    text itself: the log holds no prompts."""

    tools: int = 0
    system_chars: int = 0
    turns: int = 0


def _chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(part["text"]) for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return 0


def chat_shape(messages: list[Any], *, tools: Any, system: str = "") -> Shape:
    """The Shape of OpenAI-chat-shaped `messages` (role + content) plus a separate `system` text."""
    system_chars = len(system) + sum(_chars(m.get("content")) for m in messages
                                     if isinstance(m, dict) and m.get("role") in ("system", "developer"))
    turns = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "user")
    return Shape(tools=len(tools) if isinstance(tools, list) else 0, system_chars=system_chars, turns=turns)


@dataclass(frozen=True)
class Call:
    """A request that passed its dialect's checks: what the pipeline routes and accounts on."""

    model: str
    stream: bool
    body: dict[str, Any]
    size: int  # bytes of the raw body: bounds the prompt's tokens (quota reservation, routing)
    max_tokens: int | None = None  # the output cap the client asked for; None: it set none
    opening: tuple[Any, ...] = ()  # what identifies the conversation across turns (affinity)
    parsed: Any = None  # what the dialect's parse worked out and its plan reuses (dialect-private)
    shape: Shape = Shape()  # what it carries besides its text (the request log keeps it)


@dataclass(frozen=True)
class Target:
    """What the gateway decided for a call before planning it: the output cap it applies (the
    client's, clamped to the model's), and what the catalogue says of the model."""

    max_tokens: int
    reasoning: bool = False


@dataclass(frozen=True)
class Plan:
    """How one call is served: the worker route and body, and how the answer comes back.
    `convert` turns a whole JSON answer into the dialect; `stream_transform` makes a fresh
    transform per stream. Neither set: the worker's bytes go to the client untouched."""

    path: str
    body: dict[str, Any]
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    stream_transform: Callable[[], StreamTransform] | None = None

    @property
    def end_marker(self) -> bytes:
        """What the worker's stream on this route ends with when it is complete: a stream that
        ends without it was cut short (the client then gets an error event, not a fake ending)."""
        return b"message_stop" if self.path.startswith("/v1/messages") else b"data: [DONE]"


@dataclass(frozen=True)
class Protocol:
    """One dialect, as the pipeline sees it."""

    client: str  # the request log's and the metrics' name for it
    keepalive: bytes  # sent while a stream waits for a worker slot
    parse: Callable[[bytes], Call]
    plan: Callable[[Call, Target], Plan]
    error_status: Callable[[ApiError], int]
    error_body: Callable[[ApiError], bytes]
    error_event: Callable[[ApiError], bytes]  # an error after the stream started
    maps_unknown_models: bool = False  # Claude Code's claude-* names go to a default model
