"""Rebuild a SentencePiece model from a GGUF vocabulary and let transformers convert it.

transformers' own GGUF tokenizer loader gets Gemma 3 wrong (5.6.0: 0 of 304 texts like llama.cpp, e.g.
``'Sol','ve','▁t','he'``). A SentencePiece BPE model written from the GGUF's tokens, scores and types, then
converted by transformers' SentencePiece path, tokenizes like llama.cpp (checked in tests/test_model_gemma.py).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from afm.model.gguf_file import GGUFVocab

# SentencePiece's TrainerSpec.ModelType
_BPE = 2


def sentencepiece_proto(vocab: GGUFVocab) -> bytes:
    """A serialized SentencePiece ``ModelProto`` (BPE, byte fallback, no dummy prefix) for ``vocab``."""
    if vocab.model != "llama":
        raise ValueError(f"tokenizer.ggml.model is {vocab.model!r}; only SentencePiece ('llama') vocabularies "
                         "can be rebuilt")
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    for tok, score, typ in zip(vocab.tokens, vocab.scores, vocab.types, strict=True):
        p = m.pieces.add()
        p.piece, p.score, p.type = tok, score, typ
    ts = m.trainer_spec
    ts.model_type = _BPE
    ts.vocab_size = len(vocab.tokens)
    ts.byte_fallback = True
    ts.split_digits = True
    ts.allow_whitespace_only_pieces = True
    ts.unk_id, ts.bos_id, ts.eos_id, ts.pad_id = vocab.unk_id, vocab.bos_id, vocab.eos_id, vocab.pad_id
    ts.unk_piece, ts.bos_piece = vocab.tokens[vocab.unk_id], vocab.tokens[vocab.bos_id]
    ts.eos_piece, ts.pad_piece = vocab.tokens[vocab.eos_id], vocab.tokens[vocab.pad_id]
    ns = m.normalizer_spec
    # identity: llama.cpp applies no normalisation beyond ' ' -> '▁'
    ns.name = "identity"
    ns.add_dummy_prefix = vocab.add_space_prefix
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    return m.SerializeToString()


def build_hf_tokenizer(vocab: GGUFVocab, tokenizer_class: str, chat_template: str | None = None,
                       extra: dict[str, Any] | None = None) -> Any:
    """A transformers tokenizer converted from the rebuilt SentencePiece model."""
    import transformers

    cls = getattr(transformers, tokenizer_class)
    with tempfile.TemporaryDirectory(prefix="afm-spm-") as tmp:
        (Path(tmp) / "tokenizer.model").write_bytes(sentencepiece_proto(vocab))
        cfg = {"tokenizer_class": tokenizer_class, "add_bos_token": vocab.add_bos, "add_eos_token": False,
               **(extra or {})}
        (Path(tmp) / "tokenizer_config.json").write_text(json.dumps(cfg))
        tok = cls.from_pretrained(tmp)
    if chat_template is not None:
        tok.chat_template = chat_template
    return tok
