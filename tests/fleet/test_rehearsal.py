"""The rehearsal rig: NVML faked at the agent's boundary (fleet/agent/rehearsal.py), read by the
real read_gpus, its readings following the workers' processes; the rig marked a rehearsal from
its heartbeats to the run pages, and its runs never rig evidence."""
from __future__ import annotations

import os
from dataclasses import replace

import httpx
import pytest
from django.test import Client

from fleet.agent.config import AgentConfig, AgentConfigError, WorkerConfig, parse_agent_config
from fleet.agent.rehearsal import (
    BOOST_SM_MHZ,
    CUDA_CONTEXT_MIB,
    IDLE_SM_MHZ,
    ProcessUsage,
    RehearsalRig,
    WorkerProcess,
    read_proc,
)
from fleet.agent.runner import RigAgentRunner
from fleet.agent.telemetry import GpuSample, read_gpus
from lessons.run_evidence import NVML_UUID, measured_on

MIB = 1024 * 1024


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Processes:
    """/proc as the test sets it: pid -> (CPU seconds so far, resident bytes)."""

    def __init__(self) -> None:
        self.usage: dict[int, ProcessUsage] = {}

    def __call__(self, pid: int) -> ProcessUsage | None:
        return self.usage.get(pid)

    def run(self, pid: int, *, cpu_s: float, rss_mib: int) -> None:
        self.usage[pid] = ProcessUsage(cpu_s=cpu_s, rss_bytes=rss_mib * MIB)


def _rig(clock: Clock, processes: Processes) -> RehearsalRig:
    return RehearsalRig(rig_name="rehearsal-rig", read_process=processes, clock=clock)


def _read(rig: RehearsalRig, workers: list[WorkerProcess]) -> list[GpuSample]:
    status, gpus = read_gpus(rig.nvml(workers), clock=lambda: 1_790_000_000.0)
    assert status == "8 GPU(s)"
    return gpus


TWO_WORKERS = [WorkerProcess(pid=101, gpus=(0, 1, 2, 3), threads=2), WorkerProcess(pid=202, gpus=(4, 5, 6, 7), threads=2)]


def test_eight_idle_gtx_1070s_whose_ids_are_not_nvmls() -> None:
    gpus = _read(_rig(Clock(), Processes()), [])
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"NVIDIA GeForce GTX 1070"} and {g.memory_total_mib for g in gpus} == {8192}
    assert len({g.uuid for g in gpus}) == 8 and not any(NVML_UUID.match(g.uuid) for g in gpus)
    assert measured_on(rig="rehearsal-rig", sampled_gpu_uuids=[g.uuid for g in gpus]) == "rehearsal"
    idle = gpus[0]
    assert (idle.utilization_pct, idle.sm_clock_mhz, idle.mem_clock_mhz) == (0, IDLE_SM_MHZ, 405)
    # A mining riser: Gen3 x1 at most, and the link idles at Gen1.
    assert (idle.pcie_gen, idle.pcie_width, idle.pcie_max_gen, idle.pcie_max_width) == (1, 1, 3, 1)
    assert idle.memory_used_mib < 10 and idle.power_w is not None and idle.power_w < 15
    assert idle.temperature_c is not None and 28 <= idle.temperature_c <= 34


def test_a_busy_workers_cards_follow_its_cpu_use_and_the_other_cards_stay_idle() -> None:
    clock, processes = Clock(), Processes()
    rig = _rig(clock, processes)
    processes.run(101, cpu_s=10.0, rss_mib=400)
    processes.run(202, cpu_s=5.0, rss_mib=400)
    first = _read(rig, TWO_WORKERS)
    assert {g.utilization_pct for g in first} == {0}  # nothing to compare a first reading with
    assert first[0].memory_used_mib == CUDA_CONTEXT_MIB + 100  # a CUDA context and a quarter of the worker
    clock.now += 2.0
    processes.run(101, cpu_s=10.0 + 2 * 2 * 0.8, rss_mib=600)  # 80 % of its 2 threads for 2 s
    processes.run(202, cpu_s=5.0, rss_mib=400)  # idle
    busy = _read(rig, TWO_WORKERS)
    for card in busy[:4]:  # a layer split: each of the 4 cards computes a quarter of the time
        assert card.utilization_pct is not None and 18 <= card.utilization_pct <= 22
        assert card.memory_used_mib == CUDA_CONTEXT_MIB + 150
        assert card.pcie_gen == 3 and card.pcie_width == 1
        assert card.sm_clock_mhz is not None and 1700 <= card.sm_clock_mhz <= BOOST_SM_MHZ
        assert card.mem_clock_mhz == 3802 and card.power_w is not None and card.power_w > 50
    for card in busy[4:]:
        assert (card.utilization_pct, card.pcie_gen, card.sm_clock_mhz) == (0, 1, IDLE_SM_MHZ)


