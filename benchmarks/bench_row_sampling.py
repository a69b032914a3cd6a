"""Per-request sampling (:func:`afm.common.row_sampling.sample_rows`, one generator a row) against the batch-shared
``torch.multinomial`` the hf rollout engine used before, on one decoding step's probabilities.

Shapes: the tiny quickstart student's vocabulary and Gemma 3's 262k ids, 4 and 16 rows (the quickstart's DAPO batch
of 4 prompts x 4 rollouts). The two alternate call by call (A, B, B, A, ...) on one thread and the figure is the
process's CPU time per call (``time.process_time``), so other work on the machine shifts both alike. Not a claim
about a whole rollout: the forward pass is not in it.

    .venv/bin/python benchmarks/bench_row_sampling.py [--calls 40]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=40, help="calls of each variant per shape")
    args = p.parse_args()

    import torch

    from afm.common.row_sampling import sample_rows

    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread, {args.calls} calls of each per shape (CPU ms per call, median)")
    print(f"{'rows':>5} {'vocab':>7} {'multinomial':>12} {'per-row':>9} {'ratio':>7}")
    for vocab in (1024, 262144):
        for rows in (4, 16):
            probs = torch.softmax(torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)), -1)
            shared = torch.Generator().manual_seed(0)
            gens = [torch.Generator().manual_seed(i) for i in range(rows)]
            times: dict[str, list[float]] = {"multinomial": [], "per-row": []}
            calls = {"multinomial": lambda: torch.multinomial(probs, 1, generator=shared),
                     "per-row": lambda: sample_rows(probs, gens)}
            order = ["multinomial", "per-row"]
            for i in range(2 * args.calls):
                name = order[(i // 2 + i) % 2]  # A, B, B, A, A, B, ...
                t = time.process_time()
                calls[name]()
                times[name].append(time.process_time() - t)
            a, b = (statistics.median(times[n]) * 1000 for n in order)
            print(f"{rows:>5} {vocab:>7} {a:>12.3f} {b:>9.3f} {a / b:>6.2f}x")


if __name__ == "__main__":
    main()
