"""The shared-prefix rule (inference/admission/shared_prefix.py): which start of a system prompt is public."""
from __future__ import annotations

from inference.admission.shared_prefix import (
    BLOCK_CHARS,
    MAX_BLOCKS,
    MIN_K,
    MIN_PUBLIC_BLOCKS,
    TOOL_SEPARATOR,
    block_names,
    constant_prefix,
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


def test_the_public_prefix_is_the_leading_run_of_blocks_sent_by_k_students_besides_the_requester() -> None:
    # senders count the requester too (prefix_senders adds them first): k others is k + 1 senders
    assert public_blocks([4, 4, 4, 3, 4], 3) == 3  # stops at the first block fewer others sent
    assert public_blocks([6, 6, 6], 3) == 3
    assert public_blocks([3, 3, 3], 3) == 0  # the requester and two others
    assert public_blocks([4] + [1] * 5, 3) == 0  # shorter than MIN_PUBLIC_BLOCKS: not worth a file
    assert MIN_PUBLIC_BLOCKS == 2 and public_blocks([4, 4], 3) == 2
    assert MIN_K == 3 and public_blocks([9, 9, 9], 2) == 0  # k = 2: a prober and one accomplice would do
    assert public_blocks([9, 9, 9], 1) == 0 and public_blocks([9, 9, 9], 0) == 0
    assert public_text(text(4, tail="private"), 2) == text(2)


def test_k_minus_one_colluders_never_make_a_victims_block_public_to_one_of_them() -> None:
    """A victim and a clique of c students who all send the victim's block: to the prober (one of
    the clique) the other senders are the victim and the c - 1 others; public only once c reaches k."""
    for k in (3, 5, 8):
        for clique in range(1, k):
            assert public_blocks([1 + clique] * 4, k) == 0, (k, clique)  # the victim and the clique
        assert public_blocks([1 + k] * 4, k) == 4  # a clique of k does: the rule's stated limit


def test_the_constant_prefix_is_the_system_text_then_each_tool_and_its_public_part_keeps_tools_whole() -> None:
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "d" * 600}} for i in range(3)]
    prefix = constant_prefix({"messages": [{"role": "system", "content": text(2)}, {"role": "user", "content": "q"}],
                              "tools": tools})
    assert prefix is not None and prefix.role == "system" and len(prefix.tools) == 3
    assert prefix.text.startswith(text(2) + TOOL_SEPARATOR + '{"type":"function"')
    assert prefix.public_part(BLOCK_CHARS) == (text(1), ())  # inside the system text: cut there, no tool
    one_tool = len(text(2)) + len(prefix.text.split(TOOL_SEPARATOR)[1]) + 1
    assert prefix.public_part(one_tool - 1) == (text(2), ())  # a tool not wholly inside is left out
    assert prefix.public_part(one_tool) == (text(2), (tools[0],))
    assert prefix.public_part(len(prefix.text)) == (text(2), tuple(tools))
    assert len(block_names(prefix.text, SECRET)) == len(prefix.text) // BLOCK_CHARS  # tools are named too
    assert constant_prefix({"messages": [{"role": "user", "content": "q"}], "tools": tools}) is None
