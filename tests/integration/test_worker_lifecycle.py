"""A local worker started again (serve_worker, the embedded worker) is `starting` from before its
new llama-server launches until /health answers 200, and its cold start is recorded (issue 9)."""
from __future__ import annotations

import pytest

from fleet.local_worker import free_port

pytestmark = pytest.mark.integration


def test_a_worker_started_again_is_starting_while_it_loads_and_records_its_cold_start(transactional_db) -> None:  # noqa: ANN001
    from fleet.embedded import local_worker_start, local_worker_stop
    from fleet.models import WorkerEvent
    from fleet.services import worker_register

    port = free_port()
    # What a serve_worker killed outright leaves behind: a row that still says healthy.
    worker_register(name="again", base_url=f"http://127.0.0.1:{port}", model_id="smollm2-135m-instruct",
                    pool_name="production", state="healthy")
    process, worker, seconds = local_worker_start(name="again", port=port, pool="production", slots=1)
    try:
        assert worker.state == "healthy" and worker.process_pid == process.pid
        transitions = list(WorkerEvent.objects.filter(worker=worker).order_by("at", "id")
                           .values_list("from_state", "to_state", "reason", "cold_start_s"))
        assert [(f, t) for f, t, _, _ in transitions[-2:]] == [("healthy", "starting"), ("starting", "healthy")]
        assert "process restarting" in transitions[-2][2]
        cold_start_s = transitions[-1][3]
        assert cold_start_s is not None and cold_start_s >= seconds * 0.5  # from the launch, not from the row
    finally:
        local_worker_stop(process=process, worker=worker, reason="test over")
    worker.refresh_from_db()
    assert worker.state == "down"
