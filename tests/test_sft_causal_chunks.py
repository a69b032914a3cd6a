"""``attention_chunks`` (afm/sft/causal_chunks.py): a causal attention call run as query chunks over the keys up to
them is the same attention (outputs and gradients), with and without a cached prefix, padding, grouped key/value
heads, float32 attention around it; a mask that lets a query see a later key runs whole. The real LLaMA-Factory run
with the flag: tests/test_sft_runs.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import prefix_rows, tiny_gemma3_lm, tiny_qwen2_lm
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from afm.sft import causal_chunks as cc
from afm.sft.attention_override import AttentionOverrideError
from afm.sft.shared_prefix import shared_prefix


class _Module(torch.nn.Module):
    is_causal = True
    num_key_value_groups = 2


def _qkv(queries: int, keys: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, queries, 8, generator=g, requires_grad=True)
    k = torch.randn(2, 2, keys, 8, generator=g, requires_grad=True)
    v = torch.randn(2, 2, keys, 8, generator=g, requires_grad=True)
    return q, k, v


def _padded_causal(queries: int, keys: int, lengths: list[int]) -> torch.Tensor:
    """transformers' sdpa mask of right-padded rows against ``keys - queries`` cached keys: [rows, 1, q, k]."""
    offset = keys - queries
    causal = torch.arange(keys)[None, :] <= offset + torch.arange(queries)[:, None]
    valid = torch.arange(keys)[None, :] < torch.tensor(lengths)[:, None]
    return (causal[None] & valid[:, None, :])[:, None]


def _run(kernel, q, k, v, mask):
    out, _ = kernel(_Module(), q, k, v, mask, dropout=0.0, scaling=None)
    (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    return out.detach(), grads


@pytest.mark.parametrize("queries,keys", [(70, 70), (70, 81), (133, 150)], ids=["square", "prefix", "long"])
@pytest.mark.parametrize("chunks", [2, 3, 5])
def test_chunks_give_the_same_attention_and_gradients(monkeypatch, queries, keys, chunks):
    monkeypatch.setattr(cc, "MIN_QUERIES", 8)
    q, k, v = _qkv(queries, keys)
    calls: list[tuple[int, int]] = []

    def kernel(module, query, key, value, mask, **kwargs):
        calls.append((query.shape[2], key.shape[2]))
        return sdpa_attention_forward(module, query, key, value, mask, **kwargs)

    for mask in (_padded_causal(queries, keys, [keys, keys - 9]), None if queries == keys else "skip"):
        if isinstance(mask, str):
            continue
        stock, stock_grads = _run(sdpa_attention_forward, q, k, v, mask)
        calls.clear()
        out, grads = _run(cc.in_causal_chunks(kernel, chunks), q, k, v, mask)
        # the chunks cover the queries once, each over the keys up to its last query
        assert [c[0] for c in calls] == [b - a for a, b in cc.bounds(queries, chunks)]
        assert [c[1] for c in calls] == [keys - queries + b for _, b in cc.bounds(queries, chunks)]
        valid = torch.ones(2, queries, dtype=torch.bool) if mask is None else mask[:, 0].any(-1)
        assert torch.allclose(out[valid], stock[valid], atol=1e-6)
        for grad, expected in zip(grads, stock_grads, strict=True):
            assert torch.allclose(grad, expected, atol=1e-6)


def test_calls_that_are_not_causal_short_or_odd_run_whole(monkeypatch):
    monkeypatch.setattr(cc, "MIN_QUERIES", 8)
    seen: list[int] = []

    def kernel(module, query, key, value, mask, **kwargs):
        seen.append(query.shape[2])
        return sdpa_attention_forward(module, query, key, value, mask, **kwargs)

    chunked = cc.in_causal_chunks(kernel, 3)
    q, k, v = _qkv(30, 30)
    see_ahead = _padded_causal(30, 30, [30, 30])
    see_ahead[0, 0, 3, 20] = True  # one query sees a later key: not causal, the mask must be honoured as it is
    float_mask = torch.zeros(2, 1, 30, 30)
    for mask in (see_ahead, float_mask):
        seen.clear()
        chunked(_Module(), q, k, v, mask)
        assert seen == [30]
    seen.clear()
    chunked(_Module(), *_qkv(5, 5), None)  # fewer queries than MIN_QUERIES
    chunked(_Module(), *_qkv(30, 20), None)  # more queries than keys
    bidirectional = _Module()
    bidirectional.is_causal = False
    chunked(bidirectional, q, k, v, None)
    assert seen == [5, 30, 30]
    assert cc.bounds(10, 3) == [(0, 3), (3, 7), (7, 10)] and cc.bounds(2, 5) == [(0, 1), (1, 2)]


@pytest.mark.parametrize("build", [tiny_qwen2_lm, tiny_gemma3_lm], ids=["qwen2", "gemma3"])
def test_a_model_trains_to_the_same_gradient_with_a_shared_prefix_and_float32_attention(monkeypatch, build):
    """Qwen2 and Gemma 3 (sliding-window layers: their masks cut keys on the left too) on right-padded rows that
    share a prefix; chunks on top of share_prefix, and inside attention_fp32 under bf16 autocast."""
    monkeypatch.setattr(cc, "MIN_QUERIES", 4)
    torch.manual_seed(0)
    model = build().float().train()
    batch = prefix_rows(1, width=24, prefix=10, pad_from=17)

    def grads(prefix: int, chunks: int):
        model.zero_grad()
        with shared_prefix(model, prefix), cc.causal_chunks(model, chunks):
            loss = model(**batch).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    for prefix in (0, 10):
        stock_loss, stock = grads(prefix, 1)
        loss, chunked = grads(prefix, 3)
        assert torch.allclose(loss, stock_loss, atol=1e-6)
        for name, grad in chunked.items():
            assert torch.allclose(grad, stock[name], atol=1e-6), name
    calls: list[bool] = []
    stock_sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, *args, **kwargs):
        calls.append(q.dtype == k.dtype == torch.float32 and not torch.is_autocast_enabled("cpu"))
        return stock_sdpa(q, k, v, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    from afm.sft.attention_override import overridden_attention
    from afm.sft.float32_attention import in_float32

    with torch.autocast("cpu", dtype=torch.bfloat16), \
            overridden_attention(model, lambda k: in_float32(cc.in_causal_chunks(k, 3)), "attention_fp32"):
        model(**batch).loss.backward()
    assert len(calls) == 3 * model.config.num_hidden_layers and all(calls)  # 3 chunks a layer, each float32


def test_another_attention_implementation_is_refused_with_the_fix():
    model = tiny_qwen2_lm().float()
    model.config._attn_implementation = "eager"
    with pytest.raises(AttentionOverrideError, match=r"attention_chunks supports the sdpa attention.*flash_attn: "
                                                     r"sdpa"), cc.causal_chunks(model, 3):
        pass
