"""``attention_chunks``: a causal attention call split into query chunks that leave out the keys after them.

A training step's attention carries an explicit mask whenever a micro-batch is padded or runs against a cached prefix
(``share_prefix``), and PyTorch's CPU flash-attention kernel then computes every query against every key, the causal
upper triangle included (even with its causal flag it skips only whole blocks of 512 keys). With N chunks, the
queries ``[a, b)`` attend only the keys up to their last position, ``[0, offset + b)`` (``offset``: the keys before
the first query, a cached prefix), under the matching slice of the mask; what a chunk leaves out is masked for
every one of its queries, so the result is the same attention (the mask is checked: a call whose mask lets a query
see a later key runs whole). About ``(N + 1) / 2N`` of the query-key pairs are computed for a square call: on the
quickstart's student (8 rows of ~480 queries against ~576 keys, 32-wide heads) three chunks took the forward and
backward of an attention call 42.6 -> 35.7 ms (benchmarks/RESULTS.md, twenty-eighth session). A GPU's flash kernels
skip the triangle themselves: leave it off there.

Calls with fewer than :data:`MIN_QUERIES` queries, more queries than keys, ``output_attentions``, or a mask that is
not a 4D boolean one (transformers' ``sdpa`` masks are) run whole.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import torch

from afm.sft.attention_override import Kernel, overridden_attention

MIN_QUERIES = 64  # below, a second kernel call costs more than the pairs it skips


def bounds(queries: int, chunks: int) -> list[tuple[int, int]]:
    """``chunks`` (at most ``queries``) consecutive query ranges of near-equal size covering ``[0, queries)``."""
    n = max(1, min(chunks, queries))
    cuts = [round(queries * i / n) for i in range(n + 1)]
    return list(itertools.pairwise(cuts))


def causal_mask(rows: range, keys: int, offset: int, device: torch.device) -> torch.Tensor:
    """The boolean causal mask ``[1, 1, len(rows), keys]`` of queries ``rows`` whose first sits after ``offset``
    keys (True: attended)."""
    q = torch.arange(rows.start, rows.stop, device=device)[:, None]
    return (torch.arange(keys, device=device)[None, :] <= offset + q)[None, None]


def in_causal_chunks(kernel: Kernel, chunks: int) -> Kernel:
    """``kernel`` (a transformers attention function) run once per query chunk over the keys up to it."""

    def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        queries, keys = query.shape[2], key.shape[2]
        offset = keys - queries
        whole = (chunks < 2 or queries < MIN_QUERIES or offset < 0 or kwargs.get("output_attentions")
                 or args)  # positional extras (dropout, scaling) are passed by name in transformers' models
        if attention_mask is None:
            # no mask: the kernel's own causal flag, as transformers decides it (a decoder's self-attention)
            whole = (whole or offset > 0 or kwargs.get("is_causal") is False
                     or not getattr(module, "is_causal", True))
        elif attention_mask.dim() != 4 or attention_mask.dtype != torch.bool or attention_mask.shape[-1] != keys:
            whole = True
        parts = bounds(queries, chunks)
        if not whole and attention_mask is not None:
            # what a chunk leaves out must be masked for each of its queries
            whole = any(bool(attention_mask[..., a:b, offset + b:].any()) for a, b in parts[:-1])
        if whole:
            return kernel(module, query, key, value, attention_mask, *args, **kwargs)
        outs = []
        for a, b in parts:
            end = offset + b
            mask = (causal_mask(range(a, b), end, offset, query.device) if attention_mask is None
                    else attention_mask[..., a:b, :end])
            out, _ = kernel(module, query[:, :, a:b], key[:, :, :end], value[:, :, :end], mask, **kwargs)
            outs.append(out)
        return torch.cat(outs, dim=1), None  # transformers' kernels return [rows, queries, heads, dim]

    attention.__wrapped__ = kernel  # type: ignore[attr-defined]
    return attention


@contextlib.contextmanager
def causal_chunks(model: torch.nn.Module, chunks: int) -> Iterator[None]:
    """Inside: ``model``'s attention calls run in ``chunks`` query chunks (see the module's text)."""
    with overridden_attention(model, lambda kernel: in_causal_chunks(kernel, chunks), "attention_chunks"):
        yield
