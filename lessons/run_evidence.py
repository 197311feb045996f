"""What a benchmark run measured, for the burndown's rig rows. Pure: no Django.

A run counts for a rig deliverable by what it measured, never by its scenario's name:
- `rig`: it measured a worker that lives on a rig, and GPU samples were recorded during it from
  GPUs whose ids are real NVML ids (`GPU-` and a 36-character UUID, as nvmlDeviceGetUUID returns);
- `rehearsal`: a rig worker with GPU samples, but the GPUs' ids are not NVML's (a rehearsal rig's
  fake pynvml, fleet/agent/rehearsal.py, or tests), or the run was measured on a rig its agent
  declared a rehearsal (`telemetry = "rehearsal"`), whatever ids it sent: the row shows
  "rehearsed", never "done";
- `cpu`: anything else — a local llama-server, the CPU stand-in scenarios (`allocation` splits CPU
  threads, not GPUs), a worker with no rig, or a run with no GPU samples.
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Literal
from urllib.parse import urlsplit

MeasuredOn = Literal["rig", "rehearsal", "cpu"]
NVML_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)


def measured_on(*, rig: str, sampled_gpu_uuids: Iterable[str], rehearsal: bool = False) -> MeasuredOn:
    """`rig`: the measured worker's rig name ("" for none); `sampled_gpu_uuids`: the ids of the GPUs
    the run's samples came from ("" where the rig reported none); `rehearsal`: the run was taken on
    a rig marked a rehearsal (the run's `launch.rehearsal`)."""
    uuids = list(sampled_gpu_uuids)
    if not rig or not uuids:
        return "cpu"
    if rehearsal:
        return "rehearsal"
    return "rig" if all(NVML_UUID.match(uuid) for uuid in uuids) else "rehearsal"


def is_public_https(url: str) -> bool:
    """An https:// address whose host is a name or public IP: not localhost, loopback, a private
    or NetBird (100.64.0.0/10) range, nor a link-local one. The one-machine demo never passes."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme != "https" or not host or host == "localhost" or host.endswith((".localhost", ".local")):
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." in host  # a DNS name with a dot
    return address.is_global
