"""Code grader throughput and latency: the grading harness vs the in-process checks it replaced (issue 39).

For each ground-truth shape that changed — LiveCodeBench inline asserts (``functional``), HumanEval
``test``/``entry_point``, and functional tests by ``fn_name`` (APPS / LiveCodeBench test-case files, 6 tests a
problem) — it grades the same seeded mix of correct and wrong programs (half each) two ways on one pooled sandbox:

- **baseline, in-process** (the design before issue 39, rebuilt here: the program with the checks appended, success
  read from its exit status; functional tests one execution per test with a driver that prints the result);
- **harness** (:func:`afm.sandbox.grading.agrade_asserts` / :func:`~afm.sandbox.grading.agrade`: checker and
  candidate processes, plain data between them).

Stdin tests did not change and are measured as a control. Reported: grades/s at concurrency 1 and 2 × cores,
p50/p99 latency per grade, ratio harness/baseline, and whether every grade agreed with its label. Rounds alternate
A-B-B-A; medians over rounds.

    .venv/bin/python benchmarks/bench_code_grader.py [--n 120] [--rounds 2] [--json benchmarks/out/code_grader.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from afm.sandbox import Limits, Sandbox  # noqa: E402
from afm.sandbox.grading import FUNCTIONAL_HEADER, agrade, agrade_asserts, outputs_match  # noqa: E402

LIMITS = Limits(wall_s=6.0, memory_mb=1024, output_bytes=10_000_000)
MARKER = "__BASELINE_RESULT__"


def _problem(rng: random.Random) -> tuple[int, int, list[list[int]]]:
    k, m = rng.randint(1, 9), rng.randint(-5, 5)
    xs = [[rng.randint(-50, 50) for _ in range(rng.randint(1, 6))] for _ in range(6)]
    return k, m, xs


def items(shape: str, n: int, seed: int) -> list[tuple[str, dict, bool]]:
    """(program, test data, expected pass) for ``shape``; half correct, half off by one."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k, m, xs = _problem(rng)
        good = i % 2 == 0
        bump = "" if good else " + 1"
        want = [[k * x + m for x in row] for row in xs]
        if shape == "humaneval":
            prog = f"def affine(xs):\n    return [{k} * x + {m}{bump} for x in xs]\n"
            checks = "def check(candidate):\n" + "".join(f"    assert candidate({row}) == {w}\n"
                                                         for row, w in zip(xs, want, strict=True))
            out.append((prog, {"checks": checks, "entry": "affine"}, good))
        elif shape == "leetcode_asserts":
            prog = (f"class Solution:\n    def affine(self, xs: List[int]) -> List[int]:\n"
                    f"        return [{k} * x + {m}{bump} for x in xs]\n")
            checks = "".join(f"assert Solution().affine({row}) == {w}\n" for row, w in zip(xs, want, strict=True))
            out.append((prog, {"checks": checks}, good))
        elif shape == "fn_name":
            prog = (f"class Solution:\n    def affine(self, xs: List[int]) -> List[int]:\n"
                    f"        return [{k} * x + {m}{bump} for x in xs]\n")
            tests = [{"input": json.dumps(row), "output": json.dumps(w)} for row, w in zip(xs, want, strict=True)]
            out.append((prog, {"tests": tests}, good))
        else:  # stdin control
            prog = (f"xs = list(map(int, input().split()))\nprint(*[{k} * x + {m}{bump} for x in xs])\n")
            tests = [{"input": " ".join(map(str, row)) + "\n", "output": " ".join(map(str, w)) + "\n"}
                     for row, w in zip(xs, want, strict=True)]
            out.append((prog, {"tests": tests}, good))
    return out


