"""Sampling whose draws belong to the request, not to the batch it happened to share.

A batched engine that draws every row's next token from one random generator gives each request different random
numbers depending on which other requests were queued with it, in which order, and how long the previous batch
took: multi-turn agents reach the engine whenever their tools answer, so the same seed sampled differently on a busy
machine than on an idle one (the quickstart's RL selection kept 4 to 7 of 8 questions). Here each request carries its own generator, seeded from

* the caller's base seed,
* the prompt's token ids, and
* how many requests with this very prompt (and base seed) came before it: the k-th identical request gets draw k.

Requests with identical prompts are interchangeable, so whichever of them arrives first, the set of samples is the
same; a trajectory's next turn is a new prompt (its own sample and observation appended), seeded the same way. Each
generated token takes exactly one uniform number from its request's generator (inverse-CDF sampling), so a row's
tokens do not depend on the batch's length either. What remains batch-dependent is floating point: a padded batch's
logits can differ from a lone row's in the last bits, which moves a draw only when it lands that close to a boundary.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch only where a generator is made or a row sampled: seeds alone need no torch
    import torch

_MASK64 = (1 << 63) - 1


def _prompt_bytes(prompt_ids: Sequence[int]) -> bytes:
    return b",".join(str(int(t)).encode() for t in prompt_ids)


def _seed(base: int, occurrence: int, prompt: bytes) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(int(base).to_bytes(16, "little", signed=True))
    h.update(int(occurrence).to_bytes(8, "little"))
    h.update(prompt)
    return int.from_bytes(h.digest(), "little") & _MASK64


def request_seed(base: int, prompt_ids: Sequence[int], occurrence: int) -> int:
    """The seed of the ``occurrence``-th request (from 0) with ``prompt_ids`` under ``base``."""
    return _seed(base, occurrence, _prompt_bytes(prompt_ids))


class SeedBook:
    """Hands out :func:`request_seed` values, counting the requests of each (base, prompt) seen so far."""

    def __init__(self, base: int = 0) -> None:
        self.base = int(base)
        self._seen: dict[tuple[int, bytes], int] = {}
        self._lock = threading.Lock()  # engines take requests from an event loop and worker threads

    def seed_for(self, prompt_ids: Sequence[int], base: int | None = None) -> int:
        """The next seed for a request with ``prompt_ids`` (``base`` None: the book's own)."""
        base = self.base if base is None else int(base)
        prompt = _prompt_bytes(prompt_ids)  # encoded once: prompts run to thousands of ids
        key = (base, hashlib.blake2b(prompt, digest_size=16).digest())
        with self._lock:
            k = self._seen.get(key, 0)
            self._seen[key] = k + 1
        return _seed(base, k, prompt)

    def generator(self, prompt_ids: Sequence[int], base: int | None = None) -> torch.Generator:
        """A CPU generator seeded with :meth:`seed_for`."""
        import torch

        return torch.Generator().manual_seed(self.seed_for(prompt_ids, base))


def sample_rows(probs: torch.Tensor, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """One id per row of ``probs`` ([B, V], rows need not sum to 1), row i drawn with ``generators[i]``.

    Inverse CDF with one uniform number a row: the i-th row's id depends only on that row and its generator."""
    import torch

    if probs.dim() != 2 or probs.shape[0] != len(generators):
        raise ValueError(f"sample_rows: probs of shape {tuple(probs.shape)} for {len(generators)} generators")
    # the generators are CPU ones (a request's seed must not depend on the device); the rows stay where they are
    u = torch.stack([torch.rand((), generator=g) for g in generators]).to(probs.device)
    # float32: a float64 cumsum over Gemma's 262k ids is ~10x slower on a CPU (90 ms against 9 ms for 16 rows); a
    # cumsum of non-negative numbers never decreases, and its rounding (~1e-5 over the whole row) moves mass between
    # neighbouring ids only
    cdf = probs.detach().float().cumsum(-1)
    # right=True: the first id whose cumulative mass exceeds the target, never an id of zero probability
    target = (u * cdf[:, -1]).unsqueeze(-1)
    ids = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    # a target rounded up to the total would land past the end: the id where the total is reached has mass
    last = torch.searchsorted(cdf, cdf[:, -1:].contiguous()).squeeze(-1)
    return torch.minimum(ids, last)
