"""afm.sft.sorted_batches: the same random steps as a shuffled run, each step's rows longest first."""

from __future__ import annotations

import pytest
import torch

from afm.sft.sorted_batches import LengthSortedStepSampler, padding_estimate, sorted_step_indices


def _chunks(seq: list[int], size: int) -> list[list[int]]:
    return [seq[k:k + size] for k in range(0, len(seq), size)]


def test_each_step_holds_the_permutations_rows_longest_first():
    lengths = [5, 300, 40, 40, 7, 512, 90, 3, 300, 12, 64]  # 11 rows: the last step is short
    gen = torch.Generator().manual_seed(3)
    out = sorted_step_indices(lengths, 4, gen)
    perm = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(3)).tolist()
    assert sorted(out) == list(range(len(lengths)))  # every row once
    for got, drawn in zip(_chunks(out, 4), _chunks(perm, 4), strict=True):
        assert set(got) == set(drawn)  # the same rows per step as the shuffled order
        assert [lengths[i] for i in got] == sorted((lengths[i] for i in got), reverse=True)
    with pytest.raises(ValueError, match="step_size"):
        sorted_step_indices(lengths, 0, gen)


def test_sampler_is_fixed_by_seed_and_epoch_and_moves_on_each_epoch():
    lengths = list(range(1, 65))
    a, b = LengthSortedStepSampler(lengths, 16, seed=7), LengthSortedStepSampler(lengths, 16, seed=7)
    first, second = list(a), list(a)  # without set_epoch each pass is the next epoch
    assert len(a) == 64 and first != second and sorted(first) == sorted(second) == list(range(64))
    b.set_epoch(1)
    assert list(b) == second  # a resumed run (the Trainer calls set_epoch) gets the same order
    assert list(LengthSortedStepSampler(lengths, 16, seed=8)) != first


def test_padding_estimate_counts_each_micro_batch_at_its_longest_row():
    # long and short rows mixed at random into steps of 4: sorted, the long ones share micro-batches
    lengths = [9, 1, 1, 9] * 50
    est = padding_estimate(lengths, step_size=4, micro_batch=2, seed=0)
    assert est.real_tokens == 1000
    assert est.sorted_tokens < est.shuffled_tokens <= 50 * 4 * 9
    assert est.sorted_tokens >= est.real_tokens
    assert "fewer" in est.format(4, 2)
    same = padding_estimate([6] * 40, step_size=8, micro_batch=4)
    assert same.sorted_tokens == same.shuffled_tokens == same.real_tokens == 240


def test_with_ranks_each_band_of_a_step_is_dealt_to_the_ranks_in_turn():
    """Two ranks, micro-batches of 2, steps of 8: the loader gives batch k to rank k % 2, so each band of 4 sorted
    rows becomes [1st, 3rd] for rank 0 and [2nd, 4th] for rank 1: the ranks' micro-batches side by side are about
    equally long (no rank waits on the other's long rows) and each is still sorted."""
    lengths = [5, 300, 40, 41, 7, 512, 90, 3, 301, 12, 64, 8, 9, 10, 11, 13]
    gen = torch.Generator().manual_seed(3)
    dealt = sorted_step_indices(lengths, 8, gen, ranks=2, micro_batch=2)
    plain = sorted_step_indices(lengths, 8, torch.Generator().manual_seed(3))
    assert sorted(dealt) == list(range(16))
    for got, ordered in zip(_chunks(dealt, 8), _chunks(plain, 8), strict=True):
        assert set(got) == set(ordered)  # the same rows per step
        for band in range(2):
            rows = ordered[4 * band: 4 * band + 4]
            assert got[4 * band: 4 * band + 4] == [rows[0], rows[2], rows[1], rows[3]]
    rank0 = [i for k, batch in enumerate(_chunks(dealt, 2)) if k % 2 == 0 for i in batch]
    rank1 = [i for k, batch in enumerate(_chunks(dealt, 2)) if k % 2 == 1 for i in batch]
    # longest first alone would give rank 0 every step's two longest rows
    assert max(lengths[i] for i in rank0[:2]) >= max(lengths[i] for i in rank1[:2])
    assert {lengths[i] for i in rank1[:2]} & {512, 301, 300}
    sampler = LengthSortedStepSampler(lengths, 8, seed=1, ranks=2, micro_batch=2)
    assert sorted(sampler) == list(range(16))
    with pytest.raises(ValueError, match="micro_batch"):
        sorted_step_indices(lengths, 8, gen, ranks=2)
    est = padding_estimate(lengths, 8, 2, ranks=2)
    assert est.real_tokens == sum(lengths) and est.sorted_tokens >= est.real_tokens
    assert "dealt in turn to 2 ranks" in est.format(8, 2, ranks=2)
