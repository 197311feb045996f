"""The machine's noise beside a check, read from what scripts/validate_planner.sh leaves in a
configuration's directory. Pure parsers over text, and one reader of the directory.

- `calibration-load.txt` (else `calibration.txt`), calibrate_worker's print-out: the step-time
  jitter (`jitter  0.6% (relative SD ...)`), the load factor (`under a class  x1.042`) and the
  prompt evaluation speed (ms per uncached token: how fast the machine was that hour);
- `drift.txt`: each replay's drift probe against the bench's same point (`(ratio 1.00)`);
- `steps-N.txt` (step_timing): each replay's speed against the calibration (its last line).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

JITTER = re.compile(r"^\s*jitter\s+([0-9.]+)%", re.M)
LOAD_FACTOR = re.compile(r"^\s*under a class\s+x([0-9.]+)", re.M)
PROMPT_MS = re.compile(r"prompt evaluation\s+([0-9.]+) ms per uncached token")
DRIFT = re.compile(r"\(ratio ([0-9.]+)\)")
SPEED = re.compile(r"against the calibration: x([0-9.]+)")


def calibration_noise(text: str) -> dict[str, float]:
    """jitter (a fraction), load_factor and prompt_ms_per_token from calibrate_worker's print-out."""
    found: dict[str, float] = {}
    if match := JITTER.search(text):
        found["jitter"] = round(float(match.group(1)) / 100, 6)
    if match := LOAD_FACTOR.search(text):
        found["load_factor"] = float(match.group(1))
    if match := PROMPT_MS.search(text):
        found["prompt_ms_per_token"] = float(match.group(1))
    return found


def drift_ratios(text: str) -> list[float]:
    return [float(value) for value in DRIFT.findall(text)]


def replay_speed(text: str) -> float | None:
    """A replay's speed against the calibration (step_timing's last line), None if it has none."""
    matches = SPEED.findall(text)
    return float(matches[-1]) if matches else None


def _number(path: Path) -> int:
    digits = re.findall(r"\d+", path.stem)
    return int(digits[-1]) if digits else 0


def read_noise(directory: Path) -> dict[str, Any]:
    """The noise measured in one configuration's directory of a validation run ({} if none)."""
    noise: dict[str, Any] = {}
    for name in ("calibration-load.txt", "calibration.txt"):
        if (directory / name).is_file():
            for key, value in calibration_noise((directory / name).read_text()).items():
                noise.setdefault(key, value)
    if (directory / "drift.txt").is_file() and (ratios := drift_ratios((directory / "drift.txt").read_text())):
        noise["drift"] = ratios
    speeds = [speed for path in sorted(directory.glob("steps-[0-9]*.txt"), key=_number)
              if (speed := replay_speed(path.read_text())) is not None]
    if speeds:
        noise["speed"] = speeds
    return noise
