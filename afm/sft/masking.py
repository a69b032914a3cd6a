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
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from operator import itemgetter

from afm.sft.token_bytes import MARK, TokenBytes
from afm.trajectory.spans import find_observations

IGNORE_INDEX = -100
_MARK = bytes([MARK])
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


def _locators(ids: list[int], get: Callable, table: TokenBytes) -> tuple[Callable, Callable]:
    """``(n_ending_by, bounds_at)`` for one run of token ids.

    ``n_ending_by(x)``: how many tokens end at or before byte ``x``; ``bounds_at(x)``: ``(start, end)`` of the
    token holding byte ``x``. Both scan the joined per-token marks in C; queries come in almost increasing order,
    so the count resumes from the previous position instead of rescanning from 0.
    """
    marks = b"".join(get(table.marks))
    if not table.has_empty or marks.count(_MARK) == len(ids):
        pos = cnt = 0

        def n_ending_by(x: int) -> int:
            nonlocal pos, cnt
            if x >= pos:
                cnt += marks.count(_MARK, pos, x)
            else:
                cnt -= marks.count(_MARK, x, pos)
            pos = x
            return cnt

        def bounds_at(x: int) -> tuple[int, int]:
            return marks.rfind(_MARK, 0, x) + 1, marks.find(_MARK, x) + 1

        return n_ending_by, bounds_at
    # A token with no bytes (an id outside the vocabulary's strings) has no mark: use explicit offsets.
    ends = list(accumulate(map(table.lengths_list.__getitem__, ids)))

    def n_ending_by_list(x: int) -> int:
        return bisect_right(ends, x)

    def bounds_at_list(x: int) -> tuple[int, int]:
        k = bisect_right(ends, x)
        return (ends[k - 1] if k else 0), ends[k]

    return n_ending_by_list, bounds_at_list


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
    runs = _runs(out)
    target = sum(b - a for a, b in runs)
    masked = mixed = n_obs = 0
    truncated = False
    open_tag = f"<{tag}>".encode()
    n_labels = len(out)
    tokens, ignore = table.table, [IGNORE_INDEX]
    for a, b in runs:
        ids = out[a:b]
        get = itemgetter(*ids) if len(ids) > 1 else (lambda seq, i=ids[0]: (seq[i],))
        blob = b"".join(get(tokens))
        spans = find_observations(blob, tag)
        tail = None
        if b == n_labels:  # only the last run of a row can have been cut by cutoff_len
            tail = _cut_tail(blob, open_tag, spans[-1].end if spans else 0)
        if not spans and tail is None:
            continue
        n_ending_by, bounds_at = _locators(ids, get, table)
        prev_end = 0
        for s in spans:
            n_obs += 1
            truncated |= not s.closed
            c0 = n_ending_by(s.core_start)  # first token ending after the core starts
            c1 = n_ending_by(s.core_end - 1) + 1  # tokens starting before the core ends
            # only the first and last core tokens can reach outside the padded span
            for x in (s.core_start, s.core_end - 1) if c1 - 1 > c0 else (s.core_start,):
                start_k, end_k = bounds_at(x)
                mixed += start_k < s.start or end_k > s.end
            p0 = n_ending_by(s.start - 1) + 1 if s.start else 0  # tokens starting before the padded span
            p1 = n_ending_by(s.end)  # tokens ending inside it
            lo, hi = max(min(c0, p0), prev_end), max(c1, p1)
            if hi > lo:
                out[a + lo : a + hi] = ignore * (hi - lo)
                masked += hi - lo
                prev_end = hi
        if tail is not None:
            pad_start, tag_start = tail
            partial = tag_start < len(blob)
            follows = _observation_follows(blob, pad_start, tag, source) if source is not None else None
            if follows or (partial and follows is None):
                truncated |= partial
                # padding-only tokens and any token holding part of the cut tag, as the rule would mask them
                lo = n_ending_by(pad_start - 1) + 1 if pad_start else 0
                if partial:
                    lo = min(lo, n_ending_by(tag_start))
                lo = max(lo, prev_end)
                k = len(ids)
                if k > lo:
                    out[a + lo : a + k] = ignore * (k - lo)
                    masked += k - lo
    return MaskResult(out, target, masked, mixed, n_obs, truncated)