# -- the baseline: checks in the candidate's own process (what afm did before issue 39) ----------------------------
async def baseline(sb: Sandbox, shape: str, prog: str, data: dict) -> bool:
    if shape == "humaneval":
        res = await sb.arun(prog + "\n\n" + data["checks"] + f"\n\ncheck({data['entry']})\n", "", LIMITS)
        return res.status == "ok"
    if shape == "leetcode_asserts":
        res = await sb.arun(FUNCTIONAL_HEADER + prog + "\n\n" + data["checks"] + "\n", "", LIMITS)
        return res.status == "ok"
    if shape == "fn_name":
        driver = ("\nimport json as _j, sys as _s\n_a = [_j.loads(l) for l in _s.stdin.read().split('\\n') if l.strip()]\n"
                  "_t = getattr(Solution(), 'affine') if 'Solution' in globals() else affine\n"
                  f"print({MARKER!r} + _j.dumps(_t(*_a)))\n")
        for t in data["tests"]:
            res = await sb.arun(FUNCTIONAL_HEADER + prog + driver, t["input"], LIMITS)
            lines = [ln for ln in res.stdout.splitlines() if ln.startswith(MARKER)]
            if res.status != "ok" or not lines or json.loads(lines[-1][len(MARKER):]) != json.loads(t["output"]):
                return False
        return True
    for t in data["tests"]:
        res = await sb.arun(prog, t["input"], LIMITS)
        if res.status != "ok" or not outputs_match(res.stdout, t["output"]):
            return False
    return True


async def harness(sb: Sandbox, shape: str, prog: str, data: dict) -> bool:
    if shape == "humaneval":
        return (await agrade_asserts(sb, prog, data["checks"], limits=LIMITS, entry_point=data["entry"])).passed
    if shape == "leetcode_asserts":
        return (await agrade_asserts(sb, FUNCTIONAL_HEADER + prog, data["checks"], limits=LIMITS,
                                     prelude=FUNCTIONAL_HEADER)).passed
    if shape == "fn_name":
        return (await agrade(sb, prog, data["tests"], fn_name="affine", limits=LIMITS,
                             total_timeout_s=7 * len(data["tests"]) + 5)).passed
    return (await agrade(sb, prog, data["tests"], limits=LIMITS)).passed


async def measure(sb: Sandbox, grader, shape: str, work: list[tuple[str, dict, bool]],
                  concurrency: int) -> dict[str, float]:
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    agree = 0

    async def one(prog: str, data: dict, label: bool) -> None:
        nonlocal agree
        async with sem:
            t = time.perf_counter()
            ok = await grader(sb, shape, prog, data)
            lat.append(time.perf_counter() - t)
            agree += ok == label

    t0 = time.perf_counter()
    await asyncio.gather(*[one(*w) for w in work])
    wall = time.perf_counter() - t0
    lat.sort()
    return {"grades_per_s": len(work) / wall, "p50_ms": 1000 * statistics.median(lat),
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], "agree": agree / len(work)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=120, help="programs per shape (half correct)")
    ap.add_argument("--rounds", type=int, default=2, help="A-B-B-A rounds (medians reported)")
    ap.add_argument("--shapes", default="humaneval,leetcode_asserts,fn_name,stdin")
    ap.add_argument("--json", default="benchmarks/out/code_grader.json")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    conc = 2 * cores
    rows = []
    with Sandbox(mode="pool", limits=LIMITS, concurrency=conc, preload=()) as sb:
        d = sb.describe()
        print(f"backend {d['backend']} (cgroups={d.get('cgroups')}), pool of {conc}, {cores} cores, n={args.n}, "
              f"{args.rounds} A-B-B-A rounds")
        for shape in args.shapes.split(","):
            work = items(shape, args.n, seed=len(shape))
            asyncio.run(measure(sb, harness, shape, work[:4], 1))  # warm-up
            for c in (1, conc):
                runs: dict[str, list[dict[str, float]]] = {"baseline": [], "harness": []}
                for _ in range(args.rounds):
                    for name in ("baseline", "harness", "harness", "baseline"):
                        grader = baseline if name == "baseline" else harness
                        runs[name].append(asyncio.run(measure(sb, grader, shape, work, c)))
                med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
                ratio = med["harness"]["grades_per_s"] / med["baseline"]["grades_per_s"]
                for name in ("baseline", "harness"):
                    m = med[name]
                    rows.append({"shape": shape, "concurrency": c, "grader": name, **m,
                                 "ratio_vs_baseline": m["grades_per_s"] / med["baseline"]["grades_per_s"]})
                    print(f"{shape:17s} c={c:<2d} {name:9s} {m['grades_per_s']:7.1f} grades/s  p50 {m['p50_ms']:7.1f} ms"
                          f"  p99 {m['p99_ms']:7.1f} ms  agree {m['agree']:.0%}")
                print(f"{shape:17s} c={c:<2d} harness/baseline x{ratio:.2f}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
