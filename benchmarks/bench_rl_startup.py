"""The fixed cost of a ``--local`` DAPO launch: seconds from the launch to verl's "ready to fit" and to the end of
step 1, and the CPU seconds the machine spent meanwhile, with and without afm's worker zygote (``--compare zygote``,
the default: ``WORKER_ZYGOTE=false`` vs ``true``), Ray's dashboard (``--compare dashboard``) or Ray's worker preload
(``--compare preload``).

verl starts its actors one after another (the task runner, the FSDP worker group, the rollout server, the agent-loop
and reward workers), and each new Ray worker process imports verl (torch, torch._dynamo through tensordict,
transformers: ~6.6 s of one core here) before it takes its actor. Ray can import modules in a worker *before* it
accepts work (the raylet's ``preload_python_modules``, set as ``RAY_preload_python_modules``), and prestarts one
worker per CPU when the driver connects: with the preload those prestarted workers import verl while the driver is
still starting, and an actor that lands on one finds verl imported. Actors with their own ``runtime_env`` (verl's
worker groups set per-rank env vars) get a fresh worker, which preloads before taking the actor: no gain, no loss.
Ray's dashboard is a head process with five sub-heads and an agent, each a Python process importing its modules
while the driver and the first workers start, on the same cores; nothing afm or verl runs reads it.

Each round runs ``experiments/train_dapo_code_agent.sh --local`` for one step (the toy policy, hf rollout), once
per variant, A-B-B-A, after one uncounted warm-up run; the log is watched as it grows, so each marker is timed from the launch:

* ``ready``: verl's "all initialize finished, ready to fit" (every worker group built, checkpoint engine ready);
* ``step1``: the first step's metrics line;
* ``wall``: the launch until the script exits;
* ``cpu``: CPU seconds of the whole machine from the launch to the exit (``/proc/stat``; run it on an idle machine).

    .venv-rl/bin/python benchmarks/bench_rl_startup.py [--compare zygote|dashboard|preload] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SCRIPT = REPO / "experiments" / "train_dapo_code_agent.sh"
MARKERS = {"ready": "ready to fit", "step1": "step:1 - "}


def variants(compare: str, modules: str) -> dict[str, tuple[dict[str, str], list[str]]]:
    """A comparison's two variants: name -> (environment variables, trailing Hydra overrides)."""
    if compare == "zygote":
        return {"no zygote": ({"WORKER_ZYGOTE": "false"}, []), "zygote": ({"WORKER_ZYGOTE": "true"}, [])}
    if compare == "preload":
        return {"baseline": ({"WORKER_ZYGOTE": "false"}, []),
                "preload": ({"WORKER_ZYGOTE": "false", "RAY_preload_python_modules": modules}, [])}
    # Ray's dashboard (its head process and its five sub-heads, started by ray.init) on and off
    return {"dashboard": ({}, ["++ray_kwargs.ray_init.include_dashboard=True"]),
            "no dashboard": ({}, ["++ray_kwargs.ray_init.include_dashboard=False"])}


def launch(env_extra: dict[str, str], args: list[str], work: Path) -> dict[str, float]:
    """One 1-step ``--local`` run; seconds from the launch to each marker and to the exit."""
    from afm.common.ray_scope import private_ray_tmpdir, stop_ray_in

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "VERL_PLATFORM", "RAY_preload_python_modules")}
    env.update(AFM_LOCAL_DIR=str(REPO / "benchmarks" / "out" / "rl_startup_toy"), CKPT_DIR=str(work / "ckpt"),
               AFM_RL_TRACE_DIR=str(work / "trace"), TOTAL_TRAINING_STEPS="1", SAVE_FREQ="-1",
               SAVE_HF_MODEL="false", PYTHON=sys.executable, RESUME_MODE="disable", FILTER_GROUPS="false")
    env.update(env_extra)
    ray_tmp = private_ray_tmpdir()
    env["RAY_TMPDIR"] = str(ray_tmp)
    log = work / "train.log"
    seen: dict[str, float] = {}
    cpu0 = machine_cpu_s()
    t0 = time.monotonic()
    with log.open("w") as f:
        proc = subprocess.Popen(["bash", str(SCRIPT), "--local", *args], cwd=REPO, env=env, stdout=f,
                                stderr=subprocess.STDOUT)
        while proc.poll() is None:
            text = log.read_text(errors="replace")
            for name, marker in MARKERS.items():
                if name not in seen and marker in text:
                    seen[name] = time.monotonic() - t0
            time.sleep(0.1)
    wall = time.monotonic() - t0
    cpu = machine_cpu_s() - cpu0
    stop_ray_in(ray_tmp)
    if proc.returncode != 0:
        raise SystemExit(f"{work.name}: the run failed (rc {proc.returncode}); see {log}")
    text = log.read_text(errors="replace")
    for name, marker in MARKERS.items():  # a marker written in the last poll interval
        if name not in seen and marker in text:
            seen[name] = wall
    return {**seen, "wall": wall, "cpu": cpu}


def machine_cpu_s() -> float:
    """CPU seconds all cores have spent busy since boot (user, nice, system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return sum(int(v) for v in fields[:3] + fields[5:7]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="A-B-B-A rounds (each: two runs per variant)")
    ap.add_argument("--compare", choices=("zygote", "preload", "dashboard"), default="zygote")
    ap.add_argument("--modules", default="verl.protocol,transformers",
                    help="RAY_preload_python_modules of the preload variant")
    ap.add_argument("--json", default=str(REPO / "benchmarks/out/rl_startup.json"))
    args = ap.parse_args()
    work = REPO / "benchmarks" / "out" / "rl_startup"
    pair = variants(args.compare, args.modules)
    (a, b) = pair
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}; {a} vs {b}", flush=True)
    # a first run not counted: it builds the toy task and policy, and fills the page cache
    row = launch(*pair[a], work / "warm-up")
    print("warm-up   " + "  ".join(f"{k} {v:6.1f} s" for k, v in row.items()), flush=True)
    runs: dict[str, list[dict[str, float]]] = {a: [], b: []}
    for i, variant in enumerate([a, b, b, a] * args.rounds):
        row = launch(*pair[variant], work / f"{i}-{variant.replace(' ', '_')}")
        runs[variant].append(row)
        print(f"{variant:12s} " + "  ".join(f"{k} {v:6.1f} s" for k, v in row.items())
              + f"  (load {os.getloadavg()[0]:.1f})", flush=True)
    print("medians:")
    med = {v: {k: statistics.median(r[k] for r in rows if k in r) for k in (*MARKERS, "wall", "cpu")}
           for v, rows in runs.items()}
    for k in (*MARKERS, "wall", "cpu"):
        print(f"  {k:6s} {a} {med[a][k]:6.1f} s  {b} {med[b][k]:6.1f} s  ratio {med[b][k] / med[a][k]:.2f}x")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"compare": args.compare, "runs": runs, "medians": med}, indent=1))


if __name__ == "__main__":
    main()
