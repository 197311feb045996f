"""The shared-prefix rule (inference/admission/shared_prefix.py): which start of a system prompt is public."""
from __future__ import annotations

from inference.admission.shared_prefix import (
    BLOCK_CHARS,
    MAX_BLOCKS,
    MIN_K,
    MIN_PUBLIC_BLOCKS,
    block_names,
    leading_message,
    public_blocks,
    public_text,
)

SECRET = b"s" * 32


def text(blocks: int, tail: str = "") -> str:
    return "".join(chr(ord("a") + i % 26) * BLOCK_CHARS for i in range(blocks)) + tail


def test_only_a_leading_system_or_developer_string_is_ever_shared() -> None:
    assert leading_message({"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "q"}]}) \
        == ("system", "x")
    assert leading_message({"messages": [{"role": "developer", "content": "x"}]}) == ("developer", "x")
    assert leading_message({"messages": [{"role": "user", "content": "x"}]}) is None
    assert leading_message({"messages": [{"role": "system", "content": [{"type": "text", "text": "x"}]}]}) is None
    assert leading_message({"messages": []}) is None
    assert leading_message({"prompt": "x"}) is None


def test_blocks_are_named_by_everything_before_them_so_a_change_renames_every_later_block() -> None:
    a = block_names(text(4, tail="private"), SECRET)
    assert len(a) == 4  # the tail shorter than a block is never named, so never shared
    b = block_names(text(2) + "Z" + text(4)[2 * BLOCK_CHARS + 1:], SECRET)
    assert b[:2] == a[:2] and b[2] != a[2] and b[3] != a[3]  # block 3 is the same text, not the same name
    assert block_names(text(4), b"t" * 32) != a  # keyed: names say nothing without the site's secret
    assert len(block_names(text(MAX_BLOCKS + 5), SECRET)) == MAX_BLOCKS


def test_the_public_prefix_is_the_leading_run_of_blocks_sent_by_k_students() -> None:
    assert public_blocks([3, 3, 3, 2, 3], 3) == 3  # stops at the first block fewer sent
    assert public_blocks([5, 5, 5], 3) == 3
    assert public_blocks([2, 2, 2], 3) == 0
    assert public_blocks([3] + [1] * 5, 3) == 0  # shorter than MIN_PUBLIC_BLOCKS: not worth a file
    assert MIN_PUBLIC_BLOCKS == 2 and public_blocks([3, 3], 3) == 2
    assert MIN_K == 3 and public_blocks([9, 9, 9], 2) == 0  # k = 2: a prober and one classmate would do
    assert public_blocks([9, 9, 9], 1) == 0 and public_blocks([9, 9, 9], 0) == 0
    assert public_text(text(4, tail="private"), 2) == text(2)
