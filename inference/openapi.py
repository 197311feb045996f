"""The public API's OpenAPI 3.1 document, served at /v1/openapi.json. Pure: no Django.

It states what the gateway itself checks (inference/protocols/) and what
it answers; read with a key, its `model` fields name the models that key may use, read without
one it names none; the bodies of successful answers are the worker's, in the OpenAI or Anthropic format.
The schemathesis test drives the live gateway from this document and finds no 5xx.
"""
from __future__ import annotations

from typing import Any

from inference.protocols.openai_chat import CHAT_ROLES
from inference.validation import MAX_TOKENS_LIMIT

OPENAI_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type"], "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
}
ANTHROPIC_ERROR = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {"type": {"const": "error"}, "error": {"type": "object", "required": ["type", "message"],
                                                         "properties": {"type": {"type": "string"},
                                                                        "message": {"type": "string"}}}},
}
TEXT_PART = {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}, "text": {"type": "string"}}}
FUNCTION_TOOL = {
    "type": "object", "required": ["type", "function"],
    "properties": {"type": {"const": "function"}, "function": {
        "type": "object", "required": ["name"],
        "properties": {"name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
                       "description": {"type": "string"}, "parameters": {"type": "object"}}}},
}
CHAT_MESSAGE = {
    "type": "object", "required": ["role", "content"],
    "properties": {
        "role": {"enum": sorted(CHAT_ROLES - {"function", "tool"})},
        "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": TEXT_PART}]},
        "name": {"type": "string"},
    },
}
SAMPLING = {
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS_LIMIT},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "stream": {"type": "boolean"},
}
CHAT_REQUEST = {
    "type": "object", "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "messages": {"type": "array", "minItems": 1, "items": CHAT_MESSAGE},
        **SAMPLING,
        "max_completion_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS_LIMIT},
        "n": {"const": 1},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "tools": {"type": "array", "items": FUNCTION_TOOL},
        "tool_choice": {"oneOf": [{"enum": ["auto", "none", "required"]}, {
            "type": "object", "required": ["type", "function"],
            "properties": {"type": {"const": "function"},
                           "function": {"type": "object", "required": ["name"],
                                        "properties": {"name": {"type": "string"}}}}}]},
        "response_format": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}},
    },
}
COMPLETION_REQUEST = {
    "type": "object", "required": ["model", "prompt"],
    "properties": {"model": {"type": "string", "minLength": 1},
                   "prompt": {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1,
                                                             "items": {"type": "string"}}]},
                   **SAMPLING},
}
ANTHROPIC_MESSAGE = {
    "type": "object", "required": ["role", "content"],
    "properties": {"role": {"enum": ["user", "assistant", "system"]},
                   "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": TEXT_PART}]}},
}
ANTHROPIC_TOOL = {"type": "object", "required": ["name", "input_schema"],
                  "properties": {"name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
                                 "description": {"type": "string"}, "input_schema": {"type": "object"}}}
