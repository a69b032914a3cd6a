"""The quickstart's masked SFT step time, A against B: activation checkpointing, or sorted micro-batches.

Takes a finished ``afm quickstart`` run's SFT set and untrained student, and runs the quickstart's own SFT yaml
(``afm.quickstart.recipe.sft_config``) for ``--steps`` optimizer steps, A-B-B-A (each run a fresh ``afm-sft train``
process). ``--compare checkpointing``: A with ``disable_gradient_checkpointing: false`` (LLaMA-Factory's default), B
with ``true`` (what the quickstart sets). ``--compare sorting``: A runs each 16-row step as one batch, B as two
length-sorted micro-batches of 8 (what the quickstart sets, ``sort_micro_batches``); both draw their steps with the
same sampler, so they train the same rows step by step. ``--compare ranks``: A is one process on both cores, B two
torchrun ranks of one thread each (gloo), the same steps split between them. ``--compare precision``: A float32, B
bf16 autocast over float32 weights (a pretrained student on a CPU with native bf16; its losses differ by design); ``--compare attention``: A bf16, B
bf16 with the attention kernel in float32 (``attention_fp32``); ``--compare mixed``: A float32, B bf16 with float32
attention; ``--compare chunks``: A the attention calls whole, B in three query chunks (``attention_chunks: 3``).
``--compare openmp``: A libgomp's default spin at a barrier, B a short one (``GOMP_SPINCOUNT=3000``);
``--compare logits``: A takes the head's logits at every position, B only where the next token is trained
(``trained_logits_only``, what the quickstart sets). ``--compare prefix``: A computes every row's copy of the
common prompt prefix, B runs it once per micro-batch (``share_prefix``, what the quickstart sets). ``--compare passive``: B none (``OMP_WAIT_POLICY=PASSIVE``, what scripts/test.sh sets); ``--compare loader``: A
reads and collates each step's rows in the training process, B in one dataloader worker process, ahead of the step;
``--compare micro``: A two
sorted micro-batches of 8 a step (the quickstart's), B four of 4; ``--compare threads``: A torch's intra-op threads (one a core), B one thread (``OMP_NUM_THREADS=1``); ``--busy N`` runs N busy loops beside every run (a shared
machine). Prints each run's steps/s over the steps after ``--warmup``
(from ``trainer_log.jsonl``), the medians, the ratio, and whether A's and B's losses agree step by step (neither
change may change the numbers).

    .venv/bin/python benchmarks/bench_quickstart_sft.py runs/quickstart [--compare sorting] [--steps 80] [--warmup 10]
    .venv/bin/python benchmarks/bench_quickstart_sft.py runs/quickstart --compare passive --busy 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


ENV = "env"  # a variant's environment variables (not a yaml key)
# float32 throughout (the quickstart's SFT before cpu_bf16)
FP32 = {"bf16": False, "use_cpu": False, "attention_fp32": False}
# two torchrun ranks of one thread each on this node (gloo)
RANKS = {"FORCE_TORCHRUN": "1", "NNODES": "1", "NPROC_PER_NODE": "2", "OMP_NUM_THREADS": "1"}
# each comparison's A and B: the yaml keys that differ from the quickstart's own config
VARIANTS: dict[str, dict[str, dict[str, Any]]] = {
    "checkpointing": {"checkpointing": {"disable_gradient_checkpointing": False},
                      "none": {"disable_gradient_checkpointing": True}},
    "sorting": {"one batch": {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 1,
                              "sort_micro_batches": True},
                "2 sorted x 8": {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2,
                                 "sort_micro_batches": True}},
    # one process on both cores (torch's two intra-op threads) against two torchrun ranks of one thread each (gloo
    # all-reduce of the gradient): the same 16-row steps, each rank two sorted micro-batches of 4
    "ranks": {"1 process": {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2,
                            "sort_micro_batches": True},
              "2 ranks": {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4,
                          "sort_micro_batches": True,
                          ENV: RANKS}},
    # two ranks: each rank's step as 2 sorted micro-batches of 4 against 4 of 2 (rows dealt to the ranks in turn)
    "rank_micro": {"2 ranks, 2 x 4": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                                      "sort_micro_batches": True, ENV: RANKS},
                   "2 ranks, 4 x 2": {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4,
                                      "sort_micro_batches": True, ENV: RANKS}},
    # float32 (the quickstart's) against bf16 autocast with float32 weights (HF Trainer's --bf16 on the CPU)
    "precision": {"fp32": FP32, "bf16": {"bf16": True, "use_cpu": True, "attention_fp32": False}},
    # bf16 autocast with the attention kernel in bf16 against in float32 (attention_fp32)
    "attention": {"bf16": {"bf16": True, "use_cpu": True, "attention_fp32": False},
                  "bf16 + fp32 attention": {"bf16": True, "use_cpu": True, "attention_fp32": True}},
    # float32 against bf16 autocast with the attention in float32
    # the attention calls whole against in query chunks over the keys up to them (attention_chunks)
    "chunks": {"whole": {"attention_chunks": 0}, "3 chunks": {"attention_chunks": 3}},
    "mixed": {"fp32": FP32, "bf16 + fp32 attention": {"bf16": True, "use_cpu": True,
                                                                  "attention_fp32": True}},
    # libgomp's default wait at a barrier (spin ~300k times, ~3 ms, then sleep) against a short spin
    # (GOMP_SPINCOUNT=3000) or none (OMP_WAIT_POLICY=PASSIVE: what scripts/test.sh sets); with --busy N beside, as on
    # a shared machine
    "openmp": {"spin (default)": {ENV: {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}},
               "short spin": {ENV: {"GOMP_SPINCOUNT": "3000", "OMP_WAIT_POLICY": None}}},
    # the head and the loss at every position against only where the next token is trained (trained_logits_only,
    # what the quickstart sets): the same loss by construction
    "logits": {"all positions": {"trained_logits_only": False}, "trained only": {"trained_logits_only": True}},
    "passive": {"spin (default)": {ENV: {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}},
                "passive": {ENV: {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None}}},
    # the batches read and collated in the training process between steps (LLaMA-Factory's default) against one
    # dataloader worker process that prepares the next ones while a step computes
    "loader": {"in the trainer": {"dataloader_num_workers": 0}, "1 worker": {"dataloader_num_workers": 1}},
    # the step's 16 rows as 2 sorted micro-batches of 8 (the quickstart's) or 4 of 4: less padding (17.5% -> 7% of
    # the tokens of the quickstart's set), more micro-batches
    "micro": {"2 sorted x 8": {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2,
                               "sort_micro_batches": True},
              "4 sorted x 4": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4,
                               "sort_micro_batches": True}},
    # torch's intra-op threads: one a core (its default) against one; with --busy N beside, as in the test suite
    # (three pytest processes on two cores)
    "threads": {"a thread a core": {ENV: {"OMP_NUM_THREADS": None}}, "1 thread": {ENV: {"OMP_NUM_THREADS": "1"}}},
    # every row's copy of the common prompt prefix computed (the stock step) against the prefix run once per
    # micro-batch, its cache shared (share_prefix, what the quickstart sets): the same loss by construction
    "prefix": {"per row": {"share_prefix": False}, "shared": {"share_prefix": True}},
}


def run_once(work: Path, out: Path, steps: int, overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """One ``afm-sft train`` of ``steps`` steps with the quickstart's yaml plus ``overrides``; its trainer log rows."""
    from afm.quickstart.profile import Profile
    from afm.quickstart.recipe import sft_config

    profile = Profile(**{k: v for k, v in json.loads((work / "profile.json").read_text()).items()
                         if k in Profile.__dataclass_fields__})
    # one process on both cores, the variants' common base (--compare ranks: the quickstart's 2 ranks against it)
    profile = replace(profile, sft_ranks=1)
    if profile.student:  # a pretrained student (--model): its folder and LLaMA-Factory template, as the run had
        from afm.quickstart.student import lf_template, pretrained_dir

        model = pretrained_dir(profile.student)
        cfg = sft_config(model, work / "distill" / "sft_data", out, profile.sft_schedule(),
                         template=lf_template(model))
    else:
        cfg = sft_config(work / "student", work / "distill" / "sft_data", out, profile.sft_schedule())
    overrides = dict(overrides)
    extra_env = overrides.pop(ENV, {})
    cfg.update(max_steps=steps, logging_steps=1, plot_loss=False, **overrides)
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.update({k: v for k, v in extra_env.items() if v is not None})
    for name in (k for k, v in extra_env.items() if v is None):  # None: the variable unset
        env.pop(name, None)
    if extra_env.get("FORCE_TORCHRUN"):
        from afm.common.procs import free_port

        env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", str(free_port())
        # LLaMA-Factory starts ``torchrun`` by name: this interpreter's (an unactivated venv's) first
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run([sys.executable, "-m", "afm.sft.cli", "train", str(path)], cwd=REPO, env=env, stdout=log,
                       stderr=subprocess.STDOUT, check=True)
    return [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]


