"""What this machine's CPU computes natively, for choosing a precision."""

from __future__ import annotations


def cpu_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), where bf16 matmuls beat float32's."""
    import torch

    cpu = torch.cpu
    return any(bool(getattr(cpu, name, lambda: False)()) for name in
               ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