MESSAGES_REQUEST = {
    "type": "object", "required": ["model", "max_tokens", "messages"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS_LIMIT},
        "messages": {"type": "array", "minItems": 1, "items": ANTHROPIC_MESSAGE},
        "system": {"oneOf": [{"type": "string"}, {"type": "array", "items": TEXT_PART}]},
        "stream": {"type": "boolean"},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        "tools": {"type": "array", "items": ANTHROPIC_TOOL},
        "tool_choice": {"type": "object", "required": ["type"],
                        "properties": {"type": {"enum": ["auto", "any", "none"]}}},
    },
}
RESPONSES_ITEM = {
    "type": "object",
    "properties": {"type": {"enum": ["message", "function_call", "function_call_output", "reasoning"]},
                   "role": {"enum": ["user", "assistant", "system", "developer"]},
                   "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": TEXT_PART}]},
                   "call_id": {"type": "string"}, "name": {"type": "string"}, "arguments": {"type": "string"},
                   "output": {"type": "string"}},
}
RESPONSES_REQUEST = {
    "type": "object", "required": ["model", "input"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "input": {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": RESPONSES_ITEM}]},
        "instructions": {"type": "string"},
        "max_output_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS_LIMIT},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "stream": {"type": "boolean"},
        "store": {"type": "boolean"},
        "tools": {"type": "array", "items": {"type": "object", "required": ["type", "name"], "properties": {
            "type": {"const": "function"}, "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
            "description": {"type": "string"}, "parameters": {"type": "object"}}}},
        "tool_choice": {"oneOf": [{"enum": ["auto", "none", "required"]}, {
            "type": "object", "required": ["type", "name"],
            "properties": {"type": {"const": "function"}, "name": {"type": "string"}}}]},
    },
}
COUNT_TOKENS_REQUEST = {
    "type": "object", "required": ["model", "messages"],
    "properties": {"model": {"type": "string", "minLength": 1},
                   "messages": {"type": "array", "minItems": 1, "items": ANTHROPIC_MESSAGE},
                   "system": {"type": "string"}},
}


def _errors(schema: dict[str, Any], *statuses: str) -> dict[str, Any]:
    return {s: {"description": "Refused; see error.message", "content": {"application/json": {"schema": schema}}}
            for s in statuses}


def _post(summary: str, request: dict[str, Any], error: dict[str, Any], *, streams: bool = True,
          security: list[dict[str, list[str]]] | None = None) -> dict[str, Any]:
    ok: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    if streams:
        ok["text/event-stream"] = {"schema": {"type": "string"}}
    operation: dict[str, Any] = {
        "summary": summary,
        "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
        "responses": {"200": {"description": "The worker's answer", "content": ok},
                      **_errors(error, "400", "401", "404", "413", "429", "502", "503")},
    }
    if security is not None:
        operation["security"] = security
    return operation


def _with_models(schema: dict[str, Any], model_ids: list[str]) -> dict[str, Any]:
    """The request schema with `model` naming these models (any string if none)."""
    if not model_ids:
        return schema
    return {**schema, "properties": {**schema["properties"], "model": {"enum": model_ids}}}


def openapi_document(model_ids: list[str] | None = None) -> dict[str, Any]:
    """`model_ids`: the models the reader's key may use, named in every request's `model` field;
    none for a reader without a key (the document then names no model at all)."""
    ids = sorted(model_ids or [])
    anthropic_security: list[dict[str, list[str]]] = [{"apiKeyHeader": []}, {"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "OCS Intelligence", "version": "1",
                 "description": "The school's AI endpoint: OpenAI- and Anthropic-compatible."},
        "servers": [{"url": "/"}],
        "components": {"securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "description": "A personal key: ocs-<prefix>-<secret>"},
            "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "x-api-key"},
        }},
        "security": [{"bearer": []}],
        "paths": {
            "/v1/models": {"get": {"summary": "Models this key may use", "responses": {
                "200": {"description": "OpenAI model list", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["object", "data"], "properties": {
                        "object": {"const": "list"}, "data": {"type": "array", "items": {
                            "type": "object", "required": ["id", "object"], "properties": {
                                "id": {"type": "string"}, "object": {"const": "model"},
                                "context_length": {"type": "integer"}}}}}}}}},
                **_errors(OPENAI_ERROR, "401")}}},
            "/v1/chat/completions": {"post": _post("Chat completion (OpenAI)", _with_models(CHAT_REQUEST, ids),
                                                   OPENAI_ERROR)},
            "/v1/completions": {"post": _post("Text completion (OpenAI)", _with_models(COMPLETION_REQUEST, ids),
                                              OPENAI_ERROR)},
            "/v1/responses": {"post": _post("Response (OpenAI Responses API; the gateway stores none)",
                                            _with_models(RESPONSES_REQUEST, ids), OPENAI_ERROR)},
            "/v1/messages": {"post": _post("Messages (Anthropic)", _with_models(MESSAGES_REQUEST, ids),
                                           ANTHROPIC_ERROR, security=anthropic_security)},
            "/v1/messages/count_tokens": {"post": _post("Count input tokens (Anthropic)",
                                                        _with_models(COUNT_TOKENS_REQUEST, ids), ANTHROPIC_ERROR,
                                                        streams=False, security=anthropic_security)},
        },
    }
