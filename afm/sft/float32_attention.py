"""``attention_fp32``: under bf16/fp16 mixed precision, the attention kernel in float32.

Mixed precision (``bf16: true``) runs a step's matrix products in bfloat16 over float32 weights; on a CPU that
multiplies bfloat16 natively (AVX512-BF16, AMX) they take ~0.45x of float32's time. PyTorch's CPU flash-attention
kernel is the exception: for narrow heads its bfloat16 forward and backward are slower than its float32 ones (the
quickstart's student, 32-wide heads, 8 rows of ~400 tokens: 25.6 ms against 19.3 ms; benchmarks/RESULTS.md,
twenty-eighth session). With this flag each attention call of a training step gets its queries, keys and values in
float32 (autocast off around the kernel) and hands its output back in the dtype it was given, so the products around
it stay bfloat16. The attention is then also computed as exactly as in a float32 run. Meant for CPUs; on a GPU,
leave it off (its flash kernels are bfloat16's).

Supported for ``sdpa`` (LLaMA-Factory's default on the CPU, ``flash_attn: auto`` or ``sdpa``); any other attention
implementation is refused at the first step with what to set.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from afm.sft.attention_override import AttentionOverrideError, Kernel, overridden_attention

Float32AttentionError = AttentionOverrideError  # the model's attention cannot run in float32 this way


def in_float32(kernel: Kernel) -> Kernel:
    """``kernel`` (a transformers attention function) run on float32 queries, keys and values with autocast off;
    its output returned in the queries' dtype."""

    def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        dtype = query.dtype
        # off even for float32 inputs (RoPE's float32 tables promote the rotated queries and keys): autocast would
        # cast them to half precision inside the call. The device's autocast, whichever it is (a CPU run's is "cpu").
        with torch.autocast(query.device.type, enabled=False):
            out, weights = kernel(module, query.float(), key.float(), value.float(), attention_mask, *args, **kwargs)
        return out.to(dtype), weights

    attention.__wrapped__ = kernel  # type: ignore[attr-defined]
    return attention


@contextlib.contextmanager
def float32_attention(model: torch.nn.Module) -> Iterator[None]:
    """Inside: the attention calls of ``model``'s forward passes run in float32 (see the module's text)."""
    with overridden_attention(model, in_float32, "attention_fp32"):
        yield
