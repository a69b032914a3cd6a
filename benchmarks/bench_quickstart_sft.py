"""The quickstart's masked SFT step time with and without LLaMA-Factory's activation checkpointing.

Takes a finished ``afm quickstart`` run's SFT set and untrained student, and runs the quickstart's own SFT yaml
(``afm.quickstart.recipe.sft_config``) for ``--steps`` optimizer steps, A-B-B-A (each run a fresh ``afm-sft train``
process): A with ``disable_gradient_checkpointing: false`` (LLaMA-Factory's default), B with ``true`` (what the
quickstart sets). Prints each run's steps/s over the steps after ``--warmup`` (from ``trainer_log.jsonl``), the
medians, the ratio, and whether the two variants' losses agree (checkpointing recomputes the forward pass; it must
not change the numbers).

    .venv/bin/python benchmarks/bench_quickstart_sft.py runs/quickstart [--steps 80] [--warmup 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def run_once(work: Path, out: Path, steps: int, checkpointing: bool) -> list[dict[str, Any]]:
    """One ``afm-sft train`` of ``steps`` steps; its trainer log rows."""
    from afm.quickstart.profile import Profile
    from afm.quickstart.recipe import sft_config

    profile = Profile(**{k: v for k, v in json.loads((work / "profile.json").read_text()).items()
                         if k in Profile.__dataclass_fields__})
    cfg = sft_config(work / "student", work / "distill" / "sft_data", out, profile.sft_schedule())
    cfg.update(max_steps=steps, logging_steps=1, plot_loss=False, disable_gradient_checkpointing=not checkpointing)
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
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
    args = p.parse_args(argv)
    rates: dict[str, list[float]] = {"checkpointing": [], "none": []}
    losses: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="afm-bench-sft-") as tmp:
        for i, ckpt in enumerate((True, False, False, True)):
            name = "checkpointing" if ckpt else "none"
            rows = run_once(args.workdir, Path(tmp) / f"{name}_{i}", args.steps, ckpt)
            rate = steps_per_second(rows, args.warmup)
            rates[name].append(rate)
            losses.setdefault(name, [r["loss"] for r in rows if "loss" in r])
            print(f"run {i + 1}/4: {name:13s} {rate:.3f} steps/s", flush=True)
    a, b = statistics.median(rates["checkpointing"]), statistics.median(rates["none"])
    same = all(abs(x - y) <= 1e-3 * max(abs(x), 1e-6) for x, y in zip(losses["checkpointing"], losses["none"], strict=True))
    print(f"checkpointing {a:.3f} steps/s, none {b:.3f} steps/s (medians of 2): none/checkpointing {b / a:.3f}x; "
          f"losses agree step by step (rel 1e-3): {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