def test_clocks_and_temperature_rise_with_load_and_the_heat_lags() -> None:
    clock, processes = Clock(), Processes()
    rig = _rig(clock, processes)
    worker = [WorkerProcess(pid=7, gpus=(0,), threads=1)]
    cpu, readings = 0.0, []
    for busy in (0.0, 0.05, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3):
        cpu += busy * 5.0
        processes.run(7, cpu_s=cpu, rss_mib=300)
        readings.append(_read(rig, worker)[0])
        clock.now += 5.0
    light, loaded = readings[1], readings[2]
    assert light.sm_clock_mhz is not None and loaded.sm_clock_mhz is not None
    assert IDLE_SM_MHZ < light.sm_clock_mhz < loaded.sm_clock_mhz
    temperatures = [r.temperature_c for r in readings[2:]]
    assert temperatures[-1] > temperatures[0] + 8  # warming over ~40 s, not at once
    assert len({r.utilization_pct for r in readings[2:]}) > 1  # readings move a little between seconds


def test_the_same_clock_and_processes_give_the_same_readings() -> None:
    def session() -> list[list[GpuSample]]:
        clock, processes = Clock(), Processes()
        rig = _rig(clock, processes)
        out = []
        for step in range(5):
            processes.run(101, cpu_s=step * 1.5, rss_mib=500)
            out.append(_read(rig, TWO_WORKERS))
            clock.now += 1.0
        return out

    assert session() == session()


def test_a_restarted_worker_is_a_new_process_with_no_reading_to_compare() -> None:
    clock, processes = Clock(), Processes()
    rig = _rig(clock, processes)
    processes.run(101, cpu_s=0.0, rss_mib=300)
    _read(rig, [WorkerProcess(pid=101, gpus=(0,), threads=1)])
    clock.now += 1.0
    processes.run(102, cpu_s=50.0, rss_mib=300)  # the new process's total, not a second's work
    card = _read(rig, [WorkerProcess(pid=102, gpus=(0,), threads=1)])[0]
    assert card.utilization_pct == 0 and card.memory_used_mib == CUDA_CONTEXT_MIB + 300
    stopped = _read(rig, [WorkerProcess(pid=None, gpus=(0,), threads=1)])[0]
    assert stopped.memory_used_mib < 10


def test_proc_readings_of_a_live_process() -> None:
    usage = read_proc(os.getpid())
    assert usage is not None and usage.cpu_s > 0 and usage.rss_bytes > 10 * MIB
    assert read_proc(2**31 - 2) is None


CONFIG = """
[control_plane]
url = "http://127.0.0.1:8710"
token = "ocsrig-x"
[rig]
name = "rehearsal-rig"
address = "127.0.0.1"
telemetry = "{telemetry}"
[[workers]]
name = "rehearsal-rig-a"
model_id = "m"
port = 8711
gpus = {gpus}
threads = 2
"""


def test_a_rig_config_asks_for_the_rehearsal_and_names_only_its_eight_gpus() -> None:
    config = parse_agent_config(CONFIG.format(telemetry="rehearsal", gpus="[0, 1, 2, 3]"))
    assert config.rehearsal and config.workers[0].options.threads == 2
    assert not parse_agent_config(CONFIG.format(telemetry="nvml", gpus="[0]")).rehearsal
    with pytest.raises(AgentConfigError, match="telemetry"):
        parse_agent_config(CONFIG.format(telemetry="fake", gpus="[0]"))
    with pytest.raises(AgentConfigError, match=r"GPU\(s\) \[8\] do not exist on a rehearsal rig"):
        parse_agent_config(CONFIG.format(telemetry="rehearsal", gpus="[7, 8]"))


# --- the control plane's side: heartbeats, pages, evidence -------------------------------------


def _through_django(request: httpx.Request) -> httpx.Response:  # the real agent API views, in process
    answer = Client().post(request.url.path, request.content, content_type="application/json",
                           HTTP_AUTHORIZATION=request.headers["authorization"])
    return httpx.Response(answer.status_code, content=answer.content, headers={"content-type": answer["Content-Type"]})


def _rehearsal_agent(token: str, *, telemetry: str = "rehearsal") -> RigAgentRunner:
    config = AgentConfig(control_plane_url="http://control-plane", token=token, rig_name="rehearsal-rig",
                         address="127.0.0.1", telemetry=telemetry,
                         workers=(WorkerConfig(name="rehearsal-rig-a", model_id="smollm2", port=8711,
                                               gpus=(0, 1, 2, 3), slots=1, context=4096,
                                               model_path="models/smollm2.gguf"),))
    runner = RigAgentRunner(config, http=httpx.Client(transport=httpx.MockTransport(_through_django)))
    runner.supervisors[0].tick = lambda: "stopped"  # type: ignore[method-assign]  # launch nothing
    return runner


