"""Per-rank record of what an SFT process trained on and ended with, for checking multi-process and multi-node runs.

Set ``AFM_SFT_TRACE_DIR`` and every rank appends to ``<dir>/sft_rank<RANK>.jsonl``: one ``batch`` record per loss
computation (a digest of each row it holds, its trained-label count, the optimizer step) and one ``end`` record with
a digest of the weights it holds when training returns. Unset, nothing is patched and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

TRACE_ENV = "AFM_SFT_TRACE_DIR"
IGNORE_INDEX = -100


def weights_digest(model: Any) -> str:
    """sha256 over every parameter and buffer (name, dtype, shape, float32 bytes), in name order: equal digests
    mean bit-identical weights, whatever process or file they were loaded in."""
    import torch

    h = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu")
        h.update(f"{name}:{tuple(tensor.shape)}:".encode())
        h.update(tensor.to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def row_digest(ids: list[int]) -> str:
    """A short digest of one row's token ids (padding removed), equal across ranks for the same sample."""
    return hashlib.sha1(",".join(map(str, ids)).encode()).hexdigest()[:16]


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _write(record: dict[str, Any]) -> None:
    folder = Path(os.environ[TRACE_ENV])
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"sft_rank{_rank()}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"rank": _rank(), **record}) + "\n")


def _batch_record(step: int, inputs: dict[str, Any]) -> dict[str, Any]:
    ids, labels = inputs["input_ids"], inputs.get("labels")
    mask = inputs.get("attention_mask")
    rows = []
    for i in range(ids.shape[0]):
        keep = ids[i] if mask is None else ids[i][mask[i].bool()]
        rows.append(row_digest(keep.tolist()))
    trained = 0 if labels is None else int((labels != IGNORE_INDEX).sum())
    return {"event": "batch", "step": step, "rows": rows, "trained_labels": trained}


def install() -> bool:
    """Patch transformers' Trainer to write the trace when ``AFM_SFT_TRACE_DIR`` is set; True when it did."""
    if not os.environ.get(TRACE_ENV):
        return False
    from transformers import Trainer

    if getattr(Trainer, "_afm_traced", False):
        return True
    orig_loss, orig_train = Trainer.compute_loss, Trainer.train

    def compute_loss(self, model, inputs, *args, **kwargs):
        if model.training:  # evaluation batches are not training data
            _write(_batch_record(self.state.global_step, inputs))
        return orig_loss(self, model, inputs, *args, **kwargs)

    def train(self, *args, **kwargs):
        result = orig_train(self, *args, **kwargs)
        # after train() returns, every rank holds the weights that save_model() writes next
        _write({"event": "end", "step": self.state.global_step, "weights": weights_digest(self.model)})
        return result

    Trainer.compute_loss, Trainer.train = compute_loss, train
    Trainer._afm_traced = True
    return True
