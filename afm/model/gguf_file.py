"""Reading a GGUF file: its metadata, its tokenizer arrays and its tensors dequantised to float32.

A thin layer over the ``gguf`` package (llama.cpp's own reader/writer on PyPI, in the ``model`` extra).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class GGUFVocab:
    """The tokenizer as llama.cpp reads it: one token, score and type per id."""

    model: str  # tokenizer.ggml.model: "llama" is SentencePiece (BPE with byte fallback, scores order merges)
    tokens: list[str]
    scores: list[float]
    types: list[int]  # 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte (SentencePiece's numbering)
    bos_id: int
    eos_id: int
    unk_id: int
    pad_id: int
    add_bos: bool
    add_space_prefix: bool


def _reader(path: Path) -> Any:
    from gguf import GGUFReader

    return GGUFReader(str(path))


def _scalar(field: Any) -> Any:
    return field.contents()


class GGUFFile:
    """One GGUF file, opened once (parsing its 262k-entry vocabulary arrays takes ~20 s on one core)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no GGUF file at {self.path}")
        self._r = _reader(self.path)

    def get(self, key: str, default: Any = None) -> Any:
        """A metadata value (scalar, string or small array), or ``default``."""
        field = self._r.fields.get(key)
        return default if field is None else _scalar(field)

    @property
    def architecture(self) -> str:
        return str(self.get("general.architecture", ""))

    def arch(self, key: str, default: Any = None) -> Any:
        """``<architecture>.<key>``, e.g. ``arch("block_count")``."""
        return self.get(f"{self.architecture}.{key}", default)

    def _array(self, key: str) -> list[Any]:
        field = self._r.fields[key]
        # field.parts holds every piece of the encoded array; field.data indexes the values (faster than contents()).
        parts = field.parts
        return [parts[i] for i in field.data]

    def vocab(self) -> GGUFVocab:
        """The tokenizer arrays and special ids."""
        tokens = [bytes(p).decode("utf-8") for p in self._array("tokenizer.ggml.tokens")]
        scores = [float(p[0]) for p in self._array("tokenizer.ggml.scores")]
        types = [int(p[0]) for p in self._array("tokenizer.ggml.token_type")]
        return GGUFVocab(
            model=str(self.get("tokenizer.ggml.model", "")),
            tokens=tokens, scores=scores, types=types,
            bos_id=int(self.get("tokenizer.ggml.bos_token_id", -1)),
            eos_id=int(self.get("tokenizer.ggml.eos_token_id", -1)),
            unk_id=int(self.get("tokenizer.ggml.unknown_token_id", -1)),
            pad_id=int(self.get("tokenizer.ggml.padding_token_id", -1)),
            add_bos=bool(self.get("tokenizer.ggml.add_bos_token", False)),
            add_space_prefix=bool(self.get("tokenizer.ggml.add_space_prefix", False)),
        )

    def fields(self) -> dict[str, Any]:
        """The reader's raw fields (key -> ``gguf.ReaderField``, with its value types), for copying them."""
        return dict(self._r.fields)

    def metadata(self) -> dict[str, Any]:
        """Every metadata key but the big tokenizer arrays (for copying into an exported file)."""
        skip = {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                "tokenizer.ggml.merges"}
        return {k: _scalar(f) for k, f in self._r.fields.items() if k not in skip and not k.startswith("GGUF.")}

    def tensor_names(self) -> list[str]:
        return [t.name for t in self._r.tensors]

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """(name, float32 array in row-major torch order), dequantising each quantised tensor."""
        from gguf.quants import dequantize

        for t in self._r.tensors:
            yield t.name, np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
