"""`manage.py bench` against the session's real llama-server (and the gateway): it stores runs
and samples, and fills every field of the JSON report."""
from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from research.models import BenchmarkRun, GpuSample, RequestSample
from tests.conftest import FIXTURE_WORKER_KEY

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
    printed = bench("--base-url", llama_server, "--api-key", FIXTURE_WORKER_KEY, "--model", MODEL,
                    "--requests", "3", "--concurrency", "1,2",
                    "--prompt-tokens", "64", "--output-tokens", "8", "--warmup", "1",
                    "--goodput", "ttft:600000,tpot:600000", "--json", str(report_path))
    report = json.loads(report_path.read_text())
    assert len(report["levels"]) == 2
    # The prompt was fitted to the server's own count (chat template included).
    assert abs(report["prompt_tokens_measured"] - 64) <= 4
    for level, concurrency in zip(report["levels"], (1, 2)):
        assert level["concurrency"] == concurrency
        assert (level["completed"], level["failed"], level["warmup_dropped"]) == (3, 0, 1)
        for metric in ("ttft_ms", "tpot_ms", "inter_chunk_latency_ms", "e2e_ms"):
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
        assert all(s.output_tokens == 8 and len(s.inter_chunk_gaps_ms) >= 1 and s.ttft_ms for s in samples)
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
    worker = worker_register(name="w-rig", base_url=llama_server, model_id=MODEL, pool_name="production", slots=4,
                             api_key=FIXTURE_WORKER_KEY)
    worker.rig = rig
    worker.gpu_indices = [0, 1]
    # The model file's facts as the rig agent reports them: the control plane has no such file.
    from fleet.gguf import read_gguf
    from fleet.local_worker import find_default_model

    facts = read_gguf(find_default_model())
    worker.launch = {"gguf": {**facts.as_dict(), "path": "/models/on-the-rig-only.gguf"}, "split_mode": "row",
                     "tensor_split": [3, 1]}
    worker.save(update_fields=["rig", "gpu_indices", "launch"])
    # --worker: its address, model and key from the control plane (the worker refuses requests without it)
    bench("--worker", "w-rig", "--requests", "2", "--prompt-tokens", "32", "--output-tokens", "4", "--warmup", "0")
    run = BenchmarkRun.objects.get()
    assert run.worker_id == worker.id and run.launch["gpu_indices"] == [0, 1]
    samples = GpuSample.objects.filter(run=run)
    assert samples.exists()
    assert {s.gpu_index for s in samples} == {0, 1}  # only the worker's GPUs
    assert {s.memory_used_mib for s in samples} == {4000, 4001}
    assert samples.count() == 2  # one reading per GPU, however often the recorder looked
    gpus = run.summary["gpus"]
    assert [(g["gpu_index"], g["memory_used_mib_max"], g["utilization_pct_mean"]) for g in gpus] == [
        (0, 4000, 0), (1, 4001, 10)]
    # GTX 1070s are in the spec table: the roofline is beside the generation rate, from the
    # agent's facts; a row split of 3:1 waits for the GPU reading 3/4: 256 / 0.75 GB/s effective.
    roof = run.summary["roofline"]
    assert roof["model_facts_from"] == "agent" and roof["split_mode"] == "row" and roof["shares"] == [0.75, 0.25]
    assert roof["bandwidth_gbs"] == pytest.approx(256 / 0.75) and roof["percent_of_ceiling"] > 0
    assert roof["weight_gb"] == pytest.approx(facts.weight_bytes_per_token / 1e9)


def test_through_the_gateway_with_a_key_and_the_v1_url_the_demo_prints(
    transactional_db, gateway, worker, student_key,  # noqa: ANN001
) -> None:
    _key, raw = student_key
    bench("--base-url", gateway.url + "/v1/", "--api-key", raw, "--model", MODEL, "--requests", "2", "--prompt-tokens", "32",
          "--output-tokens", "4", "--warmup", "0")
    run = BenchmarkRun.objects.get()
    assert run.target == BenchmarkRun.Target.GATEWAY and run.status == BenchmarkRun.Status.DONE
    assert run.summary["completed"] == 2 and run.summary["ttft_ms"]["p50"] > 0


@pytest.mark.parametrize("given", ["http://h:8081", "http://h:8081/", "http://h:8081/v1", "http://h:8081/v1/",
                                   " http://h:8081/v1 "])
