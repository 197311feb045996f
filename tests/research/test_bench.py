"""`manage.py bench` against the session's real llama-server (and the gateway): it stores runs
and samples, and fills every field of the JSON report."""
from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from research.models import BenchmarkRun, GpuSample, RequestSample

pytestmark = pytest.mark.backend_neutral  # once, in the embedded pass

MODEL = "smollm2-135m-instruct"
STATS = ("p50", "p90", "p99", "mean")


def bench(*args: str) -> str:
    out = StringIO()
    call_command("bench", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_sweep_against_a_worker_stores_runs_samples_and_fills_the_json(
    transactional_db, llama_server: str, tmp_path: Path,  # noqa: ANN001
) -> None:
    report_path = tmp_path / "bench.json"
    printed = bench("--base-url", llama_server, "--model", MODEL, "--requests", "3", "--concurrency", "1,2",
                    "--prompt-tokens", "64", "--output-tokens", "8", "--warmup", "1",
                    "--goodput", "ttft:600000,tpot:600000", "--json", str(report_path))
    report = json.loads(report_path.read_text())
    assert len(report["levels"]) == 2
    # The prompt was fitted to the server's own count (chat template included).
    assert abs(report["prompt_tokens_measured"] - 64) <= 4
    for level, concurrency in zip(report["levels"], (1, 2)):
        assert level["concurrency"] == concurrency
        assert (level["completed"], level["failed"], level["warmup_dropped"]) == (3, 0, 1)
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert all(isinstance(level[metric][stat], float) and level[metric][stat] > 0 for stat in STATS), metric
        for field in ("request_throughput", "output_throughput", "prompt_eval_rate", "generation_rate", "goodput"):
            assert isinstance(level[field], float) and level[field] > 0, field
        # Generous SLOs: every request is good.
        assert level["good_requests"] == 3
        assert level["output_tokens_mean"] == 8  # ignore_eos: exactly the tokens asked for
        # Each level sends prompts of its own: the server's prompt cache holds at most the template.
        assert level["cached_tokens_mean"] < level["prompt_tokens_mean"] / 2
    runs = BenchmarkRun.objects.order_by("concurrency")
    assert [run.concurrency for run in runs] == [1, 2]
    assert len({run.group for run in runs}) == 1
    for run in runs:
        assert run.status == BenchmarkRun.Status.DONE and run.ended_at is not None
        assert run.target == BenchmarkRun.Target.WORKER
        assert run.launch["slots"] == 4 and run.launch["context"]
        assert run.llama_build
        samples = RequestSample.objects.filter(run=run)
        assert samples.count() == 4 and samples.filter(warmup=True).count() == 1
        assert all(s.output_tokens == 8 and len(s.itls_ms) >= 1 and s.ttft_ms for s in samples)
        assert run.summary == next(level for level in report["levels"] if level["run_id"] == run.pk)
    assert "concurrency 2" in printed and "TTFT p50" in printed


def test_gpu_telemetry_of_the_workers_rig_is_sampled_during_the_run(
    transactional_db, llama_server: str,  # noqa: ANN001
) -> None:
    from fleet.models import Gpu
    from fleet.rigs import rig_create
    from fleet.services import worker_register

    rig, _ = rig_create(name="rig-a", address="127.0.0.1")
    for index in (0, 1, 2):
        Gpu.objects.create(rig=rig, index=index, name="NVIDIA GeForce GTX 1070", memory_total_mib=8192,
                           memory_used_mib=4000 + index, utilization_pct=10 * index)
    worker = worker_register(name="w-rig", base_url=llama_server, model_id=MODEL, pool_name="production", slots=4)
    worker.rig = rig
    worker.gpu_indices = [0, 1]
    worker.save(update_fields=["rig", "gpu_indices"])
    bench("--base-url", llama_server, "--model", MODEL, "--requests", "2", "--prompt-tokens", "32",
          "--output-tokens", "4", "--warmup", "0")
    run = BenchmarkRun.objects.get()
    assert run.worker_id == worker.id and run.launch["gpu_indices"] == [0, 1]
    samples = GpuSample.objects.filter(run=run)
    assert samples.exists()
    assert {s.gpu_index for s in samples} == {0, 1}  # only the worker's GPUs
    assert {s.memory_used_mib for s in samples} == {4000, 4001}
    # GTX 1070s are in the spec table: the roofline is beside the generation rate.
    roof = run.summary["roofline"]
    assert roof["bandwidth_gbs"] == 256 and roof["percent_of_ceiling"] > 0


def test_through_the_gateway_with_a_key(transactional_db, gateway, worker, student_key) -> None:  # noqa: ANN001
    _key, raw = student_key
    bench("--base-url", gateway.url, "--api-key", raw, "--model", MODEL, "--requests", "2", "--prompt-tokens", "32",
          "--output-tokens", "4", "--warmup", "0")
    run = BenchmarkRun.objects.get()
    assert run.target == BenchmarkRun.Target.GATEWAY and run.status == BenchmarkRun.Status.DONE
    assert run.summary["completed"] == 2 and run.summary["ttft_ms"]["p50"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "at least 1"),
        (["--concurrency", "a,b"], "expected numbers"),
        (["--rate", "-1"], "positive"),
        (["--goodput", "speed:5"], "goodput SLO"),
        (["--concurrency", "1", "--rate", "1"], "not both"),
        (["--requests", "0"], "at least 1"),
    ],
)
def test_bad_flags_are_clear_errors(db, args: list[str], message: str) -> None:  # noqa: ANN001
    with pytest.raises(CommandError, match=message):
        bench(*args)


