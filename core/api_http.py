"""The request and the response of the API's lean path (core/lean_asgi.py): only what the API's
handlers read and write, built straight from the ASGI scope and sent straight to the server.
Pure: no Django.

Names and behaviour follow Django's HttpRequest / HttpResponse where the handlers use them
(`request.headers["x-api-key"]`, `response["Retry-After"] = "3"`, `response.status_code`), so
the pipeline reads the same as it did on Django; what the API never used (sessions, cookies,
the META dictionary, lazy body files, charsets) is not here.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any


class Headers(Mapping[str, str]):
    """A request's headers, case-insensitive; a repeated header's values joined with ", "
    (RFC 9110 5.3), as Django's request.headers does."""

    __slots__ = ("_values",)

    def __init__(self, raw: Iterable[tuple[bytes, bytes]] = ()) -> None:
        values: dict[str, str] = {}
        for name, value in raw:
            key, text = name.decode("latin-1").lower(), value.decode("latin-1")
            values[key] = f"{values[key]}, {text}" if key in values else text
        self._values = values

    def __getitem__(self, name: str) -> str:
        return self._values[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values

    def get(self, name: str, default: Any = None) -> Any:  # noqa: ANN401 - Mapping.get's own signature
        return self._values.get(name.lower(), default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class Request:
    """One API request: its body read in full (the entry point caps its size first)."""

    __slots__ = ("method", "path", "headers", "body", "peer")

    def __init__(self, *, method: str, path: str, headers: Headers, body: bytes = b"", peer: str = "") -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body
        self.peer = peer  # the TCP peer (the HTTPS proxy, in production); see core/client_address.py

    @classmethod
    def from_scope(cls, scope: Mapping[str, Any], body: bytes) -> Request:
        client = scope.get("client")
        return cls(method=scope["method"], path=scope["path"], headers=Headers(scope.get("headers", ())),
                   body=body, peer=client[0] if client else "")


class Response:
    """A plain answer (`body`) or a stream (`stream`, an async iterator of bytes sent as they
    come; whoever sends it closes it, see core/lean_asgi.py). Headers are case-insensitive and
    keep the case they were first set in."""

    __slots__ = ("status_code", "body", "stream", "_headers")

    def __init__(self, body: bytes = b"", *, status: int = 200, content_type: str = "application/json",
                 stream: AsyncIterator[bytes] | None = None) -> None:
        self.status_code = status
        self.body = body
        self.stream = stream
        self._headers: dict[str, tuple[str, str]] = {"content-type": ("Content-Type", content_type)}

    def __setitem__(self, name: str, value: str) -> None:
        self._headers[name.lower()] = (name, str(value))

    def __getitem__(self, name: str) -> str:
        return self._headers[name.lower()][1]

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._headers

    def get(self, name: str, default: str | None = None) -> str | None:
        found = self._headers.get(name.lower())
        return found[1] if found is not None else default

    def setdefault(self, name: str, value: str) -> None:
        if name.lower() not in self._headers:
            self[name] = value

    def items(self) -> Iterator[tuple[str, str]]:
        return iter(self._headers.values())

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """The headers as the ASGI server takes them; a plain answer's Content-Length included."""
        headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in self._headers.values()]
        if self.stream is None:
            headers.append((b"content-length", str(len(self.body)).encode("ascii")))
        return headers


def json_response(data: object, *, status: int = 200) -> Response:
    """`data` as JSON (UTF-8, no ASCII escaping: the catalogue's names may be any language)."""
    return Response(json.dumps(data, ensure_ascii=False).encode(), status=status)
