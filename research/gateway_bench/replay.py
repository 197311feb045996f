"""A replay upstream: a CPU-cheap stand-in for llama-server, for benchmarking the gateway only.

    python -m research.gateway_bench.replay --port 8090 --tokens 64 --token-ms 5 --slots 128

Raw asyncio streams, HTTP/1.1 with keep-alive; no Django. It answers what the gateway and
`register_worker` ask of a worker: `GET /health`, `/props` (total_slots, n_ctx per slot),
`/slots` (is_processing per slot, as the health monitor reads it), `/v1/models`, and
`POST /v1/chat/completions`, streamed (chunked transfer encoding) or not.

A streamed answer, shaped like llama-server's: a first chunk with the role, then `tokens` content
chunks (fewer if the request's max_tokens is smaller), the k-th sent k × `token_ms` after the
request was read (a fixed schedule, so a slow reader does not stretch the pacing), then a final
chunk with finish_reason "length" and `usage`, then `data: [DONE]` — the end marker the gateway
checks for (inference/protocols/base.py). It runs in its own process so that its event loop is
not the load generator's.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

DEFAULT_MODEL = "bench-replay"
CONTEXT_PER_SLOT = 8192
TOKEN_TEXT = " word"
MAX_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class ReplayConfig:
    tokens: int = 64
    token_ms: float = 5.0
    slots: int = 128
    model: str = DEFAULT_MODEL


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


def _compact(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class StreamFrames:
    """The bytes of a streamed answer, built once: every content chunk is the same."""

    def __init__(self, model: str) -> None:
        self.created = int(time.time())
        self.model = model
        self.role = self._frame({"role": "assistant", "content": None}, None)
        self.content = self._frame({"content": TOKEN_TEXT}, None)

    def _event(self, choice_delta: dict[str, Any], finish_reason: str | None,
               usage: dict[str, int] | None = None) -> bytes:
        chunk: dict[str, Any] = {
            "id": "chatcmpl-replay", "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": "replay",
            "choices": [{"index": 0, "delta": choice_delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if usage is not None:
            chunk["usage"] = usage
        return b"data: " + _compact(chunk) + b"\n\n"

    def _frame(self, choice_delta: dict[str, Any], finish_reason: str | None) -> bytes:
        return _http_chunk(self._event(choice_delta, finish_reason))

    def end(self, usage: dict[str, int]) -> bytes:
        """The final chunk, [DONE] and the chunked encoding's last chunk, in one write."""
        return (_http_chunk(self._event({}, "length", usage)) + _http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


def prompt_tokens(body: dict[str, Any]) -> int:
    """A rough count (words, plus a few per message for the template): only its shape matters."""
    count = 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            count += len(content.split())
        count += 4
    return max(count, 1)


def completion_tokens(body: dict[str, Any], configured: int) -> int:
    wanted = body.get("max_tokens", body.get("max_completion_tokens"))
    if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > 0:
        return min(wanted, configured)
    return configured


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on the connection, or None when the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()).strip():
                    pass
                break
            parts.append((await reader.readexactly(size + 2))[:-2])
        body = b"".join(parts)
    else:
        body = await reader.readexactly(int(headers.get("content-length") or 0))
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return Request(method=method, path=path.split("?", 1)[0], headers=headers, body=body, keep_alive=keep_alive)


STATUS_TEXT = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def json_response(status: int, data: Any, *, keep_alive: bool) -> bytes:
    body = _compact(data)
    head = (f"HTTP/1.1 {status} {STATUS_TEXT.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
    return head.encode() + body


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
               b"Transfer-Encoding: chunked\r\n")


def _error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "type": "invalid_request_error"}}


