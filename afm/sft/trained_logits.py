"""``trained_logits_only``: the LM head and the loss only at positions that have a label.

A causal LM's head turns every position's hidden state into logits over the vocabulary, and the loss then drops
every position whose next token is labelled ``-100``: the prompt, masked ``<observation>`` spans, padding. In a CoA
trajectory those are about half the tokens, so half the head's compute and of the logits' memory (fp32 for the
loss: ``tokens x vocab x 4`` bytes, 1.2 GB for one 2k-token row of Qwen2.5's 152k vocabulary) buys nothing.

During a training forward pass this module (1) gives the output embedding module only the hidden states of the
positions whose next token is trained (a forward pre-hook: ``[batch, seq, hidden] -> [n, hidden]``), so the model
computes ``[n, vocab]`` logits (with its own soft-capping or scaling, which act per element), and (2) replaces the
model's ``loss_function`` by the same cross-entropy on those ``n`` rows, reduced as transformers reduces it (sum
over ``num_items_in_batch`` under gradient accumulation, else mean). Same loss and gradient up to float summation
order; tested against the stock path on Qwen2 and Gemma 3 (tests/test_sft_trained_logits.py).

Only where that holds: a trainer with no custom loss (``compute_loss_func``, label smoothing, ASFT) and a model whose
head is one module called once on ``[batch, seq, hidden]``; anything else raises :class:`TrainedLogitsError` with
what to change, at the first step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


class TrainedLogitsError(RuntimeError):
    """The model or trainer cannot take logits only at trained positions (the message says why and what to do)."""


class _Selection:
    """The positions of the forward pass in progress (one training thread per process)."""

    keep: torch.Tensor | None = None  # [batch, seq-1] bool: position t's next token is trained
    targets: torch.Tensor | None = None  # [n] the labels of those positions
    head_calls: int = 0


_SEL = _Selection()
_HOOKED_ATTR = "_afm_trained_logits_hook"


def _head_pre_hook(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    keep = _SEL.keep
    if keep is None:
        return None
    hidden = args[0]
    if not torch.is_tensor(hidden) or hidden.dim() != 3 or tuple(hidden.shape[:2]) != (keep.shape[0], keep.shape[1] + 1):
        raise TrainedLogitsError(
            f"trained_logits_only: the model's output head got an input of shape "
            f"{tuple(getattr(hidden, 'shape', ()))}, not [batch, seq, hidden] of the labels' [{keep.shape[0]}, "
            f"{keep.shape[1] + 1}] (a model that slices or reshapes before its head); set trained_logits_only: false")
    _SEL.head_calls += 1
    if _SEL.head_calls > 1:
        raise TrainedLogitsError("trained_logits_only: the model calls its output head more than once in a forward "
                                 "pass (multi-token prediction?); set trained_logits_only: false")
    return (hidden[:, :-1][keep], *args[1:])


def trained_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int | None = None,
                 num_items_in_batch: torch.Tensor | int | None = None, ignore_index: int = IGNORE_INDEX,
                 shift_labels: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
    """transformers' causal-LM cross-entropy on the ``[n, vocab]`` logits of the trained positions."""
    targets = _SEL.targets
    if targets is None or shift_labels is not None:
        raise TrainedLogitsError("trained_logits_only: the loss was asked outside a selected forward pass (or with "
                                 "shift_labels: sequence parallelism); set trained_logits_only: false")
    if logits.dim() != 2 or logits.shape[0] != targets.numel():
        raise TrainedLogitsError(f"trained_logits_only: logits of shape {tuple(logits.shape)} for {targets.numel()} "
                                 "trained positions (the head's output was reshaped); set trained_logits_only: false")
    targets = targets.to(logits.device)
    if num_items_in_batch is None:
        return F.cross_entropy(logits.float(), targets, reduction="mean")
    loss = F.cross_entropy(logits.float(), targets, reduction="sum")
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under PEFT (``get_base_model``) or a wrapper (``module``)."""
    while True:
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        elif hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
            model = model.module
        else:
            return model


def head_of(model: torch.nn.Module) -> torch.nn.Module:
    """The output embedding module of ``model``, with the selection hook installed once."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if not isinstance(head, torch.nn.Module):
        raise TrainedLogitsError(f"trained_logits_only: {type(model).__name__} has no output embedding module "
                                 "(get_output_embeddings); set trained_logits_only: false")
    if not hasattr(head, _HOOKED_ATTR):
        setattr(head, _HOOKED_ATTR, head.register_forward_pre_hook(_head_pre_hook))
    return head


@contextlib.contextmanager
def instance_attr(obj: Any, name: str, value: Any) -> Iterator[None]:
    """Inside: ``obj.name`` is ``value`` on the instance; after, the instance's own value again, or none (its
    class's)."""
    had = name in vars(obj)
    previous = vars(obj).get(name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, previous)
        else:
            delattr(obj, name)


@contextlib.contextmanager
def trained_positions(model: torch.nn.Module, labels: torch.Tensor) -> Iterator[None]:
    """Inside: ``model``'s forward passes with these (unshifted) ``labels`` take logits and loss only where the next
    token is trained."""
    model = base_model(model)
    head_of(model)
    keep = labels[:, 1:] != IGNORE_INDEX
    _SEL.keep, _SEL.targets, _SEL.head_calls = keep, labels[:, 1:][keep], 0
    try:
        with instance_attr(model, "_loss_function", trained_loss):
            yield
    finally:
        _SEL.keep = _SEL.targets = None


def unsupported_reason(trainer: Any) -> str | None:
    """Why ``trainer``'s loss is not the plain causal-LM cross-entropy this module reproduces (None: it is)."""
    if getattr(trainer, "compute_loss_func", None) is not None:
        return "the trainer has its own loss function (use_dft_loss / use_eaft_loss)"
    if getattr(trainer, "label_smoother", None) is not None:
        return "label smoothing (label_smoothing_factor) is on"
    finetuning = getattr(trainer, "finetuning_args", None)
    if getattr(finetuning, "use_asft_loss", False):
        return "use_asft_loss is on"
    parallel = getattr(getattr(trainer, "accelerator", None), "parallelism_config", None)
    if parallel is not None and getattr(parallel, "sp_enabled", False):
        return "sequence parallelism is on"
    if getattr(getattr(trainer, "args", None), "use_liger_kernel", False):
        return "use_liger_kernel is on (Liger's fused cross-entropy already skips the full logits)"
    return None
