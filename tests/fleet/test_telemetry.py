"""pynvml faked at its boundary (there is no NVIDIA GPU here), plus the real library's answer."""
from __future__ import annotations

import sys
from types import SimpleNamespace

from fleet.agent.telemetry import read_gpus


class NVMLError(Exception):
    pass


class FakeNvml:
    """The part of pynvml's API the agent uses, answering like two GTX 1070s on x1 risers."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, count: int = 2, init_error: Exception | None = None) -> None:
        self.count, self.init_error, self.shutdowns = count, init_error, 0

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA GeForce GTX 1070"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-0000-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=8192 * 1024 * 1024, used=(1000 + handle) * 1024 * 1024)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=14 * (handle + 1), memory=5)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 60 + handle

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if handle == 1:
            raise NVMLError("Not Supported")
        return 95_500

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        return 1683 if clock == self.NVML_CLOCK_SM else 4004

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: int) -> int:
        return 1

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: int) -> int:
        return 1

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: int) -> int:
        if handle == 1:
            raise NVMLError("Not Supported")
        return 3

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: int) -> int:
        return 16


def test_reports_what_nvml_says_for_each_gpu() -> None:
    fake = FakeNvml()
    status, gpus = read_gpus(fake, clock=lambda: 1_790_000_000.1234)
    assert status == "2 GPU(s)" and fake.shutdowns == 1
    first, second = gpus
    assert first.as_dict() == {
        "index": 0, "name": "NVIDIA GeForce GTX 1070", "uuid": "GPU-0000-0", "memory_total_mib": 8192,
        "memory_used_mib": 1000, "utilization_pct": 14, "temperature_c": 60, "power_w": 95.5,
        "sm_clock_mhz": 1683, "mem_clock_mhz": 4004, "pcie_gen": 1, "pcie_width": 1,
        # The link idles at Gen1 x1; the card and slot can train to Gen3 x16.
        "pcie_max_gen": 3, "pcie_max_width": 16, "sampled_at": 1_790_000_000.123,
    }
    assert second.power_w is None and second.pcie_max_gen is None  # an unsupported sensor hides nothing else
    assert (second.utilization_pct, second.memory_used_mib) == (28, 1001)


def test_no_driver_or_no_gpu_means_no_gpus_and_no_error() -> None:
    status, gpus = read_gpus(FakeNvml(init_error=NVMLError("Driver Not Loaded")))
    assert status.startswith("no GPUs") and "Driver Not Loaded" in status and gpus == []
    assert read_gpus(FakeNvml(count=0)) == ("no GPUs", [])


def test_a_cpu_machine_says_so_in_words_not_an_nvml_error_name() -> None:
    """The fleet page showed "no GPUs (NVMLError_LibraryNotFound: NVML Shared Library Not Found)"
    on the CPU demo."""
    class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - pynvml's own name
        pass

    status, _ = read_gpus(FakeNvml(init_error=NVMLError_LibraryNotFound("NVML Shared Library Not Found")))
    assert status == "no GPUs: no NVIDIA driver on this machine (runs on the CPU)"


def test_without_pynvml_installed_it_reports_no_gpus(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` now raises ImportError
    assert read_gpus() == ("no GPUs: the NVIDIA monitoring library is not installed (pynvml)", [])


def test_the_real_pynvml_on_a_machine_without_nvidia_gpus_reports_no_gpus() -> None:
    status, gpus = read_gpus()
    if gpus:  # running on a GPU machine: the real numbers must be sane
        assert all(g.memory_total_mib > 0 and g.name for g in gpus)
    else:
        assert status.startswith("no GPUs")
