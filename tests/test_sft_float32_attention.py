"""``attention_fp32`` (afm/sft/float32_attention.py): under bf16 autocast the attention kernel gets float32 inputs,
hands back the dtype it was given, and the registry is itself again after. The real LLaMA-Factory run with the flag
and its parse-time refusal: tests/test_sft_runs.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import prefix_rows, tiny_qwen2_lm
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from afm.sft.float32_attention import Float32AttentionError, float32_attention, in_float32
from afm.sft.shared_prefix import shared_prefix


def _batch(seed: int = 0):
    return prefix_rows(seed, width=20, prefix=9, pad_from=15)


@pytest.fixture
def kernel_dtypes(monkeypatch):
    """Every call of torch's attention: whether its queries, keys and values are all float32, and whether autocast
    is on (then it casts them to bf16 inside the call, whatever they are)."""
    seen: list[tuple[bool, bool]] = []
    stock = F.scaled_dot_product_attention

    def spy(q, k, v, *args, **kwargs):
        seen.append((q.dtype == k.dtype == v.dtype == torch.float32, torch.is_autocast_enabled("cpu")))
        return stock(q, k, v, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return seen


def test_under_bf16_autocast_the_kernel_sees_float32_and_the_model_trains(kernel_dtypes):
    torch.manual_seed(0)
    model = tiny_qwen2_lm().float().train()
    assert model.config._attn_implementation == "sdpa"
    batch = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(**batch).loss.backward()
    # stock: autocast is on at the call, and casts queries, keys and values to bf16 inside it
    assert kernel_dtypes and all(on for _, on in kernel_dtypes)
    kernel_dtypes.clear()
    model.zero_grad()
    local_before = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    with torch.autocast("cpu", dtype=torch.bfloat16), float32_attention(model):
        loss = model(**batch).loss
    loss.backward()
    # every call (one per layer), float32 with autocast off around the kernel; the gradient reaches every weight
    assert len(kernel_dtypes) == model.config.num_hidden_layers
    assert all(fp32 and not on for fp32, on in kernel_dtypes)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    # the registry is what it was: the next forward pass dispatches to the stock kernel again
    assert ALL_ATTENTION_FUNCTIONS._local_mapping == local_before
    kernel_dtypes.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(**batch)
    assert kernel_dtypes and all(on for _, on in kernel_dtypes)


def test_the_kernel_is_the_float32_attention_of_its_inputs():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8, dtype=torch.bfloat16) for _ in range(3))

    def kernel(module, query, key, value, mask, **kwargs):
        return F.scaled_dot_product_attention(query, key, value, is_causal=True).transpose(1, 2), None

    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, weights = in_float32(kernel)(None, q, k, v, None)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).transpose(1, 2)
    assert out.dtype == torch.bfloat16 and weights is None
    assert torch.equal(out, expected.to(torch.bfloat16))
    # float32 inputs under autocast (RoPE's float32 tables promote queries and keys): still float32 in the kernel
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out32, _ = in_float32(kernel)(None, q.float(), k.float(), v.float(), None)
    assert out32.dtype == torch.float32 and torch.equal(out32, expected)


def test_without_autocast_it_changes_nothing():
    torch.manual_seed(0)
    model = tiny_qwen2_lm().float().train()
    batch = _batch(1)
    stock = model(**batch).loss
    with float32_attention(model):
        same = model(**batch).loss
    assert torch.equal(stock, same)


def test_with_a_shared_prefix_the_cached_keys_are_float32_too(kernel_dtypes):
    torch.manual_seed(0)
    model = tiny_qwen2_lm().float().train()
    with torch.autocast("cpu", dtype=torch.bfloat16), float32_attention(model), shared_prefix(model, 9):
        model(**_batch()).loss.backward()
    # per layer: the prefix's pass and the rows' pass against its cache
    assert len(kernel_dtypes) == 2 * model.config.num_hidden_layers
    assert all(fp32 and not on for fp32, on in kernel_dtypes)


def test_another_attention_implementation_is_refused_with_the_fix():
    model = tiny_qwen2_lm().float()
    model.config._attn_implementation = "eager"
    with pytest.raises(Float32AttentionError, match="flash_attn: sdpa"), float32_attention(model):
        pass
    assert "eager" not in ALL_ATTENTION_FUNCTIONS._local_mapping


def test_the_registry_is_restored_when_the_step_fails():
    model = tiny_qwen2_lm().float()
    before = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    with pytest.raises(RuntimeError, match="boom"), float32_attention(model):
        assert ALL_ATTENTION_FUNCTIONS["sdpa"].__wrapped__ is not None
        raise RuntimeError("boom")
    assert ALL_ATTENTION_FUNCTIONS._local_mapping == before
