"""A rehearsal rig's NVML: a pynvml-like object that `fleet.agent.telemetry.read_gpus` reads as
if it were the library, answering as 8 "NVIDIA GeForce GTX 1070"s (8,192 MiB) on x1 mining risers.
Pure of Django. Used when a rig config says `telemetry = "rehearsal"` (docs/rig.example.toml).

What is real and what is made up:
- Real: the agent, its workers (CPU llama-servers launched with CUDA_VISIBLE_DEVICES set to their
  cards, which a CPU build ignores), their process state, the heartbeats, everything the control
  plane does with them.
- Made up, from what each card's worker is doing: a card's utilization is its worker's CPU use
  (user + system seconds over wall seconds, per thread the worker was given) divided by its cards,
  since a layer split keeps one card of the worker busy at a time; its memory is a CUDA context
  plus the worker's resident memory shared across its cards; SM and memory clocks, temperature,
  power and the PCIe link follow that load as a Pascal card's would (idle P8 at 139/405 MHz and
  a Gen1 link; boost clocks and Gen3 under load; a temperature that lags the load by
  `HEAT_TIME_CONSTANT_S`). Nothing here measures a GPU.
- The ids are `REHEARSAL-<rig>-<index>`, never NVML's `GPU-<uuid>`, so a run measured on this rig
  is classified `rehearsal` and never counts as rig evidence (lessons/run_evidence.py).

Deterministic: the same clock readings and process readings give the same answers (the small
variations between readings come from a hash of the card and the clock's second, not a random
generator).
"""
from __future__ import annotations

import math
import os
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

GPU_NAME = "NVIDIA GeForce GTX 1070"
GPU_COUNT = 8
MEMORY_TOTAL_MIB = 8192
UUID_PREFIX = "REHEARSAL-"
CUDA_CONTEXT_MIB = 147  # what a llama-server's CUDA context holds on a Pascal card before any weights
IDLE_MEMORY_MIB = 2  # a headless card with no process on it
IDLE_SM_MHZ, BASE_SM_MHZ, BOOST_SM_MHZ = 139, 1506, 1911  # P8; the 1070's base; a cool card's top boost bin
THROTTLE_SM_MHZ = 114  # boost bins lost from a cool card to a hot one (GPU Boost 3.0)
IDLE_MEM_MHZ, LOAD_MEM_MHZ = 405, 3802  # GDDR5 at P8; at P2, where CUDA work runs
IDLE_POWER_W, LIMIT_POWER_W = 8.5, 151.0  # the reference card's power limit
AMBIENT_C, HOT_C = 31.0, 78.0  # an open mining frame's idle and fully loaded temperature
HEAT_TIME_CONSTANT_S = 40.0
BUSY_FROM = 0.01  # below this a card counts as idle (P8, link at Gen1)


@dataclass(frozen=True)
class ProcessUsage:
    """One reading of a process: CPU seconds (user + system) since it started, resident memory."""

    cpu_s: float
    rss_bytes: int


@dataclass(frozen=True)
class WorkerProcess:
    """A worker as the rehearsal sees it: its llama-server's pid (None: not running), the cards it
    was given and the CPU threads it computes with."""

    pid: int | None
    gpus: tuple[int, ...]
    threads: int


@dataclass(frozen=True)
class CardLoad:
    """What one card's worker does: `busy` 0-1 (the fraction of the time the card computes) and
    the memory it holds (MiB)."""

    busy: float
    memory_used_mib: int


