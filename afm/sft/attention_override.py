"""One training step's attention calls routed through a wrapper of transformers' registered kernel.

transformers looks the attention function up by name (``config._attn_implementation``) in ``ALL_ATTENTION_FUNCTIONS``
at every forward call; the registry keeps a per-instance local mapping over its global one for such overrides. Inside
:func:`overridden_attention` the local entry of the model's implementation is the wrapped kernel; after, whatever was
there before. The backward pass needs nothing: autograd recorded what the forward ran.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

Kernel = Callable[..., tuple[torch.Tensor, Any]]
SUPPORTED = ("sdpa",)


class AttentionOverrideError(RuntimeError):
    """The model's attention cannot be wrapped this way (the message says what to change)."""


def implementation(model: torch.nn.Module) -> str:
    """The attention implementation ``model`` (a transformers model) dispatches to."""
    config = getattr(model, "config", None)
    return str(getattr(config, "_attn_implementation", None) or "eager")


@contextlib.contextmanager
def overridden_attention(model: torch.nn.Module, wrap: Callable[[Kernel], Kernel], flag: str) -> Iterator[None]:
    """Inside: ``model``'s attention calls go through ``wrap(stock kernel)``; ``flag`` names the setting in errors."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    name = implementation(model)
    if name not in SUPPORTED:
        raise AttentionOverrideError(f"{flag} supports the {', '.join(SUPPORTED)} attention; this model runs "
                                     f"{name!r}. Set flash_attn: sdpa, or {flag}: false")
    local = ALL_ATTENTION_FUNCTIONS._local_mapping  # this process's overrides (the registry's own mechanism)
    had, previous = name in local, local.get(name)
    ALL_ATTENTION_FUNCTIONS[name] = wrap(ALL_ATTENTION_FUNCTIONS[name])
    try:
        yield
    finally:
        if had:
            local[name] = previous
        else:
            local.pop(name, None)
