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