@pytest.mark.django_db
def test_a_rehearsal_rig_is_marked_from_its_heartbeats_to_the_run_pages_and_never_counts(teacher) -> None:  # noqa: ANN001
    from datetime import timedelta

    from django.utils import timezone

    from fleet.models import Gpu, Rig, Worker
    from fleet.rigs import rig_create
    from fleet.services import catalog_model_ensure
    from lessons.research_bridge import benchmark_runs
    from research.models import BenchmarkRun, GpuSample
    from research.services import TelemetryRecorder, rehearsal_marks

    catalog_model_ensure(public_id="smollm2", context_length=4096)
    rig, token = rig_create(name="rehearsal-rig", address="127.0.0.1")
    agent = _rehearsal_agent(token)
    result = agent.run_round()
    assert result.registered and not result.errors, result.errors
    rig.refresh_from_db()
    assert rig.rehearsal
    gpus = list(Gpu.objects.filter(rig=rig).order_by("index"))
    assert len(gpus) == 8 and {g.name for g in gpus} == {"NVIDIA GeForce GTX 1070"}
    assert all(g.uuid.startswith("REHEARSAL-") and g.pcie_max_gen == 3 and g.pcie_max_width == 1 for g in gpus)

    # A run measured on the rehearsal rig's worker, with the GPU readings taken meanwhile.
    worker = Worker.objects.get(name="rehearsal-rig-a")
    assert worker.gpu_indices == [0, 1, 2, 3] and worker.launch["model_path"] == "models/smollm2.gguf"
    recorder = TelemetryRecorder(worker=worker)
    recorder.started_at = timezone.now() - timedelta(minutes=1)
    assert recorder.sample_once() == 4  # the worker's own cards only
    run = BenchmarkRun.objects.create(
        group="rehearsed", target="worker", base_url=worker.base_url, worker=worker, model="smollm2",
        prompt_tokens=20, output_tokens=8, requests=1, status="done", ended_at=timezone.now(),
        launch={"worker": worker.name, **rehearsal_marks(worker)}, summary={"completed": 1})
    GpuSample.objects.bulk_create([GpuSample(run=run, **row) for row in recorder.rows])
    assert run.launch["rehearsal"] is True
    assert benchmark_runs()[0].measured_on == "rehearsal"
    # Even ids that look like NVML's do not make a rehearsal rig's run rig evidence.
    for gpu in gpus:
        gpu.uuid = f"GPU-{gpu.index:08x}-0000-0000-0000-000000000000"
        gpu.save(update_fields=["uuid"])
    assert benchmark_runs()[0].measured_on == "rehearsal"

    client = Client()
    client.force_login(teacher)
    page = client.get(f"/research/runs/{run.pk}/").content.decode()
    assert 'id="rehearsal"' in page and "on rehearsal rig rehearsal-rig" in page
    assert "· rehearsal" in client.get("/research/").content.decode()
    from portal.fleet_status import _read_database

    fleet = _read_database.__wrapped__()  # type: ignore[attr-defined]  # the fleet page's data, in this thread
    assert [r["rehearsal"] for r in fleet["rigs"]] == [True]
    from lessons.panels import rigs

    assert [r["rehearsal"] for r in rigs()] == [True]

    # The same rig back on NVML (its agent's config changed): its heartbeats unmark it.
    _rehearsal_agent(token, telemetry="nvml").run_round()
    assert not Rig.objects.get(pk=rig.pk).rehearsal
    assert benchmark_runs()[0].measured_on == "rehearsal"  # the run keeps what it was measured on


def test_an_agent_on_real_nvml_says_it_is_no_rehearsal() -> None:
    sent: list[dict] = []

    def record(request: httpx.Request) -> httpx.Response:
        import json

        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"rig": "r", "workers": [{"name": "w", "api_key": ""}]})

    config = AgentConfig(control_plane_url="http://control-plane", token="t", rig_name="r", address="127.0.0.1",
                         workers=(WorkerConfig(name="w", model_id="m", port=8711, model_path="/nonexistent.gguf"),))
    runner = RigAgentRunner(config, http=httpx.Client(transport=httpx.MockTransport(record)),
                            telemetry=lambda: ("no GPUs", []))
    runner.supervisors[0].tick = lambda: "stopped"  # type: ignore[method-assign]
    runner.run_round()
    rehearsal = RigAgentRunner(replace(config, telemetry="rehearsal"),
                               http=httpx.Client(transport=httpx.MockTransport(record)))
    rehearsal.supervisors[0].tick = lambda: "stopped"  # type: ignore[method-assign]
    rehearsal.run_round()
    heartbeats = [body for body in sent if "gpus" in body]
    assert [h["rehearsal"] for h in heartbeats] == [False, True]
    assert heartbeats[0]["gpu_status"] == "no GPUs" and len(heartbeats[1]["gpus"]) == 8
