"""A loopback HTTP server that records what a real client sends.

Two modes:

- **answer** (no upstream): every request is recorded and answered with a minimal valid reply in
  the dialect its path names — Anthropic Messages SSE for ``…/messages``, OpenAI chat SSE for
  ``…/chat/completions``, OpenAI Responses SSE for ``…/responses`` (JSON when ``stream`` is
  false) — so a client completes one turn. Used to capture the fixtures in
  tests/fixtures/clients/.
- **forward** (``upstream`` set): every request is recorded, passed to the upstream (the
  gateway) unchanged, and the upstream's answer streamed back unchanged; the record keeps the
  upstream's status and the start of its body. Used by the realclients tests to check that
  every request a client sent was answered 2xx.

Invariants: it listens on 127.0.0.1 only; credentials (``authorization``, ``x-api-key``,
``api-key``, cookies) are never kept in a record, only the word ``<redacted>``.
"""
from __future__ import annotations

import gzip
import json
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

SECRET_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "cookie", "proxy-authorization"})
# Headers a proxy must not copy from one hop to the next.
HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                         "content-length", "host", "content-encoding"})
ANSWER_TEXT = "Hello from the capture server."
BODY_KEEP_BYTES = 4000  # how much of an upstream answer a record keeps


@dataclass
class Exchange:
    """One request as the client sent it, and what it was answered."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any  # the JSON body, or the raw text when it is not JSON, or None
    status: int = 0
    response_head: str = ""  # the first BODY_KEEP_BYTES of the answer (decoded, replaced)
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0

    def as_fixture(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "query": self.query,
                "headers": self.headers, "body": self.body}


def redacted_headers(items: list[tuple[str, str]]) -> dict[str, str]:
    """Lower-cased header names; secrets replaced by ``<redacted>``."""
    return {name.lower(): ("<redacted>" if name.lower() in SECRET_HEADERS else value)
            for name, value in items}


def decode_body(raw: bytes, encoding: str) -> Any:
    if encoding == "gzip":
        raw = gzip.decompress(raw)
    elif encoding == "deflate":
        raw = zlib.decompress(raw)
    elif encoding == "zstd":
        try:
            import zstandard

            raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        except ImportError:
            return f"<{len(raw)} bytes, zstd>"
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


# --- canned answers, one per dialect ------------------------------------------------------------


def sse(event: str | None, data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return ((f"event: {event}\n" if event else "") + f"data: {text}\n\n").encode()


def anthropic_stream(model: str) -> Iterator[bytes]:
    yield sse("message_start", {"type": "message_start", "message": {
        "id": "msg_capture", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}})
    yield sse("content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "text", "text": ""}})
    yield sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": ANSWER_TEXT}})
    yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                "usage": {"output_tokens": 7}})
    yield sse("message_stop", {"type": "message_stop"})


def anthropic_message(model: str) -> dict[str, Any]:
    return {"id": "msg_capture", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": ANSWER_TEXT}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 7}}


def chat_stream(model: str) -> Iterator[bytes]:
    base = {"id": "chatcmpl-capture", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    yield sse(None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ANSWER_TEXT},
                                          "finish_reason": None}]})
    yield sse(None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    yield sse(None, {**base, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}})
    yield sse(None, "[DONE]")


def chat_completion(model: str) -> dict[str, Any]:
    return {"id": "chatcmpl-capture", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER_TEXT},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}}


def _response(model: str, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "resp_capture", "object": "response", "created_at": int(time.time()),
                            "status": status, "model": model, "output": output, "error": None,
                            "incomplete_details": None}
    if status == "completed":
        body["usage"] = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 7,
                         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 17}
    return body


def responses_stream(model: str) -> Iterator[bytes]:
    item_id = "msg_capture"
    part = {"type": "output_text", "text": ANSWER_TEXT, "annotations": []}
    done_item = {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response(model, "in_progress", [])},
        {"type": "response.in_progress", "response": _response(model, "in_progress", [])},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}},
        {"type": "response.content_part.added", "item_id": item_id, "output_index": 0, "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": []}},
        {"type": "response.output_text.delta", "item_id": item_id, "output_index": 0, "content_index": 0,
         "delta": ANSWER_TEXT},
        {"type": "response.output_text.done", "item_id": item_id, "output_index": 0, "content_index": 0,
         "text": ANSWER_TEXT},
        {"type": "response.content_part.done", "item_id": item_id, "output_index": 0, "content_index": 0,
         "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {"type": "response.completed", "response": _response(model, "completed", [done_item])},
    ]
    for number, event in enumerate(events):
        yield sse(event["type"], {**event, "sequence_number": number})


def canned_answer(method: str, path: str, body: Any) -> tuple[int, str, Iterator[bytes]]:
    """(status, content type, body chunks) answering one request in its path's dialect."""
    payload = body if isinstance(body, dict) else {}
    model = str(payload.get("model") or "capture-model")
    streaming = bool(payload.get("stream"))

    def one(document: dict[str, Any]) -> Iterator[bytes]:
        yield json.dumps(document).encode()

    if method == "POST" and path.endswith("/messages/count_tokens"):
        return 200, "application/json", one({"input_tokens": 10})
    if method == "POST" and path.endswith("/messages"):
        if streaming:
            return 200, "text/event-stream", anthropic_stream(model)
        return 200, "application/json", one(anthropic_message(model))
    if method == "POST" and path.endswith("/chat/completions"):
        if streaming:
            return 200, "text/event-stream", chat_stream(model)
        return 200, "application/json", one(chat_completion(model))
    if method == "POST" and path.endswith("/responses"):
        if streaming:
            return 200, "text/event-stream", responses_stream(model)
        done_item = {"id": "msg_capture", "type": "message", "status": "completed", "role": "assistant",
                     "content": [{"type": "output_text", "text": ANSWER_TEXT, "annotations": []}]}
        return 200, "application/json", one(_response(model, "completed", [done_item]))
    if method == "GET" and path.endswith("/models"):
        return 200, "application/json", one({"object": "list", "data": [
            {"id": "capture-model", "object": "model", "created": 0, "owned_by": "capture"}]})
    return 404, "application/json", one({"error": {"message": f"capture server: no route {method} {path}",
                                                   "type": "not_found_error", "param": None, "code": None}})


