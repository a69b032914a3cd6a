"""Exact bytes of every token id, so token boundaries can be placed on the UTF-8 text they decode to.

Decoding tokens one at a time is wrong for byte-level BPE (a token may hold half of an emoji) and slow. Instead we
build, once per tokenizer, a table ``id -> bytes`` from the vocabulary: byte-level BPE (GPT-2, Qwen, Llama 3) maps
its printable alphabet back to bytes; SentencePiece-style vocabularies map ``▁`` to a space and ``<0xNN>`` to a
byte; added and special tokens are their literal content. The table is checked on a probe text (tags, CRLF,
CJK, emoji) and refused with a clear error if the tokenizer does not round-trip through it.
"""

from __future__ import annotations

import json
import logging
import re
from itertools import accumulate
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

PROBE = (
    "<think>plan</think>\n<web_search>q</web_search>\n\n<observation>\nr\u00e9sum\u00e9 \u4e2d\u6587 \U0001f600 a\r\nb"
    "\n</observation>\n\n\n<answer> 42 </answer>  x"
)
_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte <-> printable-character table used by every byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


def _decoder_kind(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    if decoder is None:
        return "unknown"
    # Only the decoder is serialised: the whole tokenizer's JSON is megabytes for a 151k vocabulary.
    state = json.loads(decoder.__getstate__())
    kinds = {state.get("type")} | {d.get("type") for d in state.get("decoders", []) or []}
    if "ByteLevel" in kinds:
        return "byte_level"
    if "ByteFallback" in kinds or "Metaspace" in kinds or "Replace" in kinds:
        return "sentencepiece"
    return "unknown"


# str.translate table: byte-level character -> the latin-1 character of its byte; any other character below 256
# goes to U+FFFF so that encoding to latin-1 fails and the token takes the slow, exact path.
_TO_LATIN1 = {c: 0xFFFF for c in range(256)}
_TO_LATIN1.update({ord(c): b for c, b in _UNICODE_TO_BYTE.items()})


def _id_to_token(tokenizer: Any, size: int) -> list[str | None]:
    """Every id's vocabulary string; one dict from the Rust backend is far faster than 151k conversions."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    tokens: list[str | None] = [None] * size
    if backend is not None:
        for tok, i in backend.get_vocab(with_added_tokens=True).items():
            if 0 <= i < size:
                tokens[i] = tok
        return tokens
    return list(tokenizer.convert_ids_to_tokens(list(range(size))))


class TokenBytes:
    """``id -> bytes`` for one tokenizer, plus vectorised byte offsets of a token sequence."""

    def __init__(self, tokenizer: Any) -> None:
        self.kind = _decoder_kind(tokenizer)
        size = len(tokenizer)
        tokens = _id_to_token(tokenizer, size)
        added = {i: t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
        table: list[bytes] = []
        for i, tok in enumerate(tokens):
            if i in added:
                table.append(added[i].encode("utf-8"))
            elif tok is None:
                table.append(b"")
            elif self.kind == "byte_level":
                try:
                    table.append(tok.translate(_TO_LATIN1).encode("latin-1"))
                except UnicodeEncodeError:  # not in the byte-level alphabet (rare): let the tokenizer say
                    table.append(tokenizer.decode([i], skip_special_tokens=False).encode("utf-8"))
            elif self.kind == "sentencepiece":
                m = _SP_BYTE.match(tok)
                table.append(bytes([int(m.group(1), 16)]) if m else tok.replace("\u2581", " ").encode("utf-8"))
            else:
                table.append(tokenizer.decode([i], skip_special_tokens=False).encode("utf-8"))
        self.table = table
        self.lengths_list = [len(b) for b in table]
        self.added = tuple(sorted({b.encode("utf-8") for b in added.values() if b}))  # special/added tokens
        # The same bytes as flat arrays: a run's bytes and offsets are then gathered by numpy in a few calls
        # instead of one Python object per token (per-token lookups in a 151k-entry table miss the CPU caches).
        self.flat = np.frombuffer(b"".join(table), dtype=np.uint8)
        # narrow dtypes keep the random gathers in few cache lines (a 151k vocabulary: 0.9 MB instead of 2.4 MB)
        self.lengths = np.array(self.lengths_list, dtype=np.uint16 if max(self.lengths_list, default=0) < 2**16
                                else np.int64)
        starts = np.cumsum(self.lengths, dtype=np.int64) - self.lengths
        self.starts = starts.astype(np.int32) if len(self.flat) < 2**31 else starts
        self._check(tokenizer)

    def _check(self, tokenizer: Any) -> None:
        ids = tokenizer.encode(PROBE, add_special_tokens=False)
        got = self.join(ids)
        want = PROBE.encode("utf-8")
        # SentencePiece may prepend a space (add_dummy_prefix); the spans we look for are unaffected.
        if got != want and got.lstrip(b" ") != want:
            raise ValueError(
                f"tokenizer {type(tokenizer).__name__} ({self.kind}) does not round-trip through its vocabulary "
                f"bytes, so observation masks cannot be placed on token boundaries: {got[:80]!r} != {want[:80]!r}"
            )

    def join(self, ids: list[int]) -> bytes:
        """The UTF-8 bytes that ``ids`` decode to."""
        return b"".join(map(self.table.__getitem__, ids))

    def gather(self, ids: list[int] | np.ndarray) -> tuple[bytes, np.ndarray]:
        """``(join(ids), ends(ids))`` with numpy: the bytes of a run and each token's exclusive end offset."""
        arr = np.asarray(ids, dtype=np.int64)
        lens = self.lengths[arr]
        ends = np.cumsum(lens, dtype=np.int64)
        # byte j of the run is flat[j + (start of its token in flat) - (start of its token in the run)]
        shift = np.repeat(self.starts[arr] - ends + lens, lens)
        shift += np.arange(len(shift))
        return self.flat[shift].tobytes(), ends

    def ends(self, ids: list[int]) -> list[int]:
        """Exclusive end byte offset of each token in ``join(ids)``."""
        return list(accumulate(map(self.lengths_list.__getitem__, ids)))
