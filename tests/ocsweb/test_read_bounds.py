"""The gateway alone (uvicorn, no nginx in front) bounds what it reads (issue 22): oversized or
too many headers get 431, headers that trickle in (or never come) get 408 and the connection
closes, a body that stalls is cut off; real clients' requests pass, up to the body cap.
A real gateway process on loopback, driven over raw sockets."""
from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.conftest import Gateway, start_gateway, stop_process

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral, pytest.mark.django_db(transaction=True)]

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
BODY_DEADLINE_S = 5.0  # longer than the slow steady body below takes (about 2 s)
CLOSED_WITHIN_S = 20.0  # far above the timeouts: a loaded CI machine still fits


@pytest.fixture(scope="module")
def bounded(django_db_blocker, tmp_path_factory) -> Iterator[Gateway]:  # noqa: ANN001
    with django_db_blocker.unblock():
        gateway = start_gateway(tmp_path_factory.mktemp("bounds") / "gateway.log",
                                OCS_GATEWAY_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
                                OCS_GATEWAY_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
                                OCS_GATEWAY_BODY_DEADLINE_S=str(BODY_DEADLINE_S))
    try:
        yield gateway
    finally:
        stop_process(gateway.process)


def connect(gateway: Gateway) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=CLOSED_WITHIN_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the gateway sends until it closes the connection (a timeout fails the test)."""
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def closed(sock: socket.socket) -> bool:
    """The gateway closed the connection (after whatever it had to say) before CLOSED_WITHIN_S."""
    try:
        read_all(sock)
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def post(path: str, body: bytes, extra_headers: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n").encode() + extra_headers + b"\r\n" + body


def test_an_oversized_header_gets_431_and_the_connection_closes(bounded) -> None:  # noqa: ANN001
    with connect(bounded) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (8 * 1024 * 1024) + b"\r\n\r\n")
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_too_many_headers_get_431(bounded) -> None:  # noqa: ANN001
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(20_000))
    with connect(bounded) as sock:
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed before all of it was sent
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_headers_that_trickle_in_get_408_and_the_connection_closes(bounded) -> None:  # noqa: ANN001
    with connect(bounded) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        answer = b""
        sock.settimeout(0.2)
        while time.monotonic() - started < CLOSED_WITHIN_S:
            try:
                sock.sendall(b"X-Slow: 1\r\n")
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
    assert answer.startswith(b"HTTP/1.1 408 "), answer


def test_many_connections_that_send_nothing_or_stall_are_all_closed(bounded) -> None:  # noqa: ANN001
    idle = [connect(bounded) for _ in range(40)]
    stalled_body = [connect(bounded) for _ in range(40)]
    for sock in stalled_body:
        sock.sendall(post("/v1/chat/completions", b"")[:-4].replace(b"Content-Length: 0", b"Content-Length: 1000")
                     + b"\r\n\r\n" + b'{"model": ')
    try:
        for sock in idle + stalled_body:
            assert closed(sock)
    finally:
        for sock in idle + stalled_body:
            sock.close()


def test_real_clients_pass_a_copilot_sized_request_and_a_slow_steady_body_up_to_the_cap(bounded, settings) -> None:  # noqa: ANN001
    # Copilot's first request: about 48 kB of body, a few kB of headers.
    headers = b"".join(b"X-Client-%d: %s\r\n" % (i, b"v" * 200) for i in range(20))
    with connect(bounded) as sock:
        sock.sendall(post("/v1/chat/completions", b'{"model": "m", "pad": "' + b"x" * 48_000 + b'"}', headers))
        assert read_all(sock).startswith(b"HTTP/1.1 401 ")  # read in full, answered by the application
    # A body at the cap, sent in pieces with pauses shorter than the body timeout: the whole
    # upload takes longer than that timeout, and still passes.
    body = b'{"model": "m", "pad": "' + b"x" * (settings.OCS["MAX_BODY_BYTES"] - 100) + b'"}'
    request = post("/v1/chat/completions", body)
    pieces = [request[i:i + len(request) // 4 + 1] for i in range(0, len(request), len(request) // 4 + 1)]
    with connect(bounded) as sock:
        for piece in pieces:
            sock.sendall(piece)
            time.sleep(BODY_TIMEOUT_S * 0.5)
        assert read_all(sock).startswith(b"HTTP/1.1 401 ")


def still_open(sock: socket.socket) -> bool:
    """Without waiting: the gateway has not closed the connection (nothing to read yet)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except (ConnectionResetError, BrokenPipeError):
        return False
    finally:
        sock.setblocking(True)


def test_fifty_clients_trickling_their_bodies_are_cut_at_the_deadline_while_others_are_served(bounded) -> None:  # noqa: ANN001
    trickling = [connect(bounded) for _ in range(50)]
    for sock in trickling:
        sock.sendall(post("/v1/chat/completions", b"x" * 10_000)[:-10_000] + b"{")
    opened = time.monotonic()
    open_after_the_read_timeout: int | None = None
    served_meanwhile = False
    try:
        # A byte from each every half read timeout: never a pause long enough for the read timer.
        while time.monotonic() - opened < BODY_DEADLINE_S + CLOSED_WITHIN_S:
            alive = [sock for sock in trickling if still_open(sock)]
            if open_after_the_read_timeout is None and time.monotonic() - opened > 3 * BODY_TIMEOUT_S:
                open_after_the_read_timeout = len(alive)
                with connect(bounded) as other:  # a classmate's request meanwhile
                    other.sendall(post("/v1/chat/completions", b'{"model": "m"}'))
                    served_meanwhile = read_all(other).startswith(b"HTTP/1.1 401 ")
            if not alive:
                break
            for sock in alive:
                try:
                    sock.sendall(b" ")
                except (BrokenPipeError, ConnectionResetError):
                    pass
            time.sleep(BODY_TIMEOUT_S / 2)
        assert open_after_the_read_timeout == 50  # the read timer alone never cuts them
        assert served_meanwhile
        assert not [sock for sock in trickling if still_open(sock)]  # every one cut at the deadline
    finally:
        for sock in trickling:
            sock.close()


def test_past_the_connection_cap_a_new_request_gets_503_and_the_gateway_recovers(tmp_path) -> None:  # noqa: ANN001
    gateway = start_gateway(tmp_path / "gateway.log", OCS_GATEWAY_MAX_CONNECTIONS="16",
                            OCS_GATEWAY_BODY_DEADLINE_S=str(BODY_DEADLINE_S))
    held = []
    try:
        for _ in range(16):  # each holds its connection with a body that never comes
            sock = connect(gateway)
            sock.sendall(post("/v1/chat/completions", b"x" * 1000)[:-1000])
            held.append(sock)
        time.sleep(0.5)
        with connect(gateway) as extra:
            extra.sendall(post("/v1/chat/completions", b'{"model": "m"}'))
            assert read_all(extra).startswith(b"HTTP/1.1 503 ")
        for sock in held:
            assert closed(sock)  # cut at the deadline
        with connect(gateway) as later:
            later.sendall(post("/v1/chat/completions", b'{"model": "m"}'))
            assert read_all(later).startswith(b"HTTP/1.1 401 ")
    finally:
        for sock in held:
            sock.close()
        stop_process(gateway.process)