def test_the_root_or_the_v1_url_reach_the_same_chat_route(given: str) -> None:
    from research.loadgen import Target, server_root

    assert server_root(given) == "http://h:8081"
    assert Target(base_url=given, model=MODEL).chat_url == "http://h:8081/v1/chat/completions"
    assert server_root("https://gw.example/ocs/v1") == "https://gw.example/ocs"


def test_help_shows_the_key_format_students_get() -> None:
    from core.keys import STUDENT_SCHEME
    from research.management.commands.bench import Command

    help_text = Command().create_parser("manage.py", "bench").format_help()
    assert f"({STUDENT_SCHEME}-…)" in help_text and "sk-" not in help_text and "/v1" in help_text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "at least 1"),
        (["--concurrency", "a,b"], "expected numbers"),
        (["--rate", "-1"], "positive"),
        (["--goodput", "speed:5"], "goodput SLO"),
        (["--concurrency", "1", "--rate", "1"], "not both"),
        (["--requests", "0"], "at least 1"),
        (["--prompt-tokens", "64", "--prefix-tokens", "64"], "fewer than --prompt-tokens"),
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
    bench("--base-url", llama_server, "--api-key", FIXTURE_WORKER_KEY, "--model", MODEL, "--requests", "3",
          "--rate", "4,8", "--prompt-tokens", "32",
          "--output-tokens", "4", "--warmup", "0")
    runs = list(BenchmarkRun.objects.order_by("request_rate"))
    assert [(run.request_rate, run.concurrency) for run in runs] == [(4.0, None), (8.0, None)]
    assert all(run.summary["completed"] == 3 and run.summary["label"].startswith("rate ") for run in runs)


def test_a_shared_prefix_is_found_cached_by_every_request_after_the_first(
    transactional_db, llama_server: str,  # noqa: ANN001
) -> None:
    """`--prefix-tokens`: cached-vs-uncached turns for the planner's calibration (the prompt's
    first ~N tokens are every request's, the rest its own)."""
    bench("--base-url", llama_server, "--api-key", FIXTURE_WORKER_KEY, "--model", MODEL, "--requests", "2",
          "--concurrency", "1", "--prompt-tokens", "160", "--prefix-tokens", "128", "--output-tokens", "2")
    measured = RequestSample.objects.filter(warmup=False)
    assert measured.count() == 2
    assert all(120 <= (s.cached_tokens or 0) < s.prompt_tokens - 16 for s in measured), \
        [(s.cached_tokens, s.prompt_tokens) for s in measured]


def test_levels_of_one_group_get_prompts_of_their_own() -> None:
    from research.bench_levels import level_seed
    from research.services import Workload

    seeds = {level_seed("g1", label) for label in ("ctx 256 concurrency 1", "ctx 2048 concurrency 1",
                                                   "yarn x2 ctx 2048 concurrency 1")}
    assert len(seeds) == 3 and level_seed("g1", "a") == level_seed("g1", "a")
    short, long = (Workload(prompt_tokens=n, output_tokens=1, requests=1, words=n, seed=seed).prompts()[0][0]["content"]
                   for n, seed in ((50, level_seed("g", "ctx 50")), (500, level_seed("g", "ctx 500"))))
    assert not long.startswith(short[:60])  # not even the first words shared


def test_idle_gaps_store_a_single_request_run_after_each(transactional_db, llama_server: str) -> None:  # noqa: ANN001
    # 60,300,900 on a rig; fractions of a second here.
    printed = bench("--base-url", llama_server, "--api-key", FIXTURE_WORKER_KEY, "--model", MODEL,
                    "--idle", "0.2,0.5", "--prompt-tokens", "48",
                    "--output-tokens", "4")
    runs = list(BenchmarkRun.objects.order_by("started_at", "id"))
    assert [run.label for run in runs] == ["before idle concurrency 1", "idle 0.2 s concurrency 1",
                                           "idle 0.5 s concurrency 1"]
    assert all((run.scenario, run.requests, run.warmup, run.summary["completed"]) == ("idle", 1, 0, 1) for run in runs)
    assert [run.summary.get("idle_s") for run in runs] == [None, 0.2, 0.5] and len({run.group for run in runs}) == 1
    assert (runs[2].started_at - runs[1].ended_at).total_seconds() >= 0.5
    assert "idle for 0.5 s" in printed
    with pytest.raises(CommandError, match="one request at a time"):
        bench("--idle", "1", "--concurrency", "2")
