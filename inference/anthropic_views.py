"""Anthropic Messages for Claude Code: POST /v1/messages (any query string, e.g. ?beta=true) and
POST /v1/messages/count_tokens. Auth by x-api-key or Authorization: Bearer; anthropic-version
and every anthropic-beta are accepted (unknown betas ignored). Errors in Anthropic's envelope."""
from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from fleet.scheduler import conversation_key, serves_model
from fleet.selectors import fleet_snapshot, models_for_pool, usable_pool_ids
from inference import dispatch
from inference.anthropic import StreamTranslator, forces_tool, from_openai, to_openai, validate_count_tokens, \
    validate_messages
from inference.admission import Want
from inference.auth import authenticate, key_from_headers
from inference.dialects import ANTHROPIC, anthropic_body, anthropic_status
from inference.errors import ApiError
from inference.forced_tools import StreamConverter, convert_response, plan_forced_tool, rewrite_request
from inference.validation import ParsedRequest
from inference.views import CHAT_PATH, api_view, forward, note_request

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


def anthropic_error_response(error: ApiError) -> HttpResponse:
    response = HttpResponse(json.dumps(anthropic_body(error)), status=anthropic_status(error),
                            content_type="application/json")
    for name, value in error.headers.items():
        response[name] = value
    return response


async def resolve_model(model: str, pool_id: int) -> str:
    """Claude Code's built-in agents ask for claude-* models by name: unknown ones get the default."""
    snapshot = await fleet_snapshot(pool_id=pool_id)
    if serves_model(snapshot.workers, model_id=model, pool_ids=usable_pool_ids(snapshot, pool_id)):
        return model
    if model.startswith("claude-"):
        default = settings.OCS["ANTHROPIC_DEFAULT_MODEL"]
        if default:
            return default
        served = models_for_pool(snapshot, pool_id)
        if served:
            return served[0].public_id
    return model


def _with_model(parsed: ParsedRequest, model: str) -> ParsedRequest:
    return ParsedRequest(model=model, stream=parsed.stream, body={**parsed.body, "model": model}, size=parsed.size)


@api_view("POST", render=anthropic_error_response, client="anthropic")
async def messages(request: HttpRequest) -> HttpResponseBase:
    identity = await authenticate(key_from_headers(request.headers))
    asked = validate_messages(request.body)
    parsed = _with_model(asked, await resolve_model(asked.model, identity.pool_id))
    record = note_request(request, identity, model=parsed.model, stream=parsed.stream)
    want = Want(
        user_id=identity.user_id, pool_id=identity.pool_id, model_id=parsed.model,
        conversation=conversation_key(user_id=identity.user_id, model_id=parsed.model,
                                      messages=[parsed.body.get("system"), *parsed.body["messages"]]),
    )
    if not forces_tool(parsed.body):
        return await forward(parsed, path=MESSAGES_PATH, want=want, identity=identity, record=record, dialect=ANTHROPIC)
    plan = plan_forced_tool(to_openai(parsed.body))
    assert plan is not None  # forces_tool() said a tool is forced
    return await forward(
        parsed, path=CHAT_PATH, want=want, identity=identity, record=record, dialect=ANTHROPIC,
        rewrite=lambda body: rewrite_request(to_openai(body), plan),
        convert=lambda data: from_openai(convert_response(data, plan), model=asked.model),
        stream_transform=lambda: _chain(StreamConverter(plan).feed, StreamTranslator(model=asked.model).feed),
    )


def _chain(first, second):  # noqa: ANN001, ANN202
    def feed(raw: bytes):  # noqa: ANN202
        for converted in first(raw):
            yield from second(converted)

    return feed


@api_view("POST", render=anthropic_error_response, client="anthropic")
async def count_tokens(request: HttpRequest) -> HttpResponseBase:
    identity = await authenticate(key_from_headers(request.headers))
    asked = validate_count_tokens(request.body)
    parsed = _with_model(asked, await resolve_model(asked.model, identity.pool_id))
    note_request(request, identity, model=parsed.model)
    await dispatch.ensure_model_visible(model_id=parsed.model, pool_id=identity.pool_id)
    want = Want(user_id=identity.user_id, pool_id=identity.pool_id, model_id=parsed.model)
    status, content = await dispatch.forward_light(path=COUNT_TOKENS_PATH, body=parsed.body, want=want)
    return HttpResponse(content, status=status, content_type="application/json")
