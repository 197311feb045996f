"""Worker health from consecutive observations, with hysteresis. Pure: no I/O.

An observation is one probe of /health, or one failure seen by a real request. States the
monitor manages: starting, healthy, degraded, down. A teacher's `draining` and `disabled` are
never changed by observations.

- healthy --1 failure--> degraded --FAIL_AFTER failures in a row--> down
- starting/down/degraded --RECOVER_AFTER successes in a row--> healthy (starting needs one)
- starting stays starting while the worker answers "loading" (503): a big model loads for minutes.
- healthy/degraded/down --"loading" (503)--> starting: its process restarted and loads its model.

A worker's streak counts only observations made in the state it is in: when another hand moved it
(a restarted worker registering again as `starting`, a teacher), the streak starts over, so
failures of the process that died are never charged to the one now loading.
"""
from __future__ import annotations

from dataclasses import dataclass, field

FAIL_AFTER = 2
RECOVER_AFTER = 2
MANAGED = frozenset({"starting", "healthy", "degraded", "down"})


@dataclass(frozen=True)
class Observation:
    ok: bool
    detail: str
    loading: bool = False


@dataclass
class Streak:
    successes: int = 0
    failures: int = 0
    state: str | None = None  # the state the last observation left the worker in


@dataclass
class HealthTracker:
    fail_after: int = FAIL_AFTER
    recover_after: int = RECOVER_AFTER
    streaks: dict[int, Streak] = field(default_factory=dict)

    def observe(self, worker_id: int, state: str, observation: Observation) -> str | None:
        """Record one observation; returns the new state if the worker should change state."""
        streak = self.streaks.setdefault(worker_id, Streak())
        if streak.state is not None and streak.state != state:
            streak.successes = streak.failures = 0
        new_state = self._judge(streak, state, observation)
        streak.state = new_state or state
        return new_state

    def _judge(self, streak: Streak, state: str, observation: Observation) -> str | None:
        if observation.ok:
            streak.successes += 1
            streak.failures = 0
        else:
            streak.failures += 1
            streak.successes = 0
        if state not in MANAGED:
            return None
        if observation.ok:
            needed = 1 if state == "starting" else self.recover_after
            if state != "healthy" and streak.successes >= needed:
                return "healthy"
            return None
        if observation.loading:
            # llama-server answers 503 only while it loads a model: a worker that was serving has
            # restarted (outside any agent's view). Not a failure to count: it is starting again.
            return None if state == "starting" else "starting"
        if streak.failures >= self.fail_after and state != "down":
            return "down"
        if state == "healthy":
            return "degraded"
        return None

    def forget(self, keep: set[int]) -> None:
        for worker_id in set(self.streaks) - keep:
            del self.streaks[worker_id]
