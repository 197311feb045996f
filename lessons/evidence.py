"""The records that prove a hands-on step, one rule per step kind. Reads only.

Every rule looks at the person's *own* records: a request counts only if it was made with a
key that belongs to them (RequestLog.key's owner) and was logged under them, so a classmate's
request never completes another student's step.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q, QuerySet

from core.dates import moment_text
from inference.models import RequestLog
from lessons.editor_clients import EDITOR_LABELS, EditorKind, Seen, Verdict, editor_kind, session_turns
from lessons.models import FleetSighting, WorkerPrediction
from lessons.ttft_check import TOLERANCE_RULE, ttft_fits


@dataclass(frozen=True)
class Evidence:
    description: str
    request_log_id: int | None = None


def own_requests(user_id: int) -> QuerySet[RequestLog]:
    """Requests logged under `user_id` and made with one of their own keys."""
    return RequestLog.objects.filter(user_id=user_id, key__user_id=user_id)


def served(rows: QuerySet[RequestLog]) -> QuerySet[RequestLog]:
    """Answered by a worker with 200 and no error after it (a stream that died keeps 200 + a code)."""
    return rows.filter(status=200, error_code="").exclude(worker_name="")


def editor_requests(rows: QuerySet[RequestLog], limit: int = 200) -> list[tuple[RequestLog, EditorKind]]:
    """Rows sent by Copilot or Claude Code (lessons/editor_clients.py decides), newest first."""
    maybe = rows.filter(Q(client="ollama") | Q(tool__in=["copilot", "claude-code"])
                        | Q(user_agent__icontains="copilot") | Q(user_agent__icontains="claude"))
    found: list[tuple[RequestLog, EditorKind]] = []
    for row in maybe.order_by("-at")[:limit]:
        kind = editor_kind(client=row.client, user_agent=row.user_agent, path=row.path, tool=row.tool)
        if kind is not None:
            found.append((row, kind))
    return found


def editor_verdict(user_id: int) -> Verdict:
    """The editor step's rule (lessons/editor_clients.py) over the person's served requests."""
    seen = [Seen(request_id=row.id, kind=kind, conversation=row.conversation, tools_n=row.tools_n,
                 system_chars=row.system_chars, turns=row.turns)
            for row, kind in editor_requests(served(own_requests(user_id)), limit=200)]
    return session_turns(seen)


def editor_request_evidence(user_id: int) -> Evidence | None:
    verdict = editor_verdict(user_id)
    if not verdict.passed or verdict.kind is None or verdict.request_id is None:
        return None
    row = RequestLog.objects.get(id=verdict.request_id)
    return Evidence(f"{EDITOR_LABELS[verdict.kind]} at work: {verdict.requests} requests of one session, the latest "
                    f"at {moment_text(row.at)} with {row.tools_n} tools and a {row.system_chars:,}-character "
                    f"system prompt, model {row.model}, served by {row.worker_name}", request_log_id=row.id)


def fleet_watch_evidence(user_id: int) -> Evidence | None:
    sighting = FleetSighting.objects.filter(user_id=user_id).order_by("-at").first()
    if sighting is None:
        return None
    return Evidence(f"the fleet view saw {sighting.in_flight} of your requests in flight at "
                    f"{moment_text(sighting.at, seconds=True)}")


def ttft_evidence(user_id: int, reported_ms: float, request_id: str) -> tuple[Evidence | None, str]:
    """(evidence, why not). The quoted request must be the person's own, streamed and served."""
    row = served(own_requests(user_id)).filter(request_id=request_id, stream=True).first()
    if row is None:
        return None, (f"None of your served streamed requests has the id {request_id}. Copy the x-request-id "
                      "header of a streamed request you made with your own key.")
    if row.ttft_ms is None:
        return None, f"Request {request_id} has no logged TTFT (it produced no first byte)."
    if not ttft_fits(reported_ms, row.ttft_ms):
        return None, (f"{reported_ms:.0f} ms does not fit request {request_id}: a TTFT measured on your machine "
                      f"is {TOLERANCE_RULE}. Time the request again, from sending it to the first content chunk.")
    return Evidence(f"you measured {reported_ms:.0f} ms for request {request_id}; the gateway logged "
                    f"{row.ttft_ms} ms for it", request_log_id=row.id), ""


# The three chat dialects lesson 5 asks for, by the route the request log keeps (count_tokens is not a chat).
DIALECT_ROUTES = (("OpenAI chat", "openai", "/v1/chat/completions"), ("Anthropic Messages", "anthropic", "/v1/messages"),
                  ("OpenAI Responses", "responses", "/v1/responses"))


def dialects_evidence(user_id: int) -> tuple[Evidence | None, str]:
    """One served request in each chat dialect with the person's own key. (evidence, what is missing)."""
    rows = served(own_requests(user_id))
    found: list[RequestLog] = []
    missing: list[str] = []
    for label, client, path in DIALECT_ROUTES:
        row = rows.filter(client=client, path=path).order_by("-at").first()
        if row is None:
            missing.append(f"{label} ({path})")
        else:
            found.append(row)
    if missing:
        return None, ("Not yet served with your key: " + ", ".join(missing) + ". The recipes are in this lesson.")
    return Evidence("one request in each dialect, served with your key: " + "; ".join(
        f"{row.path} #{row.request_id[:8]} by {row.worker_name}" for row in found), request_log_id=found[-1].id), ""


def trace_evidence(user_id: int, request_id: str) -> tuple[Evidence | None, str]:
    """The person's own served request with this id, hop by hop as the request log recorded it."""
    row = served(own_requests(user_id)).filter(request_id=request_id).first()
    if row is None:
        return None, (f"None of your served requests has the id {request_id}. Send one with your key and copy its "
                      "x-request-id header.")
    hops = (f"arrived {moment_text(row.at, seconds=True)} on {row.path} as {row.client}, key checked; "
            f"waited {row.queue_wait_ms} ms for a slot; "
            f"worker {row.worker_name} chosen ({row.route_reason or 'the only candidate'})"
            + (f" after {row.retries} failed worker(s)" if row.retries else "")
            + (f"; first byte after {row.ttft_ms} ms" if row.ttft_ms is not None else "")
            + f"; {row.prompt_tokens} tokens in ({row.cached_tokens} cached), {row.completion_tokens} out; "
            f"ended after {row.total_ms} ms with {row.status}")
    return Evidence(hops, request_log_id=row.id), ""


def prediction_evidence(user_id: int) -> tuple[Evidence | None, str]:
    """The person's latest worker prediction against the worker of their first served request after it."""
    prediction = WorkerPrediction.objects.filter(user_id=user_id).order_by("-at").first()
    if prediction is None:
        return None, "Predict first: pick the worker you expect your next request to get, and save the prediction."
    row = served(own_requests(user_id)).filter(at__gte=prediction.at).order_by("at").first()
    if row is None:
        return None, (f"You predicted {prediction.worker_name}. Now send one request with your key, then check "
                      "again.")
    why = row.route_reason or "the only candidate"
    if row.worker_name != prediction.worker_name:
        return None, (f"You predicted {prediction.worker_name}; request #{row.request_id[:8]} went to "
                      f"{row.worker_name} ({why}). Look at the live panel again — slots busy, the pool, what the "
                      "worker serves — and predict again.")
    return Evidence(f"you predicted {prediction.worker_name} and request #{row.request_id[:8]} went there ({why})",
                    request_log_id=row.id), ""
