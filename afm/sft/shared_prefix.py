"""``share_prefix``: the prompt prefix every row of a micro-batch starts with, run through the model once.

Agent SFT rows begin with the same tokens: the chat template's system turn, the tool descriptions, the task's
instruction (in the quickstart's set, 94 of a row's ~405 tokens). A causal model's states at those positions are the
same in every row, yet a batch computes them once per row, forward and backward. With this flag each training
micro-batch whose rows share such a prefix runs it once (a batch of one), repeats its key/value cache over the rows
and runs only the rows' remainders against it; the cache's gradient sums over the rows as the per-row copies' did.
Same loss and gradient up to float summation order (tests/test_sft_shared_prefix.py); the compute saved is
``(rows - 1) / rows`` of the prefix's: on the quickstart's student 1.24x a forward and backward pass of 8 rows, 1.10x
a whole step with ``trained_logits_only`` (benchmarks/RESULTS.md, twenty-seventh session).

The prefix of a micro-batch is the longest run of tokens, from the start, that is the same in every row, attended in
every row (right padding) and not trained: no label up to the position after it (so no logit at the prefix is
needed). A micro-batch without one (fewer than :data:`MIN_PREFIX` tokens, one row, or inputs other than ids,
attention mask and labels, such as packing's 4D mask or a vision model's position ids) runs as usual, said once.

Refused at argument parsing (:func:`afm.sft.overlay`): stages other than SFT, and gradient checkpointing (a
checkpointed layer runs its forward again in the backward pass and would add to the shared cache twice). Refused at
the first step (:func:`unsupported_reason`): FSDP and DeepSpeed ZeRO-3, whose sharded layers are gathered per forward
call, not measured with the two calls this makes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

IGNORE_INDEX = -100
MIN_PREFIX = 8  # shorter common prefixes are not worth a second pass
PLAIN_KEYS = frozenset({"input_ids", "attention_mask", "labels"})


class SharedPrefixError(RuntimeError):
    """The model or trainer cannot share a prefix (the message says why and what to change)."""


def prefix_length(inputs: dict[str, Any], min_len: int = MIN_PREFIX) -> tuple[int, str]:
    """The shared prefix of a training micro-batch, in tokens (0: none), and why none when 0."""
    extra = sorted(set(inputs) - PLAIN_KEYS - {"num_items_in_batch"})
    if extra:
        return 0, f"the batch carries {', '.join(extra)} besides ids, attention mask and labels"
    ids, labels = inputs.get("input_ids"), inputs.get("labels")
    mask = inputs.get("attention_mask")
    if ids is None or labels is None or ids.dim() != 2:
        return 0, "no [rows, tokens] input ids and labels"
    rows, width = ids.shape
    if rows < 2:
        return 0, "one row"
    if mask is not None and (mask.dim() != 2 or bool(((mask != 0) & (mask != 1)).any())):
        return 0, "the attention mask is not a 0/1 [rows, tokens] mask (packed rows)"
    same = (ids == ids[:1]).all(0)
    if mask is not None:
        same &= (mask == 1).all(0)
    # position t's logit predicts label t + 1: the prefix's last logit must not be trained either
    untrained = (labels == IGNORE_INDEX).all(0)
    ok = same[:-1] & untrained[1:]
    bad = (~ok).nonzero()
    n = int(bad[0]) if bad.numel() else width - 1
    if n < min_len:
        return 0, f"the rows share {n} untrained tokens at the start (fewer than {min_len})"
    return n, ""


def unsupported_reason(trainer: Any) -> str | None:
    """Why ``trainer`` cannot run a shared prefix (None: it can)."""
    if getattr(trainer, "is_fsdp_enabled", False):
        return "FSDP is on"
    if getattr(trainer, "is_deepspeed_enabled", False):
        plugin = getattr(getattr(getattr(trainer, "accelerator", None), "state", None), "deepspeed_plugin", None)
        if getattr(plugin, "zero_stage", None) == 3:
            return "DeepSpeed ZeRO-3 is on"
    return None


def _decoder(model: torch.nn.Module) -> torch.nn.Module:
    get = getattr(model, "get_decoder", None)
    decoder = get() if callable(get) else None
    if not isinstance(decoder, torch.nn.Module) or decoder is model:
        raise SharedPrefixError(f"share_prefix: {type(model).__name__} has no separate decoder module "
                                "(get_decoder) to run the prefix through; set share_prefix: false")
    return decoder


@contextlib.contextmanager
def shared_prefix(model: torch.nn.Module, prefix: int) -> Iterator[None]:
    """Inside: ``model``'s (a transformers causal LM, not a wrapper) forward passes run their first ``prefix``
    tokens once for all rows, as :func:`prefix_length` found them; the model sees, and its head computes, only the
    remaining positions (labels, logits and hidden states are ``[rows, tokens - prefix, ...]``)."""
    if prefix <= 0:
        yield
        return
    if getattr(model, "is_gradient_checkpointing", False):
        raise SharedPrefixError("share_prefix: gradient checkpointing is on (a checkpointed layer runs again in the "
                                "backward pass and would extend the shared cache twice); set "
                                "disable_gradient_checkpointing: true or share_prefix: false")
    from afm.sft.trained_logits import instance_attr

    decoder = _decoder(model)
    stock = model.forward  # an instance's own forward (accelerate's autocast wrapper) included

    def forward(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **kwargs: Any) -> Any:
        if kwargs.get("past_key_values") is not None:
            raise SharedPrefixError("share_prefix: the training forward pass was given a cache of its own")
        rows = input_ids.shape[0]
        head_mask = None if attention_mask is None else attention_mask[:1, :prefix]
        cache = decoder(input_ids=input_ids[:1, :prefix], attention_mask=head_mask, use_cache=True).past_key_values
        if cache is None:
            raise SharedPrefixError(f"share_prefix: {type(decoder).__name__} returned no key/value cache for the "
                                    "prefix; set share_prefix: false")
        cache.batch_repeat_interleave(rows)
        kwargs.pop("use_cache", None)
        return stock(input_ids=input_ids[:, prefix:], attention_mask=attention_mask,
                     labels=None if labels is None else labels[:, prefix:], past_key_values=cache, use_cache=False,
                     **kwargs)

    with instance_attr(model, "forward", forward):
        yield
