"""Seconds per DAPO step of verl's real trainer on the CPU (the local backend), split by phase.

Runs ``experiments/train_dapo_code_agent.sh --local`` (verl ``main_ppo``: hf rollout, ``afm_agent`` with the nsjail
code tool, ``compute_score`` through the dapo reward manager, FSDP2 actor on the ``cpu`` platform) for ``--steps``
steps, twice in the same process: **baseline** with verl 0.9.1's own replay-buffer poll (a fixed 2 s sleep between
looks at finished trajectories, ``AFM_VERL_POLL_S=2.0``) and **afm** with the patched poll (0.02 s). Warm steps
(all but the first) are averaged. Phases:

* ``gen``: verl's rollout phase (``timing_s/gen``): agent loops, the tools and the streaming reward, waiting on the
  replay buffer included; inside it, ``model`` is the hf rollout's decoding time (from its trace), ``tools`` the
  summed tool-call latency of the step's trajectories (calls overlap with other trajectories' decoding), and
  ``reward`` the time ``compute_score`` takes on the step's samples, re-measured here on verl's rollout dump;
* ``old_log_prob``, ``ref`` (absent: DAPO has no KL), ``adv``, ``update_actor``, ``update_weights`` (the push to the
  rollout server), and ``other`` (the rest of ``timing_s/step``).

Two sizes: ``small`` — the first try's size, 4 prompts x 2 samples, 32-token responses, one turn (answers are cut,
so the group filter is off) — and ``toy`` — the --local profile: 4 x 4, 128 tokens, up to 3 turns with the code
tool, DAPO's group filter on.

    .venv-rl/bin/python benchmarks/bench_rl_step.py [--config small|toy|both] [--steps 6] [--out benchmarks/out/rl_step]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "experiments" / "train_dapo_code_agent.sh"
CONFIGS = {
    "small": {"TRAIN_BATCH_SIZE": "4", "MINI_BATCH_SIZE": "4", "ROLLOUT_N": "2", "MAX_RESPONSE_LENGTH": "32",
              "MAX_TURNS": "1", "FILTER_GROUPS": "false", "OVERLONG_BUFFER": "false"},
    "toy": {},
}
PHASES = ("gen", "old_log_prob", "ref", "adv", "update_actor", "update_weights")


def _steps(log: Path) -> list[dict[str, float]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"step:(\d+) - (.*)", line)
        if not m:
            continue
        row: dict[str, float] = {"step": float(m.group(1))}
        for kv in m.group(2).split(" - "):
            key, _, value = kv.partition(":")
            value = re.sub(r"^np\.\w+\((.*)\)$", r"\1", value.strip())
            with contextlib.suppress(ValueError):  # a non-numeric field is not a timing
                row[key.strip()] = float(value)
        out.append(row)
    return out


def run(config: str, steps: int, poll: str, work: Path) -> dict:
    """One launcher run; returns per-warm-step phase seconds."""
    from afm.common.ray_scope import private_ray_tmpdir, stop_ray_in

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VERL_PLATFORM")}
    env.update(CONFIGS[config], AFM_LOCAL_DIR=str(REPO / "benchmarks" / "out" / "rl_step_toy"),
               CKPT_DIR=str(work / "ckpt"), AFM_RL_TRACE_DIR=str(work / "trace"), ROLLOUT_DATA_DIR=str(work / "dump"),
               TOTAL_TRAINING_STEPS=str(steps), SAVE_FREQ="-1", SAVE_HF_MODEL="false", AFM_VERL_POLL_S=poll,
               PYTHON=sys.executable, RESUME_MODE="disable")
    ray_tmp = private_ray_tmpdir()  # stopping this run's Ray ends no other cluster (`ray stop` ends them all)
    env["RAY_TMPDIR"] = str(ray_tmp)
    log = work / "train.log"
    t0 = time.monotonic()
    with log.open("w") as f:
        rc = subprocess.run(["bash", str(SCRIPT), "--local"], cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT,
                            timeout=1800).returncode
    wall = time.monotonic() - t0
    stop_ray_in(ray_tmp)
    if rc != 0:
        raise SystemExit(f"{config}/{poll}: the run failed (rc {rc}); see {log}")
    rows = _steps(log)
    warm = [r for r in rows if r["step"] > 1]
    # hf rollout decoding time per step: deltas of the server's busy seconds between weight pushes
    events = [json.loads(x) for p in (work / "trace").glob("hf_rollout.*.jsonl") for x in p.read_text().splitlines()]
    pushes = sorted((e["global_steps"], e["busy_s"]) for e in events if e["event"] == "weights")
    busy = {g: b - pb for (g, b), (_, pb) in zip(pushes[1:], pushes[:-1], strict=False)}
    trajs = [json.loads(x) for p in (work / "trace").glob("afm_agent.*.jsonl") for x in p.read_text().splitlines()]
    tools: dict[int, float] = {}
    for t in trajs:
        g = int(t.get("global_steps") or 0)
        tools[g] = tools.get(g, 0.0) + float(t.get("tool_s") or 0.0)
    reward = _reward_seconds(work / "dump")
    phases: dict[str, list[float]] = {k: [] for k in (*PHASES, "model", "tools", "reward", "other", "step")}
    for r in warm:
        step = int(r["step"])
        for k in PHASES:
            phases[k].append(r.get(f"timing_s/{k}", 0.0))
        phases["step"].append(r["timing_s/step"])
        phases["other"].append(r["timing_s/step"] - sum(r.get(f"timing_s/{k}", 0.0) for k in PHASES))
        # trajectories of step k were generated with the weights pushed after step k-1
        phases["model"].append(busy.get(step, 0.0))
        phases["tools"].append(tools.get(step - 1, 0.0))
        phases["reward"].append(reward.get(step, 0.0))
    return {"config": config, "poll": poll, "wall_s": wall, "steps": len(rows),
            "mean": {k: statistics.mean(v) if v else 0.0 for k, v in phases.items()},
            "samples_per_step": statistics.mean(len([1 for t in trajs if int(t.get("global_steps") or 0) == s - 1])
                                                for s in range(2, len(rows) + 1)) if len(rows) > 1 else 0}


def _reward_seconds(dump: Path) -> dict[int, float]:
    from afm.rewards import compute_score
    from afm.rl.local.toy import DATA_SOURCE

    out: dict[int, float] = {}
    for p in dump.glob("*.jsonl"):
        for line in p.read_text().splitlines():
            d = json.loads(line)
            t0 = time.perf_counter()
            compute_score(DATA_SOURCE, d["output"], d["gts"])
            out[int(d["step"])] = out.get(int(d["step"]), 0.0) + time.perf_counter() - t0
    return out


def report(base: dict, ours: dict) -> str:
    lines = [f"### config `{ours['config']}` ({ours['samples_per_step']:.0f} trajectories generated per warm step)",
             "", "| phase | baseline (verl poll 2 s) s | afm (poll 0.02 s) s | afm share of step |", "|---|---|---|---|"]
    for k in ("gen", "model", "tools", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights",
              "other", "step"):
        b, o = base["mean"][k], ours["mean"][k]
        share = o / ours["mean"]["step"] if ours["mean"]["step"] else 0.0
        label = {"model": "  gen: hf decoding", "tools": "  gen: tool calls (summed)",
                 "reward": "  gen: compute_score (re-measured)"}.get(k, k)
        lines.append(f"| {label} | {b:.3f} | {o:.3f} | {share:.0%} |")
    ratio = base["mean"]["step"] / ours["mean"]["step"] if ours["mean"]["step"] else float("nan")
    lines += ["", f"warm step: baseline {base['mean']['step']:.2f} s, afm {ours['mean']['step']:.2f} s "
                  f"(baseline/afm = {ratio:.2f}x); whole runs {base['wall_s']:.0f} s / {ours['wall_s']:.0f} s "
                  f"({ours['steps']} steps, Ray start-up included)"]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=("small", "toy", "both"), default="both")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "rl_step")
    args = ap.parse_args()
    configs = ("small", "toy") if args.config == "both" else (args.config,)
    results = []
    for config in configs:
        base = run(config, args.steps, "2.0", args.out / f"{config}_baseline")
        ours = run(config, args.steps, "0.02", args.out / f"{config}_afm")
        results.append({"baseline": base, "afm": ours})
        print(report(base, ours), flush=True)
        print()
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
