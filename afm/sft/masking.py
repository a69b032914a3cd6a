"""Label masking of observation spans on token boundaries, computed from byte offsets.

Rule (per token of a trained label run):
- a token that overlaps an observation's core (``<observation>`` … ``</observation>``) is masked;
- a token made only of the whitespace the environment put around an observation is masked;
- a token that mixes model-written characters with padding whitespace (``>\\n\\n`` after ``</web_search>``
  under the Qwen2 pre-tokenizer) stays trained: the model must learn to finish its tool tag.
The result does not depend on how the tokenizer splits ``\\n\\n``, spaces or CRLF around the tags.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from afm.sft.token_bytes import TokenBytes
from afm.trajectory.spans import find_observations

IGNORE_INDEX = -100


@dataclass
class MaskResult:
    """Masked labels plus what happened to them."""

    labels: list[int]
    target_tokens: int  # tokens trained before masking
    masked_tokens: int  # of which masked as observation
    mixed_tokens: int  # masked tokens that also held model-written characters (tag glued to a tag)
    observations: int
    truncated: bool  # a label run ends inside an observation (cut by cutoff_len)


def _runs(trained: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` runs of True."""
    if not trained.any():
        return []
    padded = np.concatenate(([False], trained, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True))


def mask_observation_labels(labels: list[int], table: TokenBytes, tag: str = "observation") -> MaskResult:
    """Set to IGNORE_INDEX every label token that belongs to an observation span (see module docstring)."""
    arr = np.asarray(labels, dtype=np.int64)
    trained = arr != IGNORE_INDEX
    out = arr.copy()
    masked = mixed = n_obs = 0
    truncated = False
    for a, b in _runs(trained):
        ids = arr[a:b]
        blob = table.join(ids)
        spans = find_observations(blob, tag)
        if not spans:
            continue
        ends = table.ends(ids)
        starts = ends - table.lengths[ids]
        run_mask = np.zeros(b - a, dtype=bool)
        for s in spans:
            n_obs += 1
            truncated |= not s.closed
            c0 = int(np.searchsorted(ends, s.core_start, side="right"))
            c1 = int(np.searchsorted(starts, s.core_end, side="left"))
            run_mask[c0:c1] = True
            mixed += int(((starts[c0:c1] < s.start) | (ends[c0:c1] > s.end)).sum())
            p0 = int(np.searchsorted(starts, s.start, side="left"))
            p1 = int(np.searchsorted(ends, s.end, side="right"))
            run_mask[p0:p1] = True
        masked += int(run_mask.sum())
        out[a:b][run_mask] = IGNORE_INDEX
    return MaskResult(out.tolist(), int(trained.sum()), masked, mixed, n_obs, truncated)
