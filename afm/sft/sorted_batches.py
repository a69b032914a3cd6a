"""Length-sorted micro-batches: the same optimizer steps as a shuffled run, with less padding.

With gradient accumulation (or several ranks) one optimizer step is made of several micro-batches, each padded to
its own longest row. A shuffled sampler mixes long and short rows in every micro-batch, so most of them pad to the
longest row of the step. :class:`LengthSortedStepSampler` draws the rows of each step at random (a fresh
permutation per epoch, chunked into steps) exactly as a shuffled run does, then orders the rows *inside* a step
longest first, so the first micro-batch holds the long rows and the last the short ones. The set of rows a step
trains on is unchanged, and so is its gradient: Transformers divides every micro-batch's summed token loss by the
step's token count (``num_items_in_batch``), whichever micro-batch a row lands in. Only the padding changes.

With several ranks (DDP) the loader hands a step's micro-batches to the ranks in turn (Accelerate: batch ``k`` to
rank ``k % ranks``), and a rank waits for the slowest at every step's gradient all-reduce. Longest-first alone would
give one rank the long rows and another the short ones; instead each band of ``ranks`` micro-batches (the longest
band first) deals its sorted rows to the ranks in turn, so the micro-batches the ranks run side by side are about
equally long and each is still nearly free of padding.

The SFT trainer uses it when the config says ``sort_micro_batches: true`` (:mod:`afm.sft.overlay`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Sampler

logger = logging.getLogger(__name__)


def sorted_step_indices(lengths: Sequence[int], step_size: int, generator: torch.Generator, *, ranks: int = 1,
                        micro_batch: int = 0) -> list[int]:
    """A random permutation of ``range(len(lengths))`` cut into chunks of ``step_size`` (the last may be short),
    each chunk ordered by length, longest first (ties keep the permutation's order). With ``ranks`` > 1, each band of
    ``ranks * micro_batch`` rows of a sorted chunk is dealt to the ranks in turn and laid out as one micro-batch per
    rank, rank 0 first (the order in which the loader hands batches to ranks)."""
    if step_size < 1:
        raise ValueError(f"step_size must be >= 1, got {step_size}")
    if ranks < 1 or (ranks > 1 and micro_batch < 1):
        raise ValueError(f"ranks must be >= 1 and micro_batch >= 1 with several ranks, got {ranks} and {micro_batch}")
    order = torch.randperm(len(lengths), generator=generator).tolist()
    out: list[int] = []
    for start in range(0, len(order), step_size):
        chunk = sorted(order[start:start + step_size], key=lambda i: -lengths[i])
        if ranks == 1:
            out.extend(chunk)
            continue
        band = ranks * micro_batch
        for b in range(0, len(chunk), band):
            rows = chunk[b:b + band]
            if len(rows) < band:  # a short last step: the loader's own split, sorted as before
                out.extend(rows)
                continue
            for r in range(ranks):
                out.extend(rows[r::ranks])
    return out


class LengthSortedStepSampler(Sampler[int]):
    """Each epoch: rows shuffled into steps of ``step_size``, every step's rows longest first.

    ``step_size`` is the rows of one optimizer step: per-device batch x gradient accumulation x ranks. The order
    depends on ``seed`` and the epoch only (``set_epoch``, called by the Trainer each epoch; without it each
    iteration takes the next epoch), so a resumed run skips into the same order.
    """

    def __init__(self, lengths: Sequence[int], step_size: int, seed: int = 0, *, ranks: int = 1,
                 micro_batch: int = 0) -> None:
        if step_size < 1:
            raise ValueError(f"step_size must be >= 1, got {step_size}")
        self.lengths = list(lengths)
        self.step_size = step_size
        self.seed = seed
        self.ranks, self.micro_batch = ranks, micro_batch
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.seed * 1_000_003 + self.epoch)
        self.epoch += 1
        return iter(sorted_step_indices(self.lengths, self.step_size, generator, ranks=self.ranks,
                                        micro_batch=self.micro_batch))


@dataclass(frozen=True)
class PaddingEstimate:
    """Padded tokens of one epoch's micro-batches (each padded to its longest row), shuffled vs sorted."""

    real_tokens: int
    shuffled_tokens: int
    sorted_tokens: int

    def format(self, step_size: int, micro_batch: int, ranks: int = 1) -> str:
        saved = 1.0 - self.sorted_tokens / max(self.shuffled_tokens, 1)
        dealt = f", dealt in turn to {ranks} ranks" if ranks > 1 else ""
        return (f"[afm] sort_micro_batches: each step's {step_size} rows longest first, in micro-batches of "
                f"{micro_batch}{dealt}: tokens an epoch with padding {self.shuffled_tokens:,} shuffled -> "
                f"{self.sorted_tokens:,} sorted ({saved:.0%} fewer; {self.real_tokens:,} without padding), "
                "same rows and gradient per step")


def padding_estimate(lengths: Sequence[int], step_size: int, micro_batch: int, seed: int = 0,
                     ranks: int = 1) -> PaddingEstimate:
    """What sorting saves on one epoch: the same steps cut into micro-batches in shuffled and in sorted order
    (``step_size`` a multiple of ``micro_batch``, so no micro-batch spans two steps; ``ranks``: as the sampler deals)."""
    shuffled = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(seed)).tolist()
    sorted_ = sorted_step_indices(lengths, step_size, torch.Generator().manual_seed(seed),  # the same permutation
                                  ranks=ranks, micro_batch=micro_batch)

    def padded(order: list[int]) -> int:
        return sum(max(lengths[i] for i in order[k:k + micro_batch]) * len(order[k:k + micro_batch])
                   for k in range(0, len(order), micro_batch))

    return PaddingEstimate(real_tokens=sum(lengths), shuffled_tokens=padded(shuffled), sorted_tokens=padded(sorted_))
