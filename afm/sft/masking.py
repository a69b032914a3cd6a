"""Label masking of observation spans on token boundaries, computed from byte offsets.

Rule (per token of a trained label run):
- a token that overlaps an observation's core (``<observation>`` … ``</observation>``) is masked;
- a token made only of the whitespace the environment put around an observation is masked;
- a token that mixes model-written characters with padding whitespace (``>\\n\\n`` after ``</web_search>``
  under the Qwen2 pre-tokenizer) stays trained: the model must learn to finish its tool tag.
The result does not depend on how the tokenizer splits ``\\n\\n``, spaces or CRLF around the tags.

A run cut by ``cutoff_len`` may end before the opening tag is complete (``…</crawl_page>\\n\\n<``: with Qwen's
vocabulary ``<`` is a token of its own before ``observation``) or in the padding before it. Such a tail is
ambiguous from the tokens alone, so it is resolved against the untruncated texts when the caller passes them:
a cut inside the opening tag is ``truncated`` (the sample is dropped), a cut in the padding masks the padding.
Without the texts a cut-off opening tag, even a lone ``<``, counts as truncated.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from afm.sft.token_bytes import TokenBytes
from afm.trajectory.spans import find_observations

IGNORE_INDEX = -100
_PAD = b" \t\r\n\f\v"  # the padding alphabet of afm.trajectory.spans
_CONTEXT = 48  # bytes before a cut tail that locate it in the untruncated text


@dataclass
class MaskResult:
    """Masked labels plus what happened to them."""

    labels: list[int]
    target_tokens: int  # tokens trained before masking
    masked_tokens: int  # of which masked as observation
    mixed_tokens: int  # masked tokens that also held model-written characters (tag glued to a tag)
    observations: int
    truncated: bool  # a label run ends inside an observation or its opening tag (cut by cutoff_len)


def _runs(labels: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` runs of trained labels."""
    trained = labels != IGNORE_INDEX
    if not trained.any():
        return []
    first = int(trained.argmax())
    if trained[first:].all():  # single-turn SFT, DPO: one run after the prompt
        return [(first, len(labels))]
    edges = np.flatnonzero(np.diff(trained.view(np.int8), prepend=0, append=0)).tolist()
    return list(zip(edges[::2], edges[1::2], strict=True))


def _cut_tail(blob: bytes, open_tag: bytes, floor: int) -> tuple[int, int] | None:
    """``(pad_start, tag_start)`` when ``blob`` ends in a proper prefix of ``open_tag`` (a lone ``<`` included)
    and/or padding whitespace after byte ``floor``; ``tag_start == len(blob)`` when no tag was begun."""
    n = len(blob)
    j = n
    cut = blob.rfind(b"<", max(floor, n - len(open_tag) + 1))
    if cut >= 0 and open_tag.startswith(blob[cut:]):
        j = cut
    w = j
    while w > floor and blob[w - 1] in _PAD:
        w -= 1
    return (w, j) if w < n else None


@lru_cache(maxsize=16)
def _pad_then_open(tag: str) -> re.Pattern[str]:
    return re.compile(rf"[ \t\r\n\f\v]*<{re.escape(tag)}>")


