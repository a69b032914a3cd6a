"""``share_prefix`` (afm/sft/shared_prefix.py): the rows' common prompt prefix run once per micro-batch gives the
stock loss and gradient. The real LLaMA-Factory runs: tests/test_sft_runs.py (the sorted-micro-batch run with the flag
trains to the same weights as the stock one; the torchrun run shares under DDP; the refusals)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_gemma3_lm, tiny_qwen2_lm

from afm.sft.shared_prefix import SharedPrefixError, prefix_length, shared_prefix, unsupported_reason
from afm.sft.trained_logits import trained_positions

PREFIX = 11  # longer than tiny_gemma3_lm's sliding window (8): the window's cache is cut inside the prefix


def _batch(seed: int = 0, rows: int = 3):
    """Right-padded rows that share PREFIX untrained tokens, then differ (a question, a trajectory, padding)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 97, (rows, 24), generator=g)
    ids[:, :PREFIX] = torch.randint(1, 97, (PREFIX,), generator=g)
    labels = ids.clone()
    labels[:, :PREFIX + 4] = -100  # the prompt: the shared prefix and each row's question
    labels[0, 15:18] = -100  # an observation span
    attention = torch.ones_like(ids)
    attention[rows - 1, 19:] = 0
    labels[rows - 1, 19:] = -100
    ids[rows - 1, 19:] = 0
    return {"input_ids": ids, "attention_mask": attention, "labels": labels}


def _loss_and_grads(model, batch, prefix: int, trained_only: bool = False, **kwargs):
    model.zero_grad()
    with shared_prefix(model, prefix):
        if trained_only:
            with trained_positions(model, batch["labels"][:, prefix:]):
                loss = model(**batch, **kwargs).loss
        else:
            loss = model(**batch, **kwargs).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_prefix_is_the_untrained_start_every_row_shares():
    batch = _batch()
    assert prefix_length(batch, min_len=4) == (PREFIX, "")
    # a trained label at PREFIX: the prefix's last logit would be trained, so the prefix stops one short
    b = _batch()
    b["labels"][1, PREFIX] = b["input_ids"][1, PREFIX]
    assert prefix_length(b, min_len=4)[0] == PREFIX - 1
    b = _batch()
    b["input_ids"][2, 5] = (b["input_ids"][0, 5] + 1) % 97  # one row differs at 5
    assert prefix_length(b, min_len=4)[0] == 5
    assert prefix_length(b, min_len=8) == (0, "the rows share 5 untrained tokens at the start (fewer than 8)")
    b = _batch()
    b["attention_mask"][1, 0] = 0  # left padding: the start is not attended in every row
    assert prefix_length(b, min_len=4)[0] == 0
    assert prefix_length(_batch(rows=1), min_len=4) == (0, "one row")
    packed = _batch()
    packed["attention_mask"] = packed["attention_mask"] * 2  # neat_packing's segment ids
    assert "packed rows" in prefix_length(packed, min_len=4)[1]
    assert "position_ids" in prefix_length({**_batch(), "position_ids": torch.arange(24)[None]}, min_len=4)[1]


@pytest.mark.parametrize("build", [tiny_qwen2_lm, tiny_gemma3_lm], ids=["qwen2", "gemma3"])
@pytest.mark.parametrize("num_items", [None, 29], ids=["mean", "num_items_in_batch"])
@pytest.mark.parametrize("trained_only", [False, True], ids=["all_logits", "trained_logits_only"])
def test_the_loss_and_gradient_are_the_stock_ones(build, num_items, trained_only):
    torch.manual_seed(0)
    model = build().float().train()
    batch = _batch()
    kwargs = {} if num_items is None else {"num_items_in_batch": torch.tensor(num_items)}
    stock_loss, stock_grads = _loss_and_grads(model, batch, 0, **kwargs)
    loss, grads = _loss_and_grads(model, batch, PREFIX, trained_only, **kwargs)
    assert torch.allclose(loss, stock_loss, rtol=1e-6, atol=1e-7), (loss, stock_loss)
    assert grads.keys() == stock_grads.keys()
    for name, grad in grads.items():
        assert torch.allclose(grad, stock_grads[name], rtol=1e-5, atol=1e-7), name
    # outside the context the model is itself again: its class's forward, every position's logits
    assert "forward" not in vars(model)
    assert model(**batch).logits.shape == (3, 24, 97)


def test_the_logits_past_the_prefix_are_the_stock_ones():
    model = tiny_qwen2_lm().float().eval()
    batch = _batch(1)
    with torch.no_grad():
        full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        with shared_prefix(model, PREFIX):
            rest = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert rest.shape == (3, 24 - PREFIX, 97)
    keep = batch["attention_mask"][:, PREFIX:].bool()
    assert torch.allclose(rest[keep], full[:, PREFIX:][keep], atol=1e-5)


def test_gradient_checkpointing_and_sharded_trainers_are_refused_with_the_fix():
    model = tiny_qwen2_lm().float().train()
    model.gradient_checkpointing_enable()
    with pytest.raises(SharedPrefixError, match="disable_gradient_checkpointing: true"), shared_prefix(model, PREFIX):
        pass

    class Trainer:
        is_fsdp_enabled = False
        is_deepspeed_enabled = False

    assert unsupported_reason(Trainer()) is None
    t = Trainer()
    t.is_fsdp_enabled = True
    assert unsupported_reason(t) == "FSDP is on"
    t = Trainer()
    t.is_deepspeed_enabled = True
    t.accelerator = type("A", (), {"state": type("S", (), {"deepspeed_plugin": type("P", (), {"zero_stage": 3})()})()})()
    assert unsupported_reason(t) == "DeepSpeed ZeRO-3 is on"
    t.accelerator.state.deepspeed_plugin.zero_stage = 2
    assert unsupported_reason(t) is None
