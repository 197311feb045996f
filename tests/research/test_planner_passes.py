"""A step as llama.cpp runs it: the batch cut into forward passes (cost.ubatches, after
llama_batch_allocr::split_equal and split_simple in the pinned build), and each pass costed."""
from __future__ import annotations

import pytest

from research.planner.cost import CostModel, Piece, lone_pieces, ubatches


def shape(passes: list[list[Piece]]) -> list[list[tuple[int, int, int]]]:
    return [[(p.slot, p.tokens, p.context) for p in one] for one in passes]


def test_a_decode_token_of_the_slot_before_a_chunk_takes_one_of_its_tokens_into_its_pass() -> None:
    """Slots 0, 1, 3 generate, slot 2 evaluates 80 prompt tokens after 1,000: the first pass holds
    consecutive slots 0, 1, 2 (one token each: the fewest any has); slot 3 is not slot 2's
    neighbour in batch order, so it runs alone; then the rest of the chunk."""
    batch = [Piece(0, 1, 50, True), Piece(1, 1, 60, True), Piece(3, 1, 70, True), Piece(2, 80, 1000)]
    assert shape(ubatches(batch, ubatch_tokens=512, streams=4)) == [
        [(0, 1, 50), (1, 1, 60), (2, 1, 1000)], [(3, 1, 70)], [(2, 79, 1001)]]


def test_neighbours_chunks_share_passes_and_the_longer_is_cut_again() -> None:
    neighbours = [Piece(0, 1, 200, True), Piece(1, 60, 1000), Piece(2, 80, 1000)]
    assert shape(ubatches(neighbours, ubatch_tokens=512, streams=4)) == [
        [(0, 1, 200), (1, 1, 1000), (2, 1, 1000)], [(1, 59, 1001), (2, 59, 1001)], [(2, 20, 1060)]]
    apart = [Piece(0, 1, 200, True), Piece(1, 60, 1000), Piece(3, 80, 1000)]
    assert shape(ubatches(apart, ubatch_tokens=512, streams=4)) == [
        [(0, 1, 200), (1, 1, 1000)], [(1, 59, 1001)], [(3, 80, 1000)]]


def test_a_pass_holds_at_most_a_ubatch_over_its_slots_and_one_stream_cuts_in_order() -> None:
    four = [Piece(slot, 300, 0) for slot in range(4)]
    assert [len(one) for one in ubatches(four, ubatch_tokens=512, streams=4)] == [4, 4, 4]  # 128, 128, 44 each
    assert [one[0].tokens for one in ubatches(four, ubatch_tokens=512, streams=4)] == [128, 128, 44]
    assert shape(ubatches([Piece(0, 758, 10)], ubatch_tokens=512, streams=4)) == [[(0, 512, 10)], [(0, 246, 522)]]
    assert shape(ubatches([Piece(0, 700, 0)], ubatch_tokens=512, streams=1)) == [
        [(0, 512, 0)], [(0, 188, 512)]]
    assert [(p.tokens, p.context) for p in lone_pieces(1100, 5)] == [(512, 5), (512, 517), (76, 1029)]


COST = CostModel(prefill_s_per_token=0.006, decode_s_per_token=0.014, decode_s_per_extra_slot=0.0086,
                 decode_s_per_context_token=1.1e-5, prefill_s_per_context_token=6e-7, small_chunk_tokens=16,
                 small_chunk_s_per_context_token=1e-5, pass_s=0.014 - 0.0086)


def test_bench_shapes_cost_what_the_fit_assumed() -> None:
    """A chunk of at most a ubatch alone, and slots 0..n-1 decoding together, are one pass each:
    the closed forms the calibration fits (so a calibration keeps its meaning)."""
    n, c = 80, 1000
    assert COST.ttft_alone_s(n, c) == pytest.approx(
        0.006 * n + 6e-7 * n * (c + (n - 1) / 2) + 1e-5 * 16 * c)
    batch = [Piece(slot, 1, 144, True) for slot in range(4)]
    assert COST.step_s(batch, streams=4) == pytest.approx(COST.decode_s(4, 4 * 144))


def test_a_chunk_cut_by_a_neighbour_pays_the_small_chunk_term_again_and_a_pass() -> None:
    """Measured on the pinned llama-server (`git show 0c08046:docs/research/planner-validation/passes-probe.txt`): 60
    and 80 new tokens after ~1,000 cached on slots 1 and 2 beside a decoding slot 0 took 15 %
    longer than on slots 1 and 3."""
    d = Piece(0, 1, 200, True)
    neighbours = COST.step_s([d, Piece(1, 60, 1000), Piece(2, 80, 1000)], streams=4)
    apart = COST.step_s([d, Piece(1, 60, 1000), Piece(3, 80, 1000)], streams=4)
    # slot 2's chunk runs as three pieces (1 token after 1,000, 59 after 1,001, 20 after 1,060), each
    # paying the small-chunk term, slot 3's as one (16 x 1,000); slot 1 and the passes (3) the same in both
    extra = 1e-5 * (1 * 1000 + 16 * 1001 + 16 * 1060 - 16 * 1000)
    assert neighbours - apart == pytest.approx(extra)
    assert neighbours / apart > 1.1


def test_two_slots_decoding_in_two_passes_cost_two_one_slot_steps() -> None:
    """Measured: slots 0 and 2 decoding took about twice slot 0 alone; slots 0 and 1 one step and
    an extra slot (passes-probe.txt)."""
    one = COST.step_s([Piece(0, 1, 60, True)], streams=4)
    together = COST.step_s([Piece(0, 1, 60, True), Piece(1, 1, 60, True)], streams=4)
    apart = COST.step_s([Piece(0, 1, 60, True), Piece(2, 1, 60, True)], streams=4)
    assert together == pytest.approx(one + 0.0086 + 1.1e-5 * 60)
    assert apart == pytest.approx(2 * one)
