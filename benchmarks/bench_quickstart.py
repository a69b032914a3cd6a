"""`afm quickstart` on several seeds: seconds per stage, and whether RL fixed the family it was meant to fix.

Runs the default profile (or ``--full``) once per seed, each in its own work folder, one after another, and reads
each run's ``summary.json``. Per seed it prints the stage times, SFT and RL accuracy on the RL target family
(``rl_target`` in its summary: ``lookup`` in the default world) with the paired RL − SFT difference and its 95% CI, and any other family RL made
worse beyond its CI (a resolved negative difference). The spread check of issue 28: on every seed, RL − SFT on the
target family >= ``--min-gain`` points with the CI above 0, and no other family resolved below 0. Exit 1 when a
seed fails it. The 1-minute load average before and after each run is printed: the machine may be shared.

    .venv/bin/python benchmarks/bench_quickstart.py [--seeds 0 1 2] [--out benchmarks/out/quickstart] [--full]
        [--teacher-shortcut] [-- more afm quickstart flags, e.g. --no-teacher-shortcut]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def run_seed(seed: int, out: Path, full: bool, extra: list[str] | None = None) -> dict[str, Any]:
    """One ``afm quickstart`` run (``extra``: more of its flags); its summary plus the wall time and the load."""
    work = out / f"seed{seed}"
    cmd = [sys.executable, "-m", "afm.cli", "quickstart", "--workdir", str(work), "--seed", str(seed)]
    if full:
        cmd.append("--full")
    cmd += extra or []
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    with (out / f"seed{seed}.log").open("w") as log:
        code = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.monotonic() - t0
    if code != 0:
        raise RuntimeError(f"seed {seed}: afm quickstart exited {code}; log {out / f'seed{seed}.log'}")
    summary = json.loads((work / "summary.json").read_text())
    return {"seed": seed, "wall_s": round(wall, 1), "load_before": round(load0, 1),
            "load_after": round(os.getloadavg()[0], 1), "summary": summary}


def verdict(summary: dict[str, Any], min_gain: float) -> dict[str, Any]:
    """The spread check on one run's summary."""
    target = (summary.get("rl_target") or {}).get("family")
    rows = summary.get("comparisons", {}).get("rl_vs_sft", {})
    row = rows.get(target) if target else None
    worse = {f: r["diff"] for f, r in rows.items()
             if f not in (target, "macro") and r.get("excludes_zero") and (r.get("diff") or 0) < 0}
    ok = bool(row and row["diff"] is not None and row["diff"] >= min_gain and row["ci"] and row["ci"][0] > 0
              and not worse)
    return {"target": target, "sft": summary["stages"].get("sft", {}).get(target),
            "rl": summary["stages"].get("rl", {}).get(target), "diff": row and row["diff"],
            "ci": row and row["ci"], "others_worse": worse, "ok": ok, "rl_skipped": summary.get("rl_skipped")}


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "quickstart")
    p.add_argument("--full", action="store_true")
    p.add_argument("--min-gain", type=float, default=0.10, help="RL - SFT on the target family (fraction)")
    p.add_argument("--teacher-shortcut", action="store_true", help="pass --teacher-shortcut (the default world already; with --full, which is the plain world, it switches)")
    p.add_argument("extra", nargs="*", help="more afm quickstart flags (after --)")
    args = p.parse_args(argv)
    extra = (["--teacher-shortcut"] if args.teacher_shortcut else []) + list(args.extra)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # offline, as the quickstart is meant to run
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    failed = []
    for seed in args.seeds:
        r = run_seed(seed, args.out, args.full, extra)
        v = verdict(r["summary"], args.min_gain)
        ci = v["ci"] and f"[{100 * v['ci'][0]:+.0f}, {100 * v['ci'][1]:+.0f}]"
        diff = "-" if v["diff"] is None else f"{100 * v['diff']:+.0f} pt"
        print(f"seed {seed}: {r['wall_s']:.0f} s (load {r['load_before']} -> {r['load_after']}); stages "
              f"{json.dumps(r['summary']['seconds'])}")
        print(f"  {v['target']}: SFT {pct(v['sft'])} -> RL {pct(v['rl'])}, {diff} {ci}; other families worse beyond "
              f"their CI: {v['others_worse'] or 'none'}; macro SFT "
              f"{pct(r['summary']['stages'].get('sft', {}).get('macro'))} RL "
              f"{pct(r['summary']['stages'].get('rl', {}).get('macro'))}; {'ok' if v['ok'] else 'FAILED'}"
              + (f" (RL skipped: {v['rl_skipped']})" if v["rl_skipped"] else ""), flush=True)
        (args.out / f"seed{seed}.verdict.json").write_text(json.dumps({**v, **{k: r[k] for k in r if k != 'summary'},
                                                                       "seconds": r["summary"]["seconds"]}) + "\n")
        if not v["ok"]:
            failed.append(seed)
    print("spread check:", "passed on every seed" if not failed else f"FAILED on seeds {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
