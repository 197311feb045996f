"""`manage.py verify_path` against the real path: nginx (TLS) -> the session's gateway -> the
session's llama-server, and against a registered worker that is down (a port nothing listens on)."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from fleet.local_worker import free_port
from tests.conftest import FIXTURE_WORKER_KEY, MODEL_ID
from tests.deploy.proxy import RunningNginx

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def run(*args: str) -> tuple[str, CommandError | None]:
    out = StringIO()
    try:
        call_command("verify_path", *args, stdout=out)
    except CommandError as error:
        return out.getvalue(), error
    return out.getvalue(), None


def line_of(output: str, *words: str) -> str:
    lines = [line for line in output.splitlines() if all(word in line for word in words)]
    assert lines, f"no line with {words} in:\n{output}"
    return lines[0]


def test_the_whole_path_passes_through_the_proxy(proxy: RunningNginx, worker, student_key) -> None:  # noqa: ANN001
    _, raw_key = student_key
    output, error = run("--base-url", proxy.prepared.https_url, "--api-key", raw_key,
                        "--ca-file", str(proxy.prepared.cert))
    assert error is None, output
    assert output.strip().splitlines()[-1].startswith("VERDICT: PASS - the whole path works")
    assert "PASS" in line_of(output, "public TLS", "certificate valid")
    for hop in ("/healthz", "/readyz", "/v1/models", "/api/version", "/api/tags", "/v1/messages"):
        assert "PASS" in line_of(output, hop), hop
    assert "PASS" in line_of(output, "worker /health (private)", "it-worker")
    assert "PASS" in line_of(output, "worker key (private)", "it-worker", "401 without its key")
    assert "PASS" in line_of(output, "worker stream (private)", "it-worker")  # sent with its key
    assert "served by it-worker" in line_of(output, "gateway -> worker stream", "it-worker")
    assert worker.api_key not in output
    timing = line_of(output, "it-worker", "healthy", "production").split()
    # /health, direct TTFT, gateway->worker TTFT (the gateway's log), end-to-end TTFT: all measured
    assert all(cell.isdigit() for cell in timing[3:7]), timing
    assert timing[7] == "it-worker"
    assert raw_key not in output and raw_key.split("-", 2)[2] not in output


def test_a_registered_worker_that_is_down_is_named_as_the_broken_hop(proxy, worker, student_key) -> None:  # noqa: ANN001
    from fleet.services import worker_register

    # Registered as healthy: the monitor has not noticed yet, so the gateway may still try it.
    worker_register(name="down-worker", base_url=f"http://127.0.0.1:{free_port()}", model_id=MODEL_ID,
                    pool_name="production", slots=4, context_length=4096, state="healthy")
    _, raw_key = student_key
    output, error = run("--base-url", proxy.prepared.https_url, "--api-key", raw_key,
                        "--ca-file", str(proxy.prepared.cert))
    assert error is not None and error.returncode == 1
    verdict = output.strip().splitlines()[-1]
    assert verdict.startswith("VERDICT: FAIL")
    assert "worker /health (private) down-worker" in verdict
    assert "FAIL" in line_of(output, "worker /health (private)", "down-worker", "ConnectError")
    # The healthy worker and the public routes still pass: only the broken hop is blamed.
    assert "PASS" in line_of(output, "worker /health (private)", "it-worker")
    assert "PASS" in line_of(output, "/v1/messages")
    assert "PASS" in line_of(output, "gateway -> worker stream", "served by it-worker")
    assert "it-worker:" not in verdict
    # Tried through the gateway, the dead worker is failed over (the student would not notice),
    # and verify_path says so instead of counting the answer as the dead worker's.
    gateway_hop = line_of(output, "gateway -> worker stream", "down-worker")
    assert "FAIL" in gateway_hop and "failed over to it-worker" in gateway_hop


def test_an_untrusted_certificate_fails_the_tls_hop(proxy, worker, student_key) -> None:  # noqa: ANN001
    _, raw_key = student_key
    output, error = run("--base-url", proxy.prepared.https_url, "--api-key", raw_key, "--timeout", "20")
    assert error is not None
    assert "FAIL" in line_of(output, "public TLS", "CERTIFICATE_VERIFY_FAILED")
    assert "public TLS" in output.strip().splitlines()[-1]


def test_a_wrong_key_fails_the_key_hop(gateway, worker) -> None:  # noqa: ANN001
    output, error = run("--base-url", gateway.url, "--api-key", "ocs-aaaaaaaaaa-" + "b" * 40)
    assert error is not None
    assert "FAIL" in line_of(output, "key", "/v1/models", "401")
    assert "SKIP" in line_of(output, "public TLS", "plain http")


def test_bad_arguments_get_a_clear_error() -> None:
    with pytest.raises(CommandError, match="--base-url must start with https://"):
        call_command("verify_path", "--base-url", "ai.school.example", "--api-key", "x")


def test_each_worker_is_reached_through_the_gateway(proxy, worker, student_key, spare_llama_servers,  # noqa: ANN001
                                                    settings) -> None:  # noqa: ANN001
    """Two real workers: with shared live state (Redis) verify_path steers one request onto
    each through the gateway and the request log confirms who served it; with in-process live
    state it cannot steer, and says so as a warning instead of claiming a worker it never reached."""
    from fleet.services import worker_register

    second = spare_llama_servers()
    worker_register(name="it-worker-b", base_url=second.spec.base_url, model_id=MODEL_ID, pool_name="production",
                    slots=4, context_length=4096, state="healthy", api_key=FIXTURE_WORKER_KEY)
    _, raw_key = student_key
    output, error = run("--base-url", proxy.prepared.https_url, "--api-key", raw_key,
                        "--ca-file", str(proxy.prepared.cert))
    assert error is None, output
    assert "served by it-worker " in line_of(output, "gateway -> worker stream", "it-worker ") + " "
    second_hop = line_of(output, "gateway -> worker stream", "it-worker-b")
    if settings.REDIS_URL:
        assert "PASS" in second_hop and "served by it-worker-b" in second_hop
        assert output.strip().splitlines()[-1].startswith("VERDICT: PASS - the whole path works")
    else:
        assert "WARN" in second_hop and "cannot steer" in second_hop
        assert "1 warning" in output.strip().splitlines()[-1]


def test_an_unreachable_fleet_database_is_a_named_failure_not_a_traceback(gateway) -> None:  # noqa: ANN001
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(DATABASE_URL=f"postgres://nobody@127.0.0.1:{free_port()}/ocs", OCS_ENV="test")
    result = subprocess.run([sys.executable, "manage.py", "verify_path", "--base-url", gateway.url,
                             "--api-key", "ocs-aaaaaaaaaa-" + "b" * 40, "--timeout", "10"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    assert "fleet database" in result.stdout.strip().splitlines()[-1]
    assert "PASS" in line_of(result.stdout, "public", "/healthz")
