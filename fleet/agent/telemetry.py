"""GPU telemetry through NVML (pynvml, from nvidia-ml-py). Pure of Django.

Every metric a card may not support (a GTX 1070 lacks some power and PCIe readings under some
drivers) is read on its own and becomes None, so one missing sensor never hides the rest.
With no pynvml, no driver or no GPU the answer is ("no GPUs…", []), in words (no_gpus_reason).

Each sample carries `sampled_at`, the agent's own wall clock (Unix seconds) when it was read, so
the control plane dates it by when it was measured, not when the heartbeat arrived. PCIe links
are reported twice: the current generation and width (a card drops its link to Gen1 at idle)
and the maximum the card and slot can train to (what a riser allows under load).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable


# The pynvml module, or an object with the same functions and constants: a test's fake, or a
# rehearsal rig's (fleet/agent/rehearsal.py). Duck-typed, as pynvml's own functions are untyped.
Nvml = Any


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    uuid: str
    memory_total_mib: int
    memory_used_mib: int
    utilization_pct: int | None
    temperature_c: int | None
    power_w: float | None
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    pcie_gen: int | None
    pcie_width: int | None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    sampled_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_gpus(nvml: Nvml | None = None, *,
              clock: Callable[[], float] = time.time) -> tuple[str, list[GpuSample]]:
    """(status, samples). `nvml` is the pynvml module; tests and rehearsal rigs pass a fake of it.
    `clock`: the wall clock each sample is stamped with (Unix seconds)."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return "no GPUs: the NVIDIA monitoring library is not installed (pynvml)", []
        nvml = pynvml
    return _read_all(nvml, clock)


NO_DRIVER = ("LibraryNotFound", "DriverNotLoaded")


def no_gpus_reason(exc: Exception) -> str:
    """Why NVML found no GPU, in words a teacher reads on the fleet page: a CPU-only machine (the
    demo, a laptop) has no NVIDIA driver, which is no fault; anything else names the error."""
    if any(name in type(exc).__name__ for name in NO_DRIVER):
        return "no GPUs: no NVIDIA driver on this machine (runs on the CPU)"
    return f"no GPUs: NVIDIA's library failed ({type(exc).__name__}: {exc})"


def _read_all(nvml: Nvml, clock: Callable[[], float]) -> tuple[str, list[GpuSample]]:
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on a CPU machine
        return no_gpus_reason(exc), []
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            return "no GPUs", []
        samples = [_sample(nvml, index, clock) for index in range(count)]
        return f"{count} GPU(s)", samples
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _sample(nvml: Nvml, index: int, clock: Callable[[], float]) -> GpuSample:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    sampled_at = clock()

    def optional(read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception:  # NVMLError_NotSupported and friends
            return None

    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    utilization = optional(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    power_mw = optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
    return GpuSample(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(optional(lambda: nvml.nvmlDeviceGetUUID(handle)) or ""),
        memory_total_mib=int(memory.total // (1024 * 1024)),
        memory_used_mib=int(memory.used // (1024 * 1024)),
        utilization_pct=utilization,
        temperature_c=optional(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        power_w=round(power_mw / 1000.0, 1) if power_mw is not None else None,
        sm_clock_mhz=optional(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        mem_clock_mhz=optional(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
        pcie_gen=optional(lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        pcie_width=optional(lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        pcie_max_gen=optional(lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        pcie_max_width=optional(lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        sampled_at=round(sampled_at, 3),
    )
