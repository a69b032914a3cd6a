"""What this machine's CPU offers: the cores this process may use, and what it computes natively (for choosing a
precision)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as taskset or a container's cpuset limit it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), where bf16 matmuls beat float32's."""
    import torch

    cpu = torch.cpu
    return any(bool(getattr(cpu, name, lambda: False)()) for name in
               ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
