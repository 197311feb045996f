"""What the gateway reads from a client, bounded by the server itself (uvicorn with httptools,
ocsweb/uvicorn_server.py), so that it holds with no nginx in front (the demo, a tunnel straight
to a gateway):

- the request line and headers: at most MAX_HEADER_BYTES (URL, names and values together) and
  MAX_HEADERS fields, else 431 and the connection is closed;
- they must arrive within HEADER_TIMEOUT_S of the connection opening (or of the request's first
  byte on a kept-alive connection), else 408 and close: a client that trickles its headers
  (slowloris) or never sends any holds a connection that long at most;
- the body may pause at most BODY_TIMEOUT_S between two reads, and must arrive whole within
  BODY_DEADLINE_S of its headers, else the connection is closed (the application sees the client
  gone): a client that trickles a byte now and then holds a connection that long at most. The
  deadline passes a steady upload of the largest body OCS_MAX_BODY_BYTES allows (core/body_limit.py,
  8 MB) at 70 kB/s or more; time the application is not reading does not count against it;
- at most MAX_CONNECTIONS connections and running requests at once (uvicorn's limit_concurrency):
  past it a new request gets 503 at once, so a flood of connections cannot exhaust the process.

Values pass every real client by a wide margin: their headers are a few kB (Copilot's largest
first request, 48 kB, is body); nginx's own defaults are 8 kB per header line, 60 s for headers
and 60 s between body reads.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from core.env import env_float, env_int


@dataclass(frozen=True)
class ReadBounds:
    max_header_bytes: int = 64 * 1024
    max_headers: int = 128
    header_timeout_s: float = 30.0
    body_timeout_s: float = 60.0
    body_deadline_s: float = 120.0
    max_connections: int = 1000


def read_bounds_from_env() -> ReadBounds:
    return ReadBounds(
        max_header_bytes=env_int("OCS_GATEWAY_MAX_HEADER_BYTES", ReadBounds.max_header_bytes, minimum=1024),
        max_headers=env_int("OCS_GATEWAY_MAX_HEADERS", ReadBounds.max_headers, minimum=16),
        header_timeout_s=env_float("OCS_GATEWAY_HEADER_TIMEOUT_S", ReadBounds.header_timeout_s, minimum=0.1),
        body_timeout_s=env_float("OCS_GATEWAY_BODY_TIMEOUT_S", ReadBounds.body_timeout_s, minimum=0.1),
        body_deadline_s=env_float("OCS_GATEWAY_BODY_DEADLINE_S", ReadBounds.body_deadline_s, minimum=0.1),
        max_connections=env_int("OCS_GATEWAY_MAX_CONNECTIONS", ReadBounds.max_connections, minimum=16),
    )


LINGER_S = 2.0  # after a refusal, how long the rest of the client's request is read and dropped


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; data_received answers `status`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def bounded_protocol(bounds: ReadBounds) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol class with `bounds` applied (Config(http=...) takes a class)."""

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None
        _body_deadline: asyncio.TimerHandle | None = None
        _header_bytes = 0
        _header_count = 0
        _refusing = False
        _request_begun = False  # a byte of the current request arrived

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_timers()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refusing:
                return
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
            except httptools.HttpParserError as exc:
                refusal = exc.__context__ if isinstance(exc.__context__, _Refused) else None
                if refusal is not None:
                    self._refuse(refusal.status, refusal.message)
                    return
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)

        def handle_websocket_upgrade(self) -> None:
            self._cancel_timers()  # the websocket protocol takes the connection over
            super().handle_websocket_upgrade()

        # Parser callbacks
        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._header_bytes = self._header_count = 0
            self._request_begun = True
            self._arm_header_timer()

        def on_url(self, url: bytes) -> None:
            self._count_header_bytes(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._header_count += 1
            if self._header_count > bounds.max_headers:
                raise _Refused(431, f"More than {bounds.max_headers} header fields.")
            self._count_header_bytes(len(name) + len(value))
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._cancel(self._header_timer)
            self._header_timer = None
            self._request_begun = False
            super().on_headers_complete()
            if not (self.parser.should_upgrade() and self._should_upgrade()):
                self._arm_body_timer()
                self._body_deadline = self.loop.call_later(bounds.body_deadline_s, self._body_past_deadline)

        def on_body(self, body: bytes) -> None:
            self._arm_body_timer()
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._cancel(self._body_timer)
            self._cancel(self._body_deadline)
            self._body_timer = self._body_deadline = None
            super().on_message_complete()

        # Bounds
        def _count_header_bytes(self, n: int) -> None:
            self._header_bytes += n
            if self._header_bytes > bounds.max_header_bytes:
                raise _Refused(431, f"The request line and headers are larger than {bounds.max_header_bytes} bytes.")

        def _arm_header_timer(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(bounds.header_timeout_s, self._headers_too_slow)

        def _arm_body_timer(self) -> None:
            self._cancel(self._body_timer)
            self._body_timer = self.loop.call_later(bounds.body_timeout_s, self._body_too_slow)

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a pipelined request behind a running one: that one's answer comes first
            if not self._request_begun:
                self.transport.close()  # not one byte of a request: nothing to answer
                return
            self._refuse(408, f"The request headers did not arrive within {bounds.header_timeout_s:g} s.")

        def _body_too_slow(self) -> None:
            self._body_timer = None
            if self.transport.is_closing():
                return
            if self.flow is not None and self.flow.read_paused:
                self._arm_body_timer()  # the application is not reading yet: not the client's pause
                return
            self.logger.warning("closing a connection whose request body paused for more than %g s",
                                bounds.body_timeout_s)
            self.transport.close()

        def _body_past_deadline(self) -> None:
            self._body_deadline = None
            if self.transport.is_closing():
                return
            if self.flow is not None and self.flow.read_paused:
                # The application is not reading: not the client's time. Looked at again later.
                self._body_deadline = self.loop.call_later(bounds.body_timeout_s, self._body_past_deadline)
                return
            self.logger.warning("closing a connection whose request body did not arrive within %g s",
                                bounds.body_deadline_s)
            self.transport.close()

        def _refuse(self, status: int, message: str) -> None:
            self._refusing = True
            self._cancel_timers()
            self.logger.warning("refused a request: %s", message)
            body = message.encode("ascii")
            self.transport.write(b"".join([
                STATUS_LINE[status], b"content-type: text/plain; charset=utf-8\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n", b"connection: close\r\n\r\n", body]))
            # A lingering close, as nginx does: closing with the client's unread bytes in the
            # socket would send a reset, which can destroy the answer before the client reads it.
            # Its further bytes are read and dropped for LINGER_S at most.
            if self.transport.can_write_eof():
                self.transport.write_eof()
                self.loop.call_later(LINGER_S, self.transport.close)
            else:
                self.transport.close()

        def _cancel_timers(self) -> None:
            for timer in (self._header_timer, self._body_timer, self._body_deadline):
                self._cancel(timer)
            self._header_timer = self._body_timer = self._body_deadline = None

        @staticmethod
        def _cancel(timer: asyncio.TimerHandle | None) -> None:
            if timer is not None:
                timer.cancel()

    return BoundedHttpToolsProtocol
