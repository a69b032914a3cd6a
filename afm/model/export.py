"""HF checkpoint -> GGUF, so that llama.cpp can serve a model afm trained.

The metadata and vocabulary come from the GGUF the model was prepared from (afm's training never changes the
vocabulary; the checkpoint's shapes are checked against it), the weights from the checkpoint's safetensors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from afm.model import gemma3
from afm.model.gguf_file import GGUFFile

OUTTYPES = ("f32", "f16", "bf16", "q8_0")
_KEEP_FROM_BASE_SKIP = {"general.file_type", "general.quantization_version"}
# llama.cpp's LLAMA_FTYPE numbers for general.file_type
_FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}


def _hf_tensors(hf_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    files = sorted(hf_dir.glob("*.safetensors"))
    if not files or all(f.name.startswith("adapter_") for f in files):
        raise FileNotFoundError(f"{hf_dir}: no model *.safetensors (a LoRA adapter must be merged first)")
    out: dict[str, Any] = {}
    for f in files:
        if not f.name.startswith("adapter_"):
            out.update(load_file(str(f)))
    return out


def _check_shape(cfg: dict[str, Any], base: GGUFFile) -> None:
    pairs = {"hidden_size": "embedding_length", "num_hidden_layers": "block_count",
             "intermediate_size": "feed_forward_length", "num_attention_heads": "attention.head_count",
             "num_key_value_heads": "attention.head_count_kv", "head_dim": "attention.key_length"}
    bad = [f"{hf}={cfg.get(hf)} vs {key}={base.arch(key)}" for hf, key in pairs.items()
           if cfg.get(hf) != base.arch(key)]
    if cfg.get("model_type") not in ("gemma3_text", "gemma3") or bad:
        raise ValueError(f"checkpoint does not match the base GGUF {base.path.name}: model_type "
                         f"{cfg.get('model_type')!r}; {'; '.join(bad) or 'shapes agree'}")


def _encode(name: str, arr: np.ndarray, outtype: str) -> tuple[np.ndarray, Any]:
    """The array to write and its GGML type (None = from the numpy dtype); norms and vectors stay float32."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    if arr.ndim == 1 or outtype == "f32":
        return arr.astype(np.float32), None
    if outtype == "f16":
        return arr.astype(np.float16), None
    if outtype == "bf16":
        return quantize(arr, GGMLQuantizationType.BF16), GGMLQuantizationType.BF16
    return quantize(arr, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0


def export_gguf(hf_dir: str | Path, base_gguf: str | Path, out: str | Path, outtype: str = "f16") -> Path:
    """Write ``out`` (a GGUF) from the gemma3 checkpoint ``hf_dir``, taking metadata/vocabulary from ``base_gguf``."""
    import torch
    from gguf import GGUFValueType, GGUFWriter

    if outtype not in OUTTYPES:
        raise ValueError(f"outtype {outtype!r}: one of {', '.join(OUTTYPES)}")
    hf_dir, out = Path(hf_dir), Path(out)
    cfg_path = hf_dir / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{hf_dir}: no config.json (not a HF checkpoint)")
    cfg = json.loads(cfg_path.read_text())
    base = GGUFFile(base_gguf)
    _check_shape(cfg.get("text_config", cfg), base)
    tensors = _hf_tensors(hf_dir)
    embed = tensors.get("model.embed_tokens.weight")
    head = tensors.pop("lm_head.weight", None)
    if head is not None and embed is not None and not torch.equal(head, embed):
        raise ValueError("lm_head differs from the embedding: llama.cpp's gemma3 ties them")
    expected = {gemma3.hf_name(n) for n in base.tensor_names()}
    if set(tensors) != expected:
        raise ValueError(f"checkpoint tensors differ from the base's: missing {sorted(expected - set(tensors))[:5]}, "
                         f"unexpected {sorted(set(tensors) - expected)[:5]}")

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    w = GGUFWriter(str(tmp), base.architecture)
    for key, field in base.fields().items():
        if key.startswith("GGUF.") or key in _KEEP_FROM_BASE_SKIP or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub_type=sub)
    w.add_uint32("general.file_type", _FILE_TYPE[outtype])
    w.add_uint32("general.quantization_version", 2)
    for name in base.tensor_names():  # the base's order
        arr = tensors[gemma3.hf_name(name)].to(torch.float32).numpy()
        if gemma3.is_norm(name):
            arr = arr + np.float32(1.0)
        data, raw = _encode(name, arr, outtype)
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(out)
    return out
