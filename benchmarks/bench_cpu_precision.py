"""What ``CPU_PRECISION=bf16`` and ``OMP_NUM_THREADS`` buy a DAPO actor on this CPU: a causal LM's forward (old
log-probs) and forward + backward (the update) over one micro-batch, float32 against bf16 autocast over float32
weights (what verl's FSDP mixed precision runs), on one thread and on every core, in the same process.

The model is a Hugging Face folder (default: ``afm model prepare gemma3-270m``'s); the micro-batch is the quickstart's
for a pretrained student (2 rows of ``--tokens``, the log-softmax over the whole vocabulary as verl computes it).
Prints seconds per pass (median of ``--rounds`` after a warm-up) and each variant's speed against float32 on one
thread. Whether bf16 pays depends on the CPU: it needs AVX512-BF16 or AMX (printed), else float32 is faster.

    .venv/bin/python benchmarks/bench_cpu_precision.py [--model DIR] [--tokens 540] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from contextlib import nullcontext


def one_pass(model, ids, bf16: bool, backward: bool) -> float:
    """Seconds of one forward (and backward) with the mean log-prob of the next tokens as the loss."""
    import torch

    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():
        logits = model(input_ids=ids, use_cache=False).logits
        loss = torch.log_softmax(logits.float(), -1)[:, :-1].gather(-1, ids[:, 1:, None]).mean()
    if backward:
        loss.backward()
        model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="", help="HF folder (default: the prepared gemma3-270m)")
    p.add_argument("--tokens", type=int, default=540, help="tokens a row (2 rows: the quickstart's micro-batch)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM

    from afm.quickstart.rl import cpu_bf16

    folder = args.model
    if not folder:
        from afm.model import prepare

        folder = str(prepare("gemma3-270m").hf_dir)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    ids = torch.randint(0, model.config.vocab_size, (2, args.tokens), generator=torch.Generator().manual_seed(0))
    cores = len(os.sched_getaffinity(0))
    print(f"model {folder}; native bf16 (AVX512-BF16/AMX): {cpu_bf16()}; {cores} cores; 2 x {args.tokens} tokens")
    base: dict[bool, float] = {}
    for threads in sorted({1, cores}):
        torch.set_num_threads(threads)
        for bf16 in (False, True):
            for backward in (False, True):
                one_pass(model, ids, bf16, backward)  # warm-up
                sec = statistics.median(one_pass(model, ids, bf16, backward) for _ in range(args.rounds))
                base.setdefault(backward, sec)
                print(f"{threads} thread(s) {'bf16' if bf16 else 'fp32'} {'fwd+bwd' if backward else 'fwd    '} "
                      f"{sec:7.2f} s  {base[backward] / sec:.2f}x fp32 on one thread", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