def read_proc(pid: int) -> ProcessUsage | None:
    """A process's CPU seconds and resident memory from /proc (Linux); None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        statm = Path(f"/proc/{pid}/statm").read_text()
    except OSError:
        return None
    try:
        fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
        ticks = int(fields[11]) + int(fields[12])  # utime, stime (stat fields 14 and 15)
        resident_pages = int(statm.split()[1])
    except (IndexError, ValueError):
        return None
    return ProcessUsage(cpu_s=ticks / os.sysconf("SC_CLK_TCK"), rss_bytes=resident_pages * os.sysconf("SC_PAGE_SIZE"))


def card_loads(workers: Iterable[tuple[WorkerProcess, float, int]]) -> dict[int, CardLoad]:
    """Per card, the load of the worker given it. `workers`: (worker, its busy fraction 0-1, its
    resident memory in MiB). A layer split is a pipeline, so each of a worker's n cards computes
    1/n of the time its worker computes; each holds a CUDA context and 1/n of the memory."""
    loads: dict[int, CardLoad] = {}
    for worker, busy, rss_mib in workers:
        if worker.pid is None or not worker.gpus:
            continue
        share = len(worker.gpus)
        for index in worker.gpus:
            loads[index] = CardLoad(busy=min(1.0, max(0.0, busy)) / share,
                                    memory_used_mib=min(MEMORY_TOTAL_MIB, CUDA_CONTEXT_MIB + rss_mib // share))
    return loads


def _wobble(index: int, second: int, spread: int) -> int:
    """A small, repeatable variation in [-spread, spread] for card `index` at a whole second."""
    if spread <= 0:
        return 0
    return zlib.crc32(f"{index}:{second}".encode()) % (2 * spread + 1) - spread


class RehearsalNvml:
    """The part of pynvml's API that read_gpus uses, frozen at one moment: the loads and the
    cards' heat when it was made (RehearsalRig.nvml)."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, *, rig_name: str, loads: dict[int, CardLoad], heat: dict[int, float], second: int,
                 count: int = GPU_COUNT, pcie_max_gen: int = 3, pcie_max_width: int = 1) -> None:
        self.rig_name, self.loads, self.heat, self.second, self.count = rig_name, loads, heat, second, count
        self.pcie_max_gen, self.pcie_max_width = pcie_max_gen, pcie_max_width

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < self.count:
            raise IndexError(f"no rehearsal GPU {index}")
        return index

    def _busy(self, handle: int) -> float:
        load = self.loads.get(handle)
        return load.busy if load is not None else 0.0

    def nvmlDeviceGetName(self, handle: int) -> str:
        return GPU_NAME

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"{UUID_PREFIX}{self.rig_name}-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        load = self.loads.get(handle)
        used = load.memory_used_mib if load is not None else IDLE_MEMORY_MIB
        return SimpleNamespace(total=MEMORY_TOTAL_MIB * 1024 * 1024, used=used * 1024 * 1024,
                               free=(MEMORY_TOTAL_MIB - used) * 1024 * 1024)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        busy = self._busy(handle)
        if busy < BUSY_FROM:
            return SimpleNamespace(gpu=0, memory=0)
        gpu = min(100, max(1, round(100 * busy) + _wobble(handle, self.second, 2)))
        return SimpleNamespace(gpu=gpu, memory=min(100, round(gpu * 0.6)))

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        heat = self.heat.get(handle, 0.0)
        return round(AMBIENT_C + (HOT_C - AMBIENT_C) * heat) + _wobble(handle + 100, self.second // 5, 1)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        """Milliwatts, as NVML answers."""
        busy = self._busy(handle)
        watts = IDLE_POWER_W + (LIMIT_POWER_W - IDLE_POWER_W) * busy
        if busy >= BUSY_FROM:
            watts += 25.0 + _wobble(handle + 200, self.second, 3)  # P2's floor above P8 while it computes
        return round(min(LIMIT_POWER_W, watts) * 1000)

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        busy = self._busy(handle)
        if clock == self.NVML_CLOCK_MEM:
            return LOAD_MEM_MHZ if busy >= BUSY_FROM else IDLE_MEM_MHZ
        if busy < BUSY_FROM:
            return IDLE_SM_MHZ
        # Clocks rise with load from base to the top boost bin, and a hot card loses a few bins.
        rising = BASE_SM_MHZ + (BOOST_SM_MHZ - BASE_SM_MHZ) * min(1.0, 4 * busy)
        return int(round((rising - THROTTLE_SM_MHZ * self.heat.get(handle, 0.0)) / 12.5) * 12.5)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: int) -> int:
        return self.pcie_max_gen if self._busy(handle) >= BUSY_FROM else 1  # the link idles at Gen1

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: int) -> int:
        return self.pcie_max_width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: int) -> int:
        return self.pcie_max_gen

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: int) -> int:
        return self.pcie_max_width  # the riser's lanes: what the card and slot can train to


class RehearsalRig:
    """Keeps what the readings need between rounds (each worker's last CPU reading, each card's
    heat) and makes one RehearsalNvml per round from the workers' processes.

    `read_process` and `clock` (monotonic seconds) are injected so tests are deterministic."""

    def __init__(self, *, rig_name: str, count: int = GPU_COUNT,
                 read_process: Callable[[int], ProcessUsage | None] = read_proc,
                 clock: Callable[[], float] = time.monotonic, pcie_max_gen: int = 3, pcie_max_width: int = 1) -> None:
        self.rig_name, self.count, self.read_process, self.clock = rig_name, count, read_process, clock
        self.pcie_max_gen, self.pcie_max_width = pcie_max_gen, pcie_max_width
        self._last: dict[int, tuple[float, float]] = {}  # pid -> (clock, cpu_s)
        self._heat = {index: 0.0 for index in range(count)}
        self._heat_at: float | None = None

    def _busy(self, worker: WorkerProcess, now: float) -> tuple[float, int]:
        """(busy fraction since the last reading, resident MiB) of the worker's process. The
        first reading of a process has nothing to compare with: 0."""
        if worker.pid is None:
            return 0.0, 0
        usage = self.read_process(worker.pid)
        if usage is None:
            self._last.pop(worker.pid, None)
            return 0.0, 0
        previous = self._last.get(worker.pid)
        self._last[worker.pid] = (now, usage.cpu_s)
        busy = 0.0
        if previous is not None and now > previous[0]:
            busy = (usage.cpu_s - previous[1]) / ((now - previous[0]) * max(1, worker.threads))
        return min(1.0, max(0.0, busy)), usage.rss_bytes // (1024 * 1024)

    def nvml(self, workers: Iterable[WorkerProcess]) -> RehearsalNvml:
        now = self.clock()
        listed = list(workers)
        loads = card_loads((w, *self._busy(w, now)) for w in listed)
        running = {w.pid for w in listed if w.pid is not None}
        for pid in set(self._last) - running:  # a restarted worker is a new process
            del self._last[pid]
        elapsed = 0.0 if self._heat_at is None else max(0.0, now - self._heat_at)
        keep = math.exp(-elapsed / HEAT_TIME_CONSTANT_S)
        for index in self._heat:
            target = loads[index].busy if index in loads else 0.0
            # Heat follows power, which is not linear in utilization: a card at 25 % runs warm.
            target = min(1.0, math.sqrt(target))
            self._heat[index] = target + (self._heat[index] - target) * keep
        self._heat_at = now
        return RehearsalNvml(rig_name=self.rig_name, loads=loads, heat=dict(self._heat), second=int(now),
                             count=self.count, pcie_max_gen=self.pcie_max_gen, pcie_max_width=self.pcie_max_width)