def steps_per_second(rows: list[dict[str, Any]], warmup: int) -> float:
    """Steps/s between step ``warmup`` and the last step (the trainer log's elapsed times, whole seconds)."""
    def seconds(row: dict[str, Any]) -> int:
        h, m, s = (int(x) for x in row["elapsed_time"].split(":"))
        return 3600 * h + 60 * m + s

    rows = [r for r in rows if "loss" in r]
    first = next(r for r in rows if r["current_steps"] >= warmup)
    last = rows[-1]
    return (last["current_steps"] - first["current_steps"]) / max(seconds(last) - seconds(first), 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workdir", type=Path, help="a finished afm quickstart run (its student and SFT set)")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--compare", choices=sorted(VARIANTS), default="checkpointing")
    p.add_argument("--busy", type=int, default=0, help="busy-loop processes beside each run (a shared machine)")
    args = p.parse_args(argv)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        return _compare(args)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _compare(args: argparse.Namespace) -> int:
    (name_a, over_a), (name_b, over_b) = VARIANTS[args.compare].items()
    rates: dict[str, list[float]] = {name_a: [], name_b: []}
    cpu: dict[str, list[float]] = {name_a: [], name_b: []}
    losses: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="afm-bench-sft-") as tmp:
        for i, (name, over) in enumerate(((name_a, over_a), (name_b, over_b), (name_b, over_b), (name_a, over_a))):
            before = _children_cpu()
            rows = run_once(args.workdir, Path(tmp) / f"run_{i}", args.steps, over)
            cpu[name].append(_children_cpu() - before)
            rate = steps_per_second(rows, args.warmup)
            rates[name].append(rate)
            losses.setdefault(name, [r["loss"] for r in rows if "loss" in r])
            print(f"run {i + 1}/4: {name:13s} {rate:.3f} steps/s, {cpu[name][-1]:.1f} CPU s (the whole process)",
                  flush=True)
    a, b = statistics.median(rates[name_a]), statistics.median(rates[name_b])
    print(f"CPU s a run (medians): {name_a} {statistics.median(cpu[name_a]):.1f}, {name_b} "
          f"{statistics.median(cpu[name_b]):.1f}; busy loops beside: {args.busy}")
    rel = max(abs(x - y) / max(abs(x), 1e-6) for x, y in zip(losses[name_a], losses[name_b], strict=True))
    print(f"{name_a} {a:.3f} steps/s, {name_b} {b:.3f} steps/s (medians of 2): {name_b}/{name_a} {b / a:.3f}x; "
          f"losses agree step by step (rel 1e-3): {rel <= 1e-3} (largest relative difference {rel:.2e}); "
          f"mean loss {statistics.mean(losses[name_a]):.4f} / {statistics.mean(losses[name_b]):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
