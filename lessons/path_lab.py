"""Lesson 2's path lab: the site runs `verify_path` for the student against this deployment (as
their own requests, with a key made for the run), shows every check it made, and asks which of
them the control plane made over the private network and why a worker must refuse a laptop.
Pure: no Django.

The hops are `research.path_verify`'s own names. A check is private when the control plane
reached a worker's address itself (NetBird on a rig, loopback on the demo); a check sent to the
public address is public even when the gateway then forwards it to a worker. The labels say what
was checked, never where: telling the two apart is the exercise. Workers' addresses are never
shown to students (lesson 2's panel neither), so the stored results carry a placeholder instead.
"""
from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MIN_EXPLANATION_CHARS = 40
# What a laptop reaching a worker would get around, in a student's words: the gateway or the key
# check, and one of the things the gateway enforces.
_GUARDS = ("gateway", "key", "auth")
_ENFORCED = ("limit", "quota", "budget", "fair", "log", "usage", "pause", "revok", "bypass", "around", "skip",
             "record", "count", "queue", "slot")


@dataclass(frozen=True)
class Hop:
    id: str  # posted by the form
    label: str  # shown, without saying which side it is on
    private: bool


# research.path_verify's hop names -> what the lab shows and asks. Hops it reports only when
# something is wrong with the control plane itself (its database, its live state) are not asked.
HOPS: Mapping[str, Hop] = {
    "public TLS": Hop("tls", "the TLS handshake", False),
    "public": Hop("probes", "the health probes /healthz and /readyz", False),
    "key": Hop("key", "your key, on /v1/models", False),
    "worker /health (private)": Hop("worker-health", "each worker's /health", True),
    "worker key (private)": Hop("worker-fence", "each worker, asked for /slots without its key", True),
    "worker stream (private)": Hop("worker-stream", "one streamed answer straight from each worker", True),
    "gateway -> worker stream": Hop("via-gateway", "one streamed answer per worker, through the gateway", False),
    "ollama": Hop("ollama", "Copilot's Ollama discovery routes", False),
    "anthropic": Hop("anthropic", "the Anthropic Messages route", False),
}


class LabInputError(ValueError):
    """The student's answer cannot be judged yet; the message says what to give."""


def hops_asked(results: Iterable[Mapping[str, object]]) -> list[Hop]:
    """The hops of one run that the lab asks about, each once, in the run's order."""
    seen: dict[str, Hop] = {}
    for result in results:
        hop = HOPS.get(str(result.get("hop", "")))
        if hop is not None:
            seen.setdefault(hop.id, hop)
    return list(seen.values())


def shown_order(hops: Sequence[Hop], *, user_id: int) -> list[Hop]:
    """The hops in this student's own order (the same on every visit), as the quizzes do."""
    order = list(hops)
    seed = int.from_bytes(hashlib.sha256(f"{user_id}:path-lab".encode()).digest()[:8], "big")
    random.Random(seed).shuffle(order)
    return order


def grade(hops: Sequence[Hop], picked: Iterable[str]) -> tuple[bool, str]:
    """(right, what to say). Right when the picked ids are exactly the private hops of the run."""
    chosen = set(picked)
    private = {hop.id for hop in hops if hop.private}
    if not private:
        return False, ("This run reached no worker itself (no registered worker answered), so there is nothing "
                       "private to name: run the check again once a worker is healthy.")
    if chosen == private:
        return True, f"the {len(private)} checks made at a worker's own address are the private ones"
    wrong = [hop.label for hop in hops if hop.id in chosen and not hop.private]
    missed = sum(1 for hop in hops if hop.private and hop.id not in chosen)
    parts = []
    if wrong:
        parts.append("these went to this site's public address: " + "; ".join(wrong))
    if missed:
        parts.append(f"{missed} private check{'s' if missed > 1 else ''} not ticked")
    return False, ". ".join(parts).capitalize() + ". Look at the address each check went to."


def check_explanation(text: str) -> str:
    """The student's reason a worker must refuse a laptop: the gateway or key and what it enforces."""
    text = " ".join(text.split())
    lowered = text.lower()
    if len(text) < MIN_EXPLANATION_CHARS or not any(word in lowered for word in _GUARDS) \
            or not any(word in lowered for word in _ENFORCED):
        raise LabInputError(f"Say why a worker must refuse a laptop that reaches it (at least "
                            f"{MIN_EXPLANATION_CHARS} characters): which part of the system would that request "
                            "skip, and what does that part enforce for the class?")
    return text[:1000]


WORKER_ADDRESS = "[the worker's own address]"


def hide_addresses(results: Iterable[Mapping[str, object]], base_urls: Iterable[str]) -> list[dict[str, object]]:
    """The results with every worker's base URL (and its host:port) replaced by a placeholder.
    A bare host is left alone: on the demo the workers and the site share 127.0.0.1."""
    needles: list[str] = []
    for url in base_urls:
        url = url.rstrip("/")
        if url:
            needles.append(url)
            netloc = url.split("://", 1)[-1].split("/", 1)[0]
            if ":" in netloc:
                needles.append(netloc)
    needles.sort(key=len, reverse=True)  # the whole URL before its host:port
    hidden = []
    for result in results:
        row = dict(result)
        for field in ("target", "detail"):
            text = str(row.get(field) or "")
            for needle in needles:
                text = text.replace(needle, WORKER_ADDRESS)
            row[field] = text
        hidden.append(row)
    return hidden


def outcome_counts(results: Iterable[Mapping[str, object]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for result in results:
        outcome = str(result.get("outcome", ""))
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def open_workers(results: Iterable[Mapping[str, object]]) -> list[str]:
    """Workers that answered without their key: anyone who reaches them can use them."""
    return [str(result.get("target", "")) for result in results
            if result.get("hop") == "worker key (private)" and result.get("outcome") != "PASS"]