def _observation_follows(blob: bytes, pad_start: int, tag: str, source: Sequence[str]) -> bool | None:
    """Does the untruncated text go on from the end of ``blob`` into ``<tag>`` (through padding)?

    ``blob[pad_start:]`` is the cut tail; the bytes before it locate the cut in ``source``. None when the cut
    cannot be found there (the tokens are not a copy of any source text).
    """
    start = max(0, pad_start - _CONTEXT)
    while start < pad_start and 0x80 <= blob[start] < 0xC0:  # do not begin inside a UTF-8 character
        start += 1
    try:
        key = blob[start:].decode("utf-8")
    except UnicodeDecodeError:
        return None
    tail_chars = len(blob) - pad_start  # the tail is ASCII: bytes == characters
    pattern = _pad_then_open(tag)
    texts: Sequence[str] = source
    for attempt in range(2):
        found = False
        for text in texts:
            i = text.find(key)
            while i >= 0:
                found = True
                if pattern.match(text, i + len(key) - tail_chars):
                    return True
                i = text.find(key, i + 1)
        if found:
            return False
        # Tokenizers normalise with NFC; only a non-ASCII key can differ from its source text. A padding-only
        # tail is not worth normalising every text for (a row's natural end, "<|im_end|>\n", lands here).
        if attempt or key.isascii() or blob[-1] in _PAD:
            return None
        texts = [unicodedata.normalize("NFC", t) for t in source]
    return None


def mask_observation_labels(labels: list[int], table: TokenBytes, tag: str = "observation",
                            source: Sequence[str] | None = None, inplace: bool = False) -> MaskResult:
    """Set to IGNORE_INDEX every label token that belongs to an observation span (see module docstring).

    ``source``: the untruncated message texts the labels were encoded from, used only to tell what a run cut by
    ``cutoff_len`` was about to become. ``inplace``: write into ``labels`` instead of a copy.
    """
    out = labels if inplace else list(labels)
    arr = np.array(out, dtype=np.int64)
    runs = _runs(arr)
    target = sum(b - a for a, b in runs)
    masked = mixed = n_obs = 0
    truncated = False
    open_tag = f"<{tag}>".encode()
    n_labels = len(out)
    ignore = [IGNORE_INDEX]
    for a, b in runs:
        blob, ends = table.gather(arr[a:b])
        spans = find_observations(blob, tag)
        tail = None
        if b == n_labels:  # only the last run of a row can have been cut by cutoff_len
            tail = _cut_tail(blob, open_tag, spans[-1].end if spans else 0)
        if tail is not None:
            pad_start, tag_start = tail
            partial = tag_start < len(blob)
            if not partial and table.added and blob.endswith(table.added, 0, pad_start):
                tail = None  # whitespace after a special token: a row's natural end ("<|im_end|>\n"), not a cut
        if tail is not None:
            follows = _observation_follows(blob, pad_start, tag, source) if source is not None else None
            if not (follows or (partial and follows is None)):
                tail = None
        if not spans and tail is None:
            continue
        # every byte offset we need a token index for, in one searchsorted: n_ending_by(x) = tokens ending <= x
        xs = []
        for s in spans:
            xs += (s.core_start, s.core_end - 1, s.start - 1, s.end)
        if tail is not None:
            xs += (pad_start - 1, tag_start)
        ks = ends.searchsorted(xs, side="right").tolist()
        prev_end = 0
        for i, s in enumerate(spans):
            n_obs += 1
            truncated |= not s.closed
            c0, c_last, p0, p1 = ks[4 * i : 4 * i + 4]  # c_last: the token holding the core's last byte
            p0 = p0 + 1 if s.start else 0  # tokens starting before the padded span
            # only the first and last core tokens can reach outside the padded span
            for k in (c0, c_last) if c_last > c0 else (c0,):
                mixed += (int(ends[k - 1]) if k else 0) < s.start or int(ends[k]) > s.end
            lo, hi = max(min(c0, p0), prev_end), max(c_last + 1, p1)
            if hi > lo:
                out[a + lo : a + hi] = ignore * (hi - lo)
                masked += hi - lo
                prev_end = hi
        if tail is not None:
            truncated |= partial
            # padding-only tokens and any token holding part of the cut tag, as the rule would mask them
            lo = ks[-2] + 1 if pad_start else 0
            if partial:
                lo = min(lo, ks[-1])
            lo, k = max(lo, prev_end), b - a
            if k > lo:
                out[a + lo : a + k] = ignore * (k - lo)
                masked += k - lo
    return MaskResult(out, target, masked, mixed, n_obs, truncated)
