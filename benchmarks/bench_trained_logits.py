"""``trained_logits_only``: CPU time of one SFT micro-batch (forward + backward) with the head and loss at every
position against only at trained positions, on a finished quickstart run's student and SFT rows.

The rows are LLaMA-Factory's own (``afm-sft mask-report``'s pipeline on the run's ``sft.yaml``), taken in the
quickstart's micro-batches (8 rows, padded to the longest, length-sorted steps as ``sort_micro_batches`` draws them).
The two variants alternate micro-batch by micro-batch (A, B, B, A, ...) on one thread, and the figure is the
process's CPU time per micro-batch (``time.process_time``), so other work on the machine shifts both alike; the loss
of every micro-batch is compared (they must agree).

    .venv/bin/python benchmarks/bench_trained_logits.py runs/quickstart [--batches 40] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import yaml


def micro_batches(run: Path, n: int, size: int, seed: int = 0) -> tuple[list[dict], float]:
    """``n`` micro-batches of ``size`` rows of the run's SFT set (padded, -100 on padding) and the share of label
    positions that are trained."""
    import random

    import torch

    from afm.sft.report import preprocess

    cfg = yaml.safe_load((run / "sft.yaml").read_text())
    cfg.update(output_dir=str(Path("/tmp") / "afm-bench-logits"), overwrite_cache=False)
    rows = preprocess(cfg, force_mask=False).dataset_module["train_dataset"]
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    batches, kept, total = [], 0, 0
    for b in range(n):
        picked = sorted((rows[i] for i in order[b * size:(b + 1) * size]), key=lambda r: -len(r["input_ids"]))
        width = len(picked[0]["input_ids"])
        ids = torch.zeros(len(picked), width, dtype=torch.long)
        labels = torch.full((len(picked), width), -100, dtype=torch.long)
        mask = torch.zeros(len(picked), width, dtype=torch.long)
        for j, row in enumerate(picked):
            k = len(row["input_ids"])
            ids[j, :k], labels[j, :k], mask[j, :k] = (torch.tensor(row["input_ids"]), torch.tensor(row["labels"]), 1)
        kept += int((labels[:, 1:] != -100).sum())
        total += labels[:, 1:].numel()
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return batches, kept / total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a finished afm quickstart run (its student, sft.yaml and SFT set)")
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--micro", type=int, default=8, help="rows a micro-batch (the quickstart's 8)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    from afm.sft.trained_logits import trained_positions

    torch.set_num_threads(args.threads)
    batches, share = micro_batches(args.run, args.batches, args.micro)
    model = AutoModelForCausalLM.from_pretrained(str(args.run / "student"), torch_dtype=torch.float32)
    model.train()
    cpu: dict[str, list[float]] = {"all positions": [], "trained only": []}
    worst = 0.0

    def step(batch: dict, selected: bool) -> tuple[float, float]:
        model.zero_grad(set_to_none=True)
        start = time.process_time()
        with trained_positions(model, batch["labels"]) if selected else contextlib.nullcontext():
            loss = model(**batch).loss
        loss.backward()
        return time.process_time() - start, loss.item()

    step(batches[0], False)  # warm-up: allocator, kernels
    step(batches[0], True)
    for i, batch in enumerate(batches):
        order = (False, True) if i % 2 == 0 else (True, False)
        losses = {}
        for selected in order:
            spent, losses[selected] = step(batch, selected)
            cpu["trained only" if selected else "all positions"].append(spent)
        worst = max(worst, abs(losses[True] - losses[False]) / max(abs(losses[False]), 1e-9))
    a, b = (statistics.median(v) for v in cpu.values())
    tokens = statistics.mean(int(x["attention_mask"].sum()) for x in batches)
    print(f"{len(batches)} micro-batches of {args.micro} rows (~{tokens:.0f} tokens each, {share:.0%} of label positions "
          f"trained), {args.threads} thread(s), CPU s per forward+backward (median): all positions {a * 1000:.1f} ms, "
          f"trained only {b * 1000:.1f} ms: {b / a:.3f}x; largest relative loss difference {worst:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
