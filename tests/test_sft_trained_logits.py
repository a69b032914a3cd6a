"""``trained_logits_only`` (afm/sft/trained_logits.py): the head and the loss only at trained positions give the
stock loss and gradient. The real LLaMA-Factory run: tests/test_sft_runs.py::test_sft_masked_vs_unmasked_and_packed
(its masked and packed runs train with the flag, their first loss checked against an independent computation)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_gemma3_lm, tiny_qwen2_lm

from afm.sft.trained_logits import TrainedLogitsError, trained_positions, unsupported_reason


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 97, (3, 20), generator=g)
    labels = ids.clone()
    labels[:, :6] = -100  # the prompt
    labels[0, 9:13] = -100  # an observation span
    labels[2, 15:] = -100  # padding
    attention = torch.ones_like(ids)
    attention[2, 15:] = 0
    return {"input_ids": ids, "attention_mask": attention, "labels": labels}


def _loss_and_grads(model, batch, selected: bool, **kwargs):
    model.zero_grad()
    if selected:
        with trained_positions(model, batch["labels"]):
            loss = model(**batch, **kwargs).loss
    else:
        loss = model(**batch, **kwargs).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("build", [tiny_qwen2_lm, tiny_gemma3_lm], ids=["qwen2", "gemma3"])
@pytest.mark.parametrize("num_items", [None, 37], ids=["mean", "num_items_in_batch"])
def test_the_loss_and_gradient_are_the_stock_ones(build, num_items):
    torch.manual_seed(0)
    model = build().float().train()
    batch = _batch()
    kwargs = {} if num_items is None else {"num_items_in_batch": torch.tensor(num_items)}
    stock_loss, stock_grads = _loss_and_grads(model, batch, False, **kwargs)
    loss, grads = _loss_and_grads(model, batch, True, **kwargs)
    assert torch.allclose(loss, stock_loss, rtol=1e-6, atol=1e-7), (loss, stock_loss)
    assert grads.keys() == stock_grads.keys()
    for name, grad in grads.items():
        assert torch.allclose(grad, stock_grads[name], rtol=1e-5, atol=1e-7), name
    # outside the context the model is itself again: all logits, its own loss function
    out = model(**batch)
    assert out.logits.shape == (3, 20, 97) and "_loss_function" not in vars(model)
    assert torch.allclose(out.loss, _loss_and_grads(model, batch, False)[0])


def test_the_selected_logits_are_the_rows_of_the_trained_positions():
    model = tiny_qwen2_lm().float().eval()
    batch = _batch(1)
    with torch.no_grad():
        full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        with trained_positions(model, batch["labels"]):
            picked = model(**batch).logits
    keep = batch["labels"][:, 1:] != -100
    assert picked.shape == (int(keep.sum()), 97)
    assert torch.allclose(picked, full[:, :-1][keep], atol=1e-6)


def test_a_model_that_slices_before_its_head_is_refused_with_the_fix():
    model = tiny_qwen2_lm().float().train()
    batch = _batch()
    with pytest.raises(TrainedLogitsError, match="set trained_logits_only: false"), \
            trained_positions(model, batch["labels"]):
        model(**batch, logits_to_keep=1)  # the head sees [batch, 1, hidden]


def test_trainers_with_another_loss_are_named():
    class Args:
        use_liger_kernel = False

    class Trainer:
        compute_loss_func = None
        label_smoother = None
        args = Args()

    assert unsupported_reason(Trainer()) is None
    t = Trainer()
    t.compute_loss_func = len
    assert "own loss function" in unsupported_reason(t)
    t = Trainer()
    t.label_smoother = object()
    assert "label smoothing" in unsupported_reason(t)
    t = Trainer()
    t.args = type("A", (), {"use_liger_kernel": True})()
    assert "Liger" in unsupported_reason(t)
