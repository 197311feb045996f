"""Workers' keys: each llama-server answers only requests that carry its own key. Pure: no Django.

The control plane makes a worker's key (`ocswk-<prefix>-<secret>`, core/keys.py) when the worker
registers, and a new one each time it registers again; the rig agent receives it in the
registration's answer, writes it to a file only its user can read and launches llama-server with
`--api-key-file` (never `--api-key`: argv is readable by every user of the rig, /proc/<pid>/cmdline).
The gateway, the health monitor, verify_path and bench send it as `Authorization: Bearer`.

With a key, the pinned llama-server refuses every route with 401 except `/health` and
`/v1/health` (which say only whether it is up), docs/fleet.md.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from core.keys import WORKER_SCHEME, generate_key
from fleet.scheduler import JSON_HEADERS


def worker_key_new() -> str:
    return generate_key(WORKER_SCHEME).raw


def worker_key_headers(api_key: str) -> dict[str, str]:
    """The headers a request to the worker carries (none for a worker registered without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def worker_request_headers(api_key: str) -> Mapping[str, str]:
    """The gateway's headers for a JSON request to the worker, built once per fleet snapshot."""
    return {**JSON_HEADERS, **worker_key_headers(api_key)} if api_key else JSON_HEADERS


def worker_key_write(path: Path, api_key: str) -> Path:
    """Write the key as llama-server's --api-key-file reads it (one key, one line), readable by
    this user only (0600) from the moment the file exists, replacing any previous key at once."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(path.name + ".new")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        os.fchmod(file.fileno(), 0o600)  # an older file of that name may have had other bits
        file.write(api_key + "\n")
    os.replace(partial, path)
    return path
