"""A reference SentencePiece-BPE tokenizer written from the algorithm (as llama.cpp's SPM tokenizer runs it), for
tests only: an oracle independent of transformers/tokenizers and of afm.model's rebuild.

Special and user-defined tokens are split out first (longest first); in each remaining fragment ' ' becomes '▁',
the fragment starts as single characters, and the adjacent pair whose concatenation is a token with the highest
score is merged (leftmost on ties) until none is left; a character that is no token falls back to its UTF-8 bytes
(``<0xXX>``).
"""

from __future__ import annotations

from collections.abc import Sequence

_CONTROL, _USER_DEFINED = 3, 4


class ReferenceSPM:
    """Tokenize with a vocabulary of ``tokens``/``scores``/``types`` (GGUF / SentencePiece numbering)."""

    def __init__(self, tokens: Sequence[str], scores: Sequence[float], types: Sequence[int]) -> None:
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.scores = list(scores)
        self.special = sorted((t for t, ty in zip(tokens, types, strict=True) if ty in (_CONTROL, _USER_DEFINED)),
                              key=len, reverse=True)

    def _partition(self, text: str) -> list[tuple[str, bool]]:
        parts: list[tuple[str, bool]] = [(text, False)]
        for sp in self.special:
            out: list[tuple[str, bool]] = []
            for frag, is_special in parts:
                if is_special or sp not in frag:
                    out.append((frag, is_special))
                    continue
                pieces = frag.split(sp)
                for k, p in enumerate(pieces):
                    if p:
                        out.append((p, False))
                    if k < len(pieces) - 1:
                        out.append((sp, True))
            parts = out
        return parts

    def _bpe(self, frag: str) -> list[int]:
        syms = list(frag.replace(" ", "▁"))
        while True:
            best, best_score = -1, float("-inf")
            for k in range(len(syms) - 1):
                tid = self.ids.get(syms[k] + syms[k + 1])
                if tid is not None and self.scores[tid] > best_score:
                    best, best_score = k, self.scores[tid]
            if best < 0:
                break
            syms[best:best + 2] = [syms[best] + syms[best + 1]]
        out: list[int] = []
        for s in syms:
            if s in self.ids:
                out.append(self.ids[s])
            else:
                out.extend(self.ids[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
        return out

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS), special tokens in the text parsed as such."""
        ids: list[int] = []
        for frag, is_special in self._partition(text):
            ids.extend([self.ids[frag]] if is_special else self._bpe(frag))
        return ids


def read_gguf_vocab(path: str) -> tuple[list[str], list[float], list[int]]:
    """``tokenizer.ggml.tokens/scores/token_type`` parsed straight from a GGUF v2/v3 header (struct only: no
    ``gguf`` package, so that the oracle shares no reader with afm.model)."""
    import struct

    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    want = {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}
    found: dict[str, list] = {}
    with open(path, "rb") as f:
        def read(fmt: str):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def string() -> str:
            return f.read(read("<Q")).decode("utf-8")

        def value(vtype: int):
            if vtype == 8:
                return string()
            if vtype == 9:
                etype, n = read("<I"), read("<Q")
                if etype in scalar:  # one unpack for the whole array
                    fmt = scalar[etype]
                    return list(struct.unpack(f"<{n}{fmt[1]}", f.read(n * struct.calcsize(fmt))))
                return [value(etype) for _ in range(n)]
            return read(scalar[vtype])

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, _n_tensors, n_kv = read("<I"), read("<Q"), read("<Q")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} (v2/v3 only)")
        for _ in range(n_kv):
            key, vtype = string(), read("<I")
            v = value(vtype)
            if key in want:
                found[key] = v
    return found["tokenizer.ggml.tokens"], found["tokenizer.ggml.scores"], found["tokenizer.ggml.token_type"]
