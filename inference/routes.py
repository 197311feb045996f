"""The public API's routes (/v1/* and Copilot's /ollama/<key>/*), served by the lean path
(core/lean_asgi.py, mounted in ocsweb/asgi.py): the same paths, methods and answers the API has
always had (docs/api.md), and the chat page's own route (inference/chat_page.py). A path under /v1/ or /ollama/<key>/ that names no route is answered
404 in OpenAI's envelope, counted and logged like any request."""
from __future__ import annotations

from core.api_http import Request, Response
from core.lean_asgi import Routes
from core.redact import redact
from inference import pipeline
from inference import views as api
from inference.chat_page import CHAT_ROUTE
from inference.protocols import anthropic, openai_chat

KEY = r"(?P<key>[^/]+)"

ROUTES = Routes(
    {
        "/v1/models": api.models_list,
        "/v1/openapi.json": api.openapi,
        "/v1/chat/completions": api.chat_completions,
        "/v1/completions": api.completions,
        "/v1/responses": api.responses_create,
        "/v1/messages": api.messages,
        "/v1/messages/count_tokens": api.count_tokens,
        CHAT_ROUTE: api.chat_page_completions,
    },
    [
        (rf"/ollama/{KEY}/api/version", api.ollama_version),
        (rf"/ollama/{KEY}/api/tags", api.ollama_tags),
        (rf"/ollama/{KEY}/api/show", api.ollama_show),
        (rf"/ollama/{KEY}/v1/chat/completions", api.ollama_chat_completions),
        (rf"/ollama/{KEY}/v1/models", api.ollama_models_list),
        (rf"/ollama/{KEY}/(?P<rest>.*)", api.not_found),
        (r"/v1/(?P<rest>.*)", api.not_found),
    ],
)


def unhandled(request: Request, exc: Exception) -> Response:
    """A handler's bug: logged (the path redacted, its traceback too: core/redact.py's filter),
    answered 500 in the client's envelope."""
    protocol = anthropic.PROTOCOL if request.path.startswith("/v1/messages") else openai_chat.PROTOCOL
    response, _ = pipeline.failure_response(protocol, exc, path=redact(request.path))
    response["X-Content-Type-Options"] = "nosniff"
    return response
