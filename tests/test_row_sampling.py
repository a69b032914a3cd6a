"""Per-request sampling (afm.common.row_sampling): a row's draw is its own, whatever it is batched with."""

from __future__ import annotations

import torch

from afm.common.row_sampling import SeedBook, request_seed, sample_rows


def test_a_rows_draw_does_not_depend_on_the_other_rows():
    probs = torch.softmax(torch.randn(5, 50, generator=torch.Generator().manual_seed(1)), -1)
    alone = [int(sample_rows(probs[i:i + 1], [torch.Generator().manual_seed(100 + i)])[0]) for i in range(5)]
    together = sample_rows(probs, [torch.Generator().manual_seed(100 + i) for i in range(5)]).tolist()
    reversed_ = sample_rows(probs.flip(0), [torch.Generator().manual_seed(100 + i) for i in reversed(range(5))])
    assert together == alone and reversed_.tolist()[::-1] == alone


def test_draws_follow_the_distribution_and_skip_impossible_ids():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]])
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(6)
    for _ in range(4000):
        counts[int(sample_rows(probs, [gen])[0])] += 1
    assert counts[0] == counts[2] == counts[5] == 0
    # 4000 draws: each share within 0.03 of its probability (over 4 standard deviations)
    assert torch.allclose(counts / 4000, probs[0], atol=0.03), counts / 4000
    # unnormalised rows (what a top-p cut leaves before renormalising) sample the same distribution
    gen_a, gen_b = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert [int(sample_rows(probs, [gen_a])[0]) for _ in range(50)] == \
        [int(sample_rows(probs * 3.0, [gen_b])[0]) for _ in range(50)]


def test_identical_prompts_get_successive_draws_and_the_book_is_reproducible():
    book = SeedBook(5)
    a = [book.seed_for([1, 2, 3]) for _ in range(3)]
    b = book.seed_for([1, 2, 4])
    assert len(set(a)) == 3 and b not in a
    assert a == [request_seed(5, [1, 2, 3], k) for k in range(3)]
    # another book with the same base, asked in another order, hands out the same seeds for the same requests
    other = SeedBook(5)
    assert other.seed_for([1, 2, 4]) == b and [other.seed_for([1, 2, 3]) for _ in range(3)] == a
    assert SeedBook(6).seed_for([1, 2, 3]) != a[0] and book.seed_for([1, 2, 3], base=6) == request_seed(6, [1, 2, 3], 0)


def test_a_draw_at_the_very_top_of_the_range_takes_the_last_id_with_mass(monkeypatch):
    """The largest uniform number below 1 times the row's total can round up to the total: never past the end,
    never an id of zero probability."""
    probs = torch.tensor([[0.25, 0.75, 0.0, 0.0]])
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.tensor(1.0 - 2.0 ** -24))
    assert sample_rows(probs, [torch.Generator()]).tolist() == [1]
