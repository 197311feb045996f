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