# --- the server ----------------------------------------------------------------------------------


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up on a kept-alive connection is normal, not an error to print."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class CaptureServer:
    """Records every request; answers canned replies, or forwards to ``upstream`` when given.

    Use as a context manager; ``url`` is its base (``http://127.0.0.1:<port>``), and
    ``exchanges`` the records in arrival order.
    """

    def __init__(self, upstream: str | None = None) -> None:
        self.upstream = upstream.rstrip("/") if upstream else None
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=httpx.Timeout(900, connect=10)) if upstream else None
        capture = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
                return

            def _handle(self) -> None:
                capture._serve(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _handle

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> CaptureServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._client is not None:
            self._client.close()

    def _read_body(self, handler: BaseHTTPRequestHandler) -> bytes:
        if handler.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(handler.rfile.read(size))
                handler.rfile.readline()
        length = int(handler.headers.get("content-length") or 0)
        return handler.rfile.read(length) if length else b""

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        raw = self._read_body(handler)
        parts = urlsplit(handler.path)
        exchange = Exchange(
            method=handler.command, path=parts.path, query=dict(parse_qsl(parts.query, keep_blank_values=True)),
            headers=redacted_headers(list(handler.headers.items())),
            body=decode_body(raw, handler.headers.get("content-encoding", "").lower()))
        with self._lock:
            self.exchanges.append(exchange)
        try:
            if self._client is None:
                status, content_type, chunks = canned_answer(exchange.method, exchange.path, exchange.body)
                self._reply(handler, exchange, status, [("content-type", content_type)], chunks)
            else:
                self._forward(handler, exchange, raw)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
        finally:
            exchange.seconds = time.monotonic() - exchange.started

    def _forward(self, handler: BaseHTTPRequestHandler, exchange: Exchange, raw: bytes) -> None:
        assert self._client is not None and self.upstream is not None
        headers = [(k, v) for k, v in handler.headers.items() if k.lower() not in HOP_HEADERS]
        if handler.headers.get("content-encoding"):
            headers.append(("content-encoding", handler.headers["content-encoding"]))
        request = self._client.build_request(handler.command, self.upstream + handler.path, headers=headers,
                                             content=raw or None)
        try:
            upstream = self._client.send(request, stream=True)
        except httpx.HTTPError as error:
            self._reply(handler, exchange, 502, [("content-type", "text/plain")],
                        iter([f"capture proxy: upstream unreachable: {error}".encode()]))
            return
        try:
            reply_headers = [(k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS]
            self._reply(handler, exchange, upstream.status_code, reply_headers, upstream.iter_raw())
        finally:
            upstream.close()

    def _reply(self, handler: BaseHTTPRequestHandler, exchange: Exchange, status: int,
               headers: list[tuple[str, str]], chunks: Iterator[bytes]) -> None:
        exchange.status = status
        handler.send_response(status)
        for name, value in headers:
            handler.send_header(name, value)
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        kept = bytearray()
        for chunk in chunks:
            if not chunk:
                continue
            if len(kept) < BODY_KEEP_BYTES:
                kept += chunk[: BODY_KEEP_BYTES - len(kept)]
            if handler.command != "HEAD":
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.flush()
        if handler.command != "HEAD":
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        exchange.response_head = bytes(kept).decode("utf-8", "replace")
