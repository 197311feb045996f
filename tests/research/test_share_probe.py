"""The share probe's own arithmetic (the load itself runs against a demo: docs/usage-and-limits.md)."""
from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from research.share_probe import Tally, content_events


def test_only_events_carrying_a_token_count_and_the_window_cuts_by_arrival() -> None:
    chunk = (b'data: {"choices":[{"delta":{"role":"assistant","content":null}}]}\n\n'
             b'data: {"choices":[{"delta":{"content":"Re"}}]}\n\ndata: {"choices":[{"delta":{"content":""}}]}\n\n'
             b'data: {"choices":[{"delta":{"content":"cursion"}}]}\n\ndata: [DONE]\n\n')
    assert content_events(chunk) == 2
    tally = Tally([0.5, 1.0, 29.9, 30.0, 59.0])
    assert (tally.within(0, 30), tally.within(30, 60)) == (3, 2)


@pytest.mark.django_db
def test_the_command_refuses_nonsense_and_a_pool_with_no_worker() -> None:
    with pytest.raises(CommandError, match="--duration"):
        call_command("share_probe", "cancel", "--duration", "0")
    with pytest.raises(CommandError, match="no healthy worker"):
        call_command("share_probe", "cancel", "--duration", "1")


def test_the_quiet_probe_judges_the_chat_p95_under_load_against_alone_and_against_the_machines_reference() -> None:
    from research.quiet_probe import Phase, Turn, answer_text, phase_report, verdict

    assert answer_text(b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\ndata: [DONE]\n\n') == "Hi"
    alone = Phase([Turn("chat", 0, 0.2, 200), Turn("chat", 2, 0.3, 200)])
    load = Phase([Turn("chat", 0, 0.5, 200), Turn("chat", 3, 0.9, 200), Turn("agent-1", 0, 9.0, 200),
                  Turn("agent-1", 1, None, 429)])
    lane_alone = Phase([Turn("chat", 0, 0.6, 200)])
    report = {"alone": phase_report(alone), "load": phase_report(load), "lane_alone": phase_report(lane_alone)}
    assert report["load"]["agents"] == {"turns": 2, "answered": 1, "refused": 1, "refusals": [429],
                                        "ttft_p50_s": 9.0, "ttft_p95_s": 9.0}
    judged = verdict(report, bound=3.0)
    assert judged["chat_p95_ratio"] == pytest.approx(0.9 / 0.3) and judged["holds"]
    assert judged["lane_alone_over_alone"] == pytest.approx(2.0) and judged["load_over_lane_alone"] == pytest.approx(1.5)
    load.turns.append(Turn("chat", 5, None, 429))  # a refused question fails it whatever the p95
    assert not verdict({**report, "load": phase_report(load)}, bound=3.0)["holds"]
