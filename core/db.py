"""Database access from the async hot path.

The API's handler sends no request signals (ocsweb.asgi), so Django's per-request
close_old_connections never runs for it. The few reads the hot path makes (cache misses) run in
pool threads via sync_to_async(thread_sensitive=False); each such read first drops its thread's
connection if it is broken or past CONN_MAX_AGE, so a database restart (an RDS failover)
costs one retry, not a thread stuck with a dead connection.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

from django.db import close_old_connections

P = ParamSpec("P")
R = TypeVar("R")


def fresh_connection(read: Callable[P, R]) -> Callable[P, R]:
    @wraps(read)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        return read(*args, **kwargs)

    return wrapper
