"""A short class replay through the real gateway and a real llama-server (SmolLM2): one student
of each persona, scaled small. Checks what is stored and joined, not how fast it was."""
from __future__ import annotations

import pytest

from accounts.models import ApiKey, User
from inference.models import RequestLog
from research.class_metrics import Weights
from research.models import BenchmarkRun
from research.replay_services import ReplayOptions, class_replay_run, replay_json

pytestmark = [pytest.mark.integration, pytest.mark.backend_neutral]  # once, in the embedded pass

PERSONA_FIELDS = {"ttft_ms", "e2e_ms", "completed", "refused", "refused_reasons", "prompt_tokens",
                  "computed_prompt_tokens", "reused_prompt_tokens"}


def test_a_short_class_replay_is_stored_with_the_workers_counts(gateway, worker) -> None:  # noqa: ANN001
    options = ReplayOptions(base_url=gateway.url + "/v1", mix={"agent": 1, "claude": 1, "codex": 1, "chat": 1,
                                                               "burst": 1},
                            duration_s=25, scale=0.02, seed=3, policy="requests", weights=Weights(), force=True)
    run = class_replay_run(options)

    assert run.kind == BenchmarkRun.Kind.CLASS_REPLAY and run.status == BenchmarkRun.Status.DONE, run.error
    report = replay_json(run)
    assert {"per_student", "per_persona", "agents", "jain_index", "cache_hit_rate", "tokens_per_s_per_worker",
            "config"} <= set(report)
    assert report["agents"]["students"] == 3  # agent, claude and codex pooled (the planner's figure)
    assert {"workers", "slots", "context", "policy", "weights"} <= set(report["config"])
    assert report["config"]["policy"] == "requests" and report["config"]["workers"] == 1
    assert sorted(row["persona"] for row in report["per_student"]) == ["agent", "burst", "chat", "claude", "codex"]
    for row in report["per_student"]:
        assert PERSONA_FIELDS <= set(row)
        assert isinstance(row["completed"], int) and isinstance(row["refused"], int)
        assert row["completed"] >= 1, "\n".join(map(str, [row] + run.summary["requests"]))  # every client's dialect got through the gateway
        assert row["prompt_tokens"] > 0  # joined with the request log by X-Request-Id
        assert row["computed_prompt_tokens"] + row["reused_prompt_tokens"] == row["prompt_tokens"]
    assert set(report["per_persona"]) == {"agent", "burst", "chat", "claude", "codex"}
    assert 0 <= report["cache_hit_rate"] <= 1
    # an agent's later turns resend its conversation: the worker finds the prefix in its slot
    agents = [r for r in run.summary["requests"] if r["persona"] in ("agent", "claude", "codex") and r["completed"]]
    assert any(r["reused_prompt_tokens"] > 0 for r in agents)
    # the replay's own accounts, marked, with every key revoked at the end
    people = User.objects.filter(username__startswith="replay-")
    assert people.count() == 5 and all(p.is_replay and p.classroom and p.classroom.is_replay for p in people)
    assert not ApiKey.objects.filter(user__in=people, revoked_at__isnull=True).exists()
    assert RequestLog.objects.filter(user__in=people).exclude(request_id="").count() >= len(run.summary["requests"])