def test_nightly_baseline_runs_each_healthy_production_worker(transactional_db, worker) -> None:  # noqa: ANN001
    from fleet.services import worker_register
    from research.services import Workload
    from research.tasks import nightly_baselines

    worker_register(name="dev-x", base_url="http://127.0.0.1:9", model_id=MODEL, pool_name="dev", state="healthy")
    # The scheduled job uses 256 in / 64 out x 8; smaller here, the machine is shared.
    run_ids = nightly_baselines(workload=Workload(prompt_tokens=48, output_tokens=4, requests=3, concurrency=1))
    run = BenchmarkRun.objects.get()
    assert run_ids == [run.pk] and run.worker_id == worker.id and run.scenario == "nightly-baseline"
    assert run.status == BenchmarkRun.Status.DONE and run.summary["completed"] == 3


def test_poisson_rate_mode_stores_a_run_per_rate(transactional_db, llama_server: str) -> None:  # noqa: ANN001
    bench("--base-url", llama_server, "--model", MODEL, "--requests", "3", "--rate", "4,8", "--prompt-tokens", "32",
          "--output-tokens", "4", "--warmup", "0")
    runs = list(BenchmarkRun.objects.order_by("request_rate"))
    assert [(run.request_rate, run.concurrency) for run in runs] == [(4.0, None), (8.0, None)]
    assert all(run.summary["completed"] == 3 and run.summary["label"].startswith("rate ") for run in runs)


def test_levels_of_one_group_get_prompts_of_their_own() -> None:
    from research.bench_levels import level_seed
    from research.services import Workload

    seeds = {level_seed("g1", label) for label in ("ctx 256 concurrency 1", "ctx 2048 concurrency 1",
                                                   "yarn x2 ctx 2048 concurrency 1")}
    assert len(seeds) == 3 and level_seed("g1", "a") == level_seed("g1", "a")
    short, long = (Workload(prompt_tokens=n, output_tokens=1, requests=1, words=n, seed=seed).prompts()[0][0]["content"]
                   for n, seed in ((50, level_seed("g", "ctx 50")), (500, level_seed("g", "ctx 500"))))
    assert not long.startswith(short[:60])  # not even the first words shared
