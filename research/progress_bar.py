"""A plain terminal progress bar (no dependency): one line redrawn with a carriage return."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, label: str, *, stream: TextIO | None = None, width: int = 30) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.started = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        filled = int(self.width * done / total) if total else self.width
        elapsed = time.monotonic() - self.started
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} "
                          f"requests {elapsed:5.1f} s")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
