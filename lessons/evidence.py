"""The records that prove a hands-on step, one rule per step kind. Reads only.

Every rule looks at the person's *own* records: a request counts only if it was made with a
key that belongs to them (RequestLog.key's owner) and was logged under them, so a classmate's
request never completes another student's step.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone

from inference.models import RequestLog
from lessons.editor_clients import EDITOR_LABELS, editor_kind
from lessons.models import FleetSighting
from lessons.ttft_check import matching_ttft

RECENT_TTFT_WINDOW = timedelta(hours=24)


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


def editor_requests(rows: QuerySet[RequestLog], limit: int = 200) -> list[tuple[RequestLog, str]]:
    """Rows sent by Copilot or Claude Code (lessons/editor_clients.py decides), newest first."""
    maybe = rows.filter(Q(client="ollama") | Q(tool__in=["copilot", "claude-code"])
                        | Q(user_agent__icontains="copilot") | Q(user_agent__icontains="claude"))
    found: list[tuple[RequestLog, str]] = []
    for row in maybe.order_by("-at")[:limit]:
        kind = editor_kind(client=row.client, user_agent=row.user_agent, path=row.path, tool=row.tool)
        if kind is not None:
            found.append((row, kind))
    return found


def editor_request_evidence(user_id: int) -> Evidence | None:
    found = editor_requests(served(own_requests(user_id)), limit=50)
    if not found:
        return None
    row, kind = found[0]
    return Evidence(f"{EDITOR_LABELS[kind]} request at {row.at:%Y-%m-%d %H:%M} UTC, model {row.model}, "
                    f"served by {row.worker_name}", request_log_id=row.id)


def fleet_watch_evidence(user_id: int) -> Evidence | None:
    sighting = FleetSighting.objects.filter(user_id=user_id).order_by("-at").first()
    if sighting is None:
        return None
    return Evidence(f"the fleet view saw {sighting.in_flight} of your requests in flight at "
                    f"{sighting.at:%Y-%m-%d %H:%M:%S} UTC")


def ttft_evidence(user_id: int, reported_ms: float) -> Evidence | None:
    since = timezone.now() - RECENT_TTFT_WINDOW
    logged = served(own_requests(user_id)).filter(stream=True, at__gte=since, ttft_ms__isnull=False)
    pairs = [(row_id, ttft) for row_id, ttft in logged.values_list("id", "ttft_ms")[:500] if ttft is not None]
    row_id = matching_ttft(reported_ms, pairs)
    if row_id is None:
        return None
    logged_ms = dict(pairs)[row_id]
    return Evidence(f"you measured {reported_ms:.0f} ms; the gateway logged {logged_ms} ms for request #{row_id}",
                    request_log_id=row_id)
