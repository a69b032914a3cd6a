"""Gemma 3 (text) between llama.cpp's GGUF layout and transformers' ``Gemma3ForCausalLM``.

Facts this relies on (llama.cpp's converter and its gemma3 graph): tensor names map one to one; llama.cpp stores
every RMSNorm weight as ``1 + w`` (Gemma's norm multiplies by ``1 + w``; llama.cpp's by ``w``); no q/k permutation
(Gemma uses NeoX-style rope); the embedding is tied to the output; every 6th layer is global attention with rope
base ``<arch>.rope.freq_base``, the others slide over ``<arch>.attention.sliding_window`` tokens with rope base
10000 (not in the file: llama.cpp hard-codes both for gemma3).
"""

from __future__ import annotations

import re
from typing import Any

ARCH = "gemma3"
SLIDING_PATTERN = 6
LOCAL_ROPE_BASE = 10_000.0

_BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}
_BLOCK_INV = {v: k for k, v in _BLOCK.items()}
_TOP_INV = {v: k for k, v in _TOP.items()}
_GGUF_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(\w+)\.weight$")
_HF_BLOCK_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)\.weight$")


def _rename(name: str, block_re: re.Pattern[str], block: dict[str, str], top: dict[str, str], block_fmt: str,
            what: str) -> str:
    """``name`` in the other naming: a block tensor through ``block`` (``block_fmt`` takes the layer and the new
    part), a top-level one through ``top``; ValueError naming ``what`` otherwise."""
    m = block_re.match(name)
    if m and m.group(2) in block:
        return block_fmt.format(m.group(1), block[m.group(2)])
    base = name.removesuffix(".weight")
    if base in top and name.endswith(".weight"):
        return f"{top[base]}.weight"
    raise ValueError(f"unknown {what} tensor {name!r}")


def hf_name(gguf_name: str) -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``."""
    return _rename(gguf_name, _GGUF_BLOCK_RE, _BLOCK, _TOP, "model.layers.{}.{}.weight", "gemma3 GGUF")


def gguf_name(hf: str) -> str:
    """The inverse of :func:`hf_name`."""
    return _rename(hf, _HF_BLOCK_RE, _BLOCK_INV, _TOP_INV, "blk.{}.{}.weight", "Gemma3ForCausalLM")


def is_norm(gguf_tensor: str) -> bool:
    """Whether llama.cpp stores this tensor as ``1 + w``."""
    return gguf_tensor.endswith("norm.weight")


def config_kwargs(meta: Any, vocab_size: int, bos_id: int, eos_ids: list[int], pad_id: int) -> dict[str, Any]:
    """``Gemma3TextConfig`` arguments from a GGUF's ``gemma3.*`` metadata (``meta.arch(key)``)."""
    heads = int(meta.arch("attention.head_count"))
    n_layers = int(meta.arch("block_count"))
    return {
        "vocab_size": vocab_size,
        "hidden_size": int(meta.arch("embedding_length")),
        "intermediate_size": int(meta.arch("feed_forward_length")),
        "num_hidden_layers": n_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.arch("attention.head_count_kv", heads)),
        "head_dim": int(meta.arch("attention.key_length")),
        # Gemma 3 scales queries by head_dim ** -0.5 at every size llama.cpp converts that has no explicit scale
        "query_pre_attn_scalar": int(meta.arch("attention.key_length")),
        "max_position_embeddings": int(meta.arch("context_length")),
        "rms_norm_eps": float(meta.arch("attention.layer_norm_rms_epsilon")),
        "sliding_window": int(meta.arch("attention.sliding_window")),
        "layer_types": ["full_attention" if (i + 1) % SLIDING_PATTERN == 0 else "sliding_attention"
                        for i in range(n_layers)],
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": float(meta.arch("rope.freq_base"))},
            "sliding_attention": {"rope_type": "default", "rope_theta": LOCAL_ROPE_BASE},
        },
        "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": True,
        "bos_token_id": bos_id,
        "eos_token_id": eos_ids,
        "pad_token_id": pad_id,
    }