class ReplayServer:
    def __init__(self, config: ReplayConfig) -> None:
        self.config = config
        self.frames = StreamFrames(config.model)
        self.processing = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await read_request(reader)
                if request is None:
                    break
                await self.respond(request, writer)
                if not request.keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # a client that went away or spoke nonsense: drop the connection
        finally:
            writer.close()

    async def respond(self, request: Request, writer: asyncio.StreamWriter) -> None:
        keep = request.keep_alive
        config = self.config
        if request.method == "GET":
            answers: dict[str, Any] = {
                "/health": {"status": "ok"},
                "/props": {"default_generation_settings": {"n_ctx": CONTEXT_PER_SLOT}, "total_slots": config.slots,
                           "model_path": "replay"},
                "/slots": [{"id": index, "is_processing": index < self.processing} for index in range(config.slots)],
                "/v1/models": {"object": "list", "data": [{"id": config.model, "object": "model",
                                                          "created": self.frames.created, "owned_by": "replay"}]},
            }
            answer = answers.get(request.path)
            if answer is None:
                writer.write(json_response(404, _error(404, "File Not Found"), keep_alive=keep))
            else:
                writer.write(json_response(200, answer, keep_alive=keep))
            await writer.drain()
            return
        if request.path != "/v1/chat/completions":
            writer.write(json_response(404, _error(404, "File Not Found"), keep_alive=keep))
            await writer.drain()
            return
        if request.method != "POST":
            writer.write(json_response(405, _error(405, "Method Not Allowed"), keep_alive=keep))
            await writer.drain()
            return
        try:
            body = json.loads(request.body)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            writer.write(json_response(400, _error(400, "the body is not a JSON object"), keep_alive=keep))
            await writer.drain()
            return
        self.processing += 1
        try:
            if body.get("stream"):
                await self.stream(body, writer, keep_alive=keep)
            else:
                await self.complete(body, writer, keep_alive=keep)
        finally:
            self.processing -= 1

    def usage(self, body: dict[str, Any], completion: int) -> dict[str, int]:
        prompt = prompt_tokens(body)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    async def stream(self, body: dict[str, Any], writer: asyncio.StreamWriter, *, keep_alive: bool) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        tokens = completion_tokens(body, self.config.tokens)
        token_s = self.config.token_ms / 1000
        writer.write(STREAM_HEAD + (b"Connection: keep-alive\r\n\r\n" if keep_alive else b"Connection: close\r\n\r\n")
                     + self.frames.role)
        await writer.drain()
        for index in range(1, tokens + 1):
            wait_s = started + index * token_s - loop.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            writer.write(self.frames.content)
            await writer.drain()
        writer.write(self.frames.end(self.usage(body, tokens)))
        await writer.drain()

    async def complete(self, body: dict[str, Any], writer: asyncio.StreamWriter, *, keep_alive: bool) -> None:
        tokens = completion_tokens(body, self.config.tokens)
        await asyncio.sleep(tokens * self.config.token_ms / 1000)
        answer = {
            "id": "chatcmpl-replay", "object": "chat.completion", "created": self.frames.created,
            "model": self.config.model, "system_fingerprint": "replay",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": TOKEN_TEXT * tokens},
                         "logprobs": None, "finish_reason": "length"}],
            "usage": self.usage(body, tokens),
        }
        writer.write(json_response(200, answer, keep_alive=keep_alive))
        await writer.drain()


async def serve(config: ReplayConfig, host: str, port: int) -> None:
    server = ReplayServer(config)
    listener = await asyncio.start_server(server.handle, host, port, backlog=2048, limit=MAX_HEAD_BYTES)
    print(f"replay upstream on http://{host}:{port}: {config.tokens} tokens, {config.token_ms:g} ms apart, "
          f"{config.slots} slots", flush=True)
    async with listener:
        await listener.serve_forever()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed (cheaper per write), else asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A replay upstream that answers like llama-server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=64, help="Content chunks per streamed answer.")
    parser.add_argument("--token-ms", type=float, default=5.0, help="Milliseconds between content chunks.")
    parser.add_argument("--slots", type=int, default=128, help="total_slots reported by /props.")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    config = ReplayConfig(tokens=args.tokens, token_ms=args.token_ms, slots=args.slots, model=args.model)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        try:
            runner.run(serve(config, args.host, args.port))
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
