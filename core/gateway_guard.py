"""Start-up checks of a gateway process: several processes need Redis to share their live
state. Pure but for the lock file: no Django.

Without REDIS_URL, every gateway process keeps its own slot counts, rate limits, token budgets
and key revocations in memory, so N processes give each student N times their limits and each
worker N times its slots. A deployment declares how many gateway processes it runs
(OCS_GATEWAY_PROCESSES); more than one without REDIS_URL refuses to start. In production a
gateway without Redis also takes an exclusive lock under OCS_VAR_DIR, so a second process
started on the same host refuses to start even if nobody declared it.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

LOCK_NAME = "gateway.lock"


def processes_problem(*, processes: int, redis_url: str | None) -> str | None:
    """Why these settings cannot run, or None."""
    if processes > 1 and not redis_url:
        return (f"OCS_GATEWAY_PROCESSES={processes} but REDIS_URL is not set: each gateway process would keep "
                "its own slot counts, rate limits and token budgets, so students would get "
                f"{processes} times their limits and workers {processes} times their slots. Set REDIS_URL "
                "(docs/deployment.md) or run one gateway process.")
    return None


def single_gateway_lock(var_dir: Path) -> IO[str]:
    """An exclusive lock held for the life of this process (keep the returned file open).
    Raises AnotherGateway if another gateway process on this host holds it."""
    path = var_dir / LOCK_NAME
    handle = open(path, "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        raise AnotherGateway(holder or "?") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


class AnotherGateway(RuntimeError):
    """Another gateway process (its pid in the message) holds the lock."""

    def __init__(self, pid: str) -> None:
        super().__init__(
            f"another gateway process (pid {pid}) already runs here without REDIS_URL: two processes would keep "
            "separate slot counts and limits. Set REDIS_URL to run several (docs/deployment.md).")
