"""Label masking of observation spans on token boundaries, computed from byte offsets.

Rule (per token of a trained label run):
- a token that overlaps an observation's core (``<observation>`` … ``</observation>``) is masked;
- a token made only of the whitespace the environment put around an observation is masked;
- a token that mixes model-written characters with padding whitespace (``>\\n\\n`` after ``</web_search>``
  under the Qwen2 pre-tokenizer) stays trained: the model must learn to finish its tool tag.
The result does not depend on how the tokenizer splits ``\\n\\n``, spaces or CRLF around the tags.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
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


_IGNORES: list[int] = []


def _runs(labels: list[int]) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` runs of trained labels."""
    n = len(labels)
    k = labels.count(IGNORE_INDEX)
    if len(_IGNORES) < k:
        _IGNORES.extend([IGNORE_INDEX] * (k - len(_IGNORES)))
    # Fast path (single-turn SFT, DPO): all ignored labels form one prefix; list compares run in C.
    if labels[:k] == _IGNORES[:k]:
        return [(k, n)] if k < n else []
    runs, start = [], None
    for i, lab in enumerate(labels):
        if lab != IGNORE_INDEX:
            if start is None:
                start = i
        elif start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, n))
    return runs


def _ends_with_partial_open(blob: bytes, open_tag: bytes) -> bool:
    """True when ``blob`` ends with a cut-off opening tag (``<ob``, ``<observation``): truncation hit the tag."""
    tail = blob[-len(open_tag) :]
    cut = tail.rfind(b"<")
    return cut >= 0 and len(tail) - cut >= 2 and open_tag.startswith(tail[cut:]) and tail[cut:] != open_tag


def mask_observation_labels(labels: list[int], table: TokenBytes, tag: str = "observation") -> MaskResult:
    """Set to IGNORE_INDEX every label token that belongs to an observation span (see module docstring)."""
    out = list(labels)
    runs = _runs(out)
    target = sum(b - a for a, b in runs)
    masked = mixed = n_obs = 0
    truncated = False
    open_tag = f"<{tag}>".encode()
    length_of = table.lengths_list.__getitem__
    for a, b in runs:
        ids = out[a:b]
        blob = table.join(ids)
        if b == len(out) and _ends_with_partial_open(blob, open_tag):
            truncated = True
        spans = find_observations(blob, tag)
        if not spans:
            continue
        ends = list(accumulate(map(length_of, ids)))
        last = len(ends) - 1

        def n_starting_before(x: int, ends: list[int] = ends, last: int = last) -> int:
            # token k starts at ends[k-1] (token 0 at 0): count of tokens whose start is < x
            return 0 if x <= 0 else 1 + bisect_left(ends, x, 0, last)

        prev_end = 0
        for s in spans:
            n_obs += 1
            truncated |= not s.closed
            c0 = bisect_right(ends, s.core_start)  # first token ending after the core starts
            c1 = n_starting_before(s.core_end)  # tokens starting before the core ends
            # only the first and last core tokens can reach outside the padded span
            for k in {c0, c1 - 1} if c1 > c0 else ():
                start_k = ends[k - 1] if k else 0
                mixed += start_k < s.start or ends[k] > s.end
            p0 = n_starting_before(s.start)  # tokens lying entirely inside the padded span
            p1 = bisect_right(ends, s.end)
            lo, hi = max(min(c0, p0), prev_end), max(c1, p1)
            if hi > lo:
                out[a + lo : a + hi] = [IGNORE_INDEX] * (hi - lo)
                masked += hi - lo
                prev_end = hi
    return MaskResult(out, target, masked, mixed, n_obs, truncated)
