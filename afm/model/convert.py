"""GGUF -> Hugging Face checkpoint (dequantised weights, config, rebuilt tokenizer, Gemma chat template)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from afm.model import gemma3
from afm.model.chat_template import GEMMA_CHAT_TEMPLATE, GEMMA_TURN_END
from afm.model.gguf_file import GGUFFile, GGUFVocab
from afm.model.sp_tokenizer import build_hf_tokenizer


def write_tokenizer(vocab: GGUFVocab, out: Path) -> Any:
    """The rebuilt Gemma tokenizer with the chat template, saved in ``out`` (tokenizer.json + config)."""
    tok = build_hf_tokenizer(vocab, "GemmaTokenizer", chat_template=GEMMA_CHAT_TEMPLATE)
    tok.save_pretrained(str(out))
    return tok


def hf_config(g: GGUFFile, vocab: GGUFVocab) -> Any:
    """A ``Gemma3TextConfig`` from the GGUF's metadata."""
    from transformers import Gemma3TextConfig

    if g.architecture != gemma3.ARCH:
        raise ValueError(f"{g.path}: architecture {g.architecture!r}; afm converts {gemma3.ARCH!r} only")
    end_of_turn = vocab.tokens.index(GEMMA_TURN_END)
    kw = gemma3.config_kwargs(g, len(vocab.tokens), vocab.bos_id, [vocab.eos_id, end_of_turn], vocab.pad_id)
    cfg = Gemma3TextConfig(**kw)
    cfg.architectures = ["Gemma3ForCausalLM"]
    return cfg


def _check_names(cfg: Any, shapes: dict[str, tuple[int, ...]]) -> None:
    """Every parameter of a fresh Gemma3ForCausalLM gets a tensor of its shape, and nothing is left over."""
    import torch
    from transformers import Gemma3ForCausalLM

    with torch.device("meta"):
        model = Gemma3ForCausalLM(cfg)
    want = {k: tuple(v.shape) for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied
    missing = sorted(set(want) - set(shapes))
    extra = sorted(set(shapes) - set(want))
    wrong = sorted(k for k in set(want) & set(shapes) if want[k] != shapes[k])
    if missing or extra or wrong:
        raise ValueError(f"GGUF tensors do not fit Gemma3ForCausalLM: missing {missing[:5]}, unexpected "
                         f"{extra[:5]}, wrong shape {wrong[:5]}")


def convert_gguf(gguf_path: str | Path, out: str | Path, dtype: str = "float32") -> Path:
    """Write a HF checkpoint of the gemma3 GGUF at ``gguf_path`` into ``out`` (created; files overwritten)."""
    import torch
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    g = GGUFFile(gguf_path)
    vocab = g.vocab()
    cfg = hf_config(g, vocab)
    torch_dtype = getattr(torch, dtype)
    tensors: dict[str, torch.Tensor] = {}
    for name, arr in g.tensors():
        if gemma3.is_norm(name):
            arr = arr - np.float32(1.0)
        tensors[gemma3.hf_name(name)] = torch.from_numpy(np.ascontiguousarray(arr)).to(torch_dtype)
    _check_names(cfg, {k: tuple(v.shape) for k, v in tensors.items()})
    cfg.dtype = dtype
    cfg.save_pretrained(str(out))
    gen = {"bos_token_id": vocab.bos_id, "eos_token_id": cfg.eos_token_id, "pad_token_id": vocab.pad_id}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    del tensors
    write_tokenizer(vocab, out)
    return out
