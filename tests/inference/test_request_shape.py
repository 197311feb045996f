"""What the request log keeps of a request besides its text: the id the client gets back in
`x-request-id`, and the shape (tools, system text, turns, conversation) the lessons' editor step reads."""
from __future__ import annotations

from core.api_http import Response
from inference.pipeline import _headers
from inference.protocols.base import Shape
from inference.request_context import RequestContext


def test_every_record_has_its_own_id_and_the_response_carries_it() -> None:
    first, second = RequestContext(client="openai", path="/v1/chat/completions"), RequestContext(client="openai", path="/")
    assert len(first.request_id) == 32 and first.request_id != second.request_id
    response = Response()
    _headers(response, first)
    assert response["X-Request-Id"] == first.request_id


def test_the_row_keeps_the_shape_and_never_the_text() -> None:
    request_ctx = RequestContext(client="anthropic", path="/v1/messages")
    request_ctx.shape = Shape(tools=24, system_chars=5_749, turns=70_000)
    row = request_ctx.row(status=200, error_code="")
    assert row["request_id"] == request_ctx.request_id
    assert (row["tools_n"], row["system_chars"], row["turns"], row["conversation"]) == (24, 5_749, 32_767, "")
