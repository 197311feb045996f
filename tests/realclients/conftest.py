"""Fixtures of the realclients group: the pinned clients installed, and a worker that fits a
coding agent's prompt (5k-20k tokens), registered for one test at a time.

The worker is SmolLM2 with YaRN: 8,192 native context stretched to 32,768, in one slot, so one
agent request fits. Its catalogue entry gets a small output cap, so a 135M model that rambles
stops soon and a CPU run stays short (the gateway applies it; llama-server's own --n-predict is
only a default that a request's max_tokens overrides).
"""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.local_worker import LaunchOptions, LlamaServerProcess, LlamaServerSpec, find_default_model, free_port
from tests.conftest import FIXTURE_WORKER_KEY
from tests.realclients.clients import ROOT

AGENT_MODEL = "smollm2-135m-agents"
AGENT_CONTEXT = 32768  # tokens in the one slot: YaRN scale 4 over SmolLM2's 8,192
OUTPUT_CAP = 128  # tokens; the catalogue's per-model max_output_tokens for this worker


@pytest.fixture(scope="session")
def real_clients_installed() -> None:
    """scripts/ensure_clients.sh: npm ci of tests/clients when the lockfile changed (else ~1 s)."""
    result = subprocess.run(["bash", str(ROOT / "scripts" / "ensure_clients.sh")], capture_output=True, text=True,
                            check=False, timeout=900)
    if result.returncode != 0:
        pytest.fail(f"scripts/ensure_clients.sh failed:\n{result.stdout}\n{result.stderr}")


@pytest.fixture(scope="session")
def agent_llama_server(tmp_path_factory: pytest.TempPathFactory, fixture_key_file: Path) -> Iterator[str]:
    """One real llama-server with a 32k-token slot (YaRN), launched with FIXTURE_WORKER_KEY. Yields its base URL."""
    spec = LlamaServerSpec(
        model_path=find_default_model(), model_id=AGENT_MODEL, port=free_port(), context=AGENT_CONTEXT, slots=1,
        # Greedy decoding by default (Claude Code and Codex send no temperature): the same answer
        # every run, so a run that passes keeps passing.
        options=LaunchOptions(rope_scaling="yarn", rope_scale=4, yarn_orig_ctx=8192, extra_args=("--temp", "0")),
        api_key_file=fixture_key_file,
    )
    log_path = tmp_path_factory.mktemp("agent-llama") / "llama-server.log"
    process = LlamaServerProcess(spec, log_path=log_path).start()
    try:
        process.wait_healthy(180)
        yield spec.base_url
    finally:
        process.stop()


@pytest.fixture
def agent_worker(transactional_db, agent_llama_server):  # noqa: ANN001, ANN201
    """The large-context llama-server as a healthy production worker; its model capped at
    OUTPUT_CAP output tokens."""
    from fleet.models import CatalogModel
    from fleet.services import worker_register

    worker = worker_register(name="agent-worker", base_url=agent_llama_server, model_id=AGENT_MODEL,
                             pool_name="production", slots=1, context_length=AGENT_CONTEXT, state="healthy",
                             api_key=FIXTURE_WORKER_KEY)
    CatalogModel.objects.filter(public_id=AGENT_MODEL).update(max_output_tokens=OUTPUT_CAP)
    return worker
