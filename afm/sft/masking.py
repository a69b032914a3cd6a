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

from bisect import bisect_left, bisect_right
from itertools import accumulate

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


def _runs(labels: list[int]) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` runs of trained labels."""
    runs, start = [], None
    for i, lab in enumerate(labels):
        if lab != IGNORE_INDEX:
            if start is None:
                start = i
        elif start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(labels)))
    return runs


def _ends_with_partial_open(blob: bytes, open_tag: bytes) -> bool:
    """True when ``blob`` ends with a cut-off opening tag (``<ob``, ``<observation``): truncation hit the tag."""
    for k in range(len(open_tag) - 1, 1, -1):
        if blob.endswith(open_tag[:k]):
            return True
    return False


def mask_observation_labels(labels: list[int], table: TokenBytes, tag: str = "observation") -> MaskResult:
    """Set to IGNORE_INDEX every label token that belongs to an observation span (see module docstring)."""
    out = list(labels)
    runs = _runs(out)
    target = sum(b - a for a, b in runs)
    masked = mixed = n_obs = 0
    truncated = False
    open_tag = f"<{tag}>".encode()
    lengths = table.lengths_list
    for a, b in runs:
        ids = out[a:b]
        blob = table.join(ids)
        if b == len(out) and _ends_with_partial_open(blob, open_tag):
            truncated = True
        spans = find_observations(blob, tag)
        if not spans:
            continue
        ends = list(accumulate(lengths[i] for i in ids))
        starts = [e - lengths[i] for e, i in zip(ends, ids, strict=True)]
        prev_end = 0
        for s in spans:
            n_obs += 1
            truncated |= not s.closed
            c0 = bisect_right(ends, s.core_start)  # first token ending after the core starts
            c1 = bisect_left(starts, s.core_end)  # tokens starting before the core ends
            # only the first and last core tokens can reach outside the padded span
            for k in {c0, c1 - 1} if c1 > c0 else ():
                mixed += starts[k] < s.start or ends[k] > s.end
            p0 = bisect_left(starts, s.start)  # tokens lying entirely inside the padded span
            p1 = bisect_right(ends, s.end)
            lo, hi = max(min(c0, p0), prev_end), max(c1, p1)
            if hi > lo:
                out[a + lo : a + hi] = [IGNORE_INDEX] * (hi - lo)
                masked += hi - lo
                prev_end = hi
    return MaskResult(out, target, masked, mixed, n_obs, truncated)
