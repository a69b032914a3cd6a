"""Reward latency on normal answers: p50/p99 of ``compute_score`` per data-source kind, for a before/after check.

Issue 39 put every grader under a deadline, moved afm's math reading into the Math-Verify workers, ran code checks
in a harness of two processes and changed the judge's verdict grammar; none of that may slow the rewards of
ordinary answers. This script scores seeded, honest CoA trajectories (each a mix of right and wrong answers) one
at a time through ``afm.rewards.compute_score`` and prints p50/p99 latency and scores/s per kind:

- ``qa``: ``hotpotqa`` (EM/F1 on the last ``<answer>``);
- ``math``: ``MATH500`` (fractions vs decimals, percentages, intervals, symbolic forms; Math-Verify workers);
- ``code_stdin``: ``livecodebench_v5`` stdin tests (4 tests a problem);
- ``code_asserts``: ``livecodebench_v5`` inline asserts (``functional``, 4 asserts);
- ``code_humaneval``: ``test``/``entry_point`` checks (4 asserts).

It only calls ``compute_score``, so the same file runs on an older checkout for the baseline:

    .venv/bin/python benchmarks/bench_reward_latency.py [--n 200] [--repo PATH] [--json FILE]

``--repo`` imports ``afm`` from another checkout (a ``git worktree`` of the commit before a change); run the two
alternately (A-B-B-A) on a quiet machine and compare the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

F = "```"


def _traj(answer: str, rng: random.Random) -> str:
    obs = " ".join(rng.choice(("the", "river", "town", "census", "1921", "population")) for _ in range(60))
    return (f"<think>Plan the steps.</think>\n<web_search>query {rng.randint(0, 999)}</web_search>\n\n"
            f"<observation>\n{obs}\n</observation>\n\n<reflection>Checked.</reflection>\n<answer>{answer}</answer>")


def items(kind: str, n: int, seed: int) -> list[tuple[str, str, object]]:
    """(data_source, solution_str, ground_truth) for ``kind``; half right, half wrong."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        good = i % 2 == 0
        if kind == "qa":
            gold = rng.choice(("Marrowgate", "Lake Ivel", "Saint Orm", "1921", "Delta Crown"))
            out.append(("hotpotqa", _traj(gold if good else "Someplace Else", rng), [gold]))
        elif kind == "math":
            a, b = rng.randint(1, 40), rng.randint(2, 50)
            forms = [(f"\\frac{{{a}}}{{{b}}}", f"{a / b:.6g}" if good else f"{(a + 1) / b:.6g}"),
                     (f"{a}\\%", f"{a}\\%" if good else f"{a + 1}\\%"),
                     (f"[{a}, {a + b})", f"[{a},{a + b})" if good else f"({a},{a + b}]"),
                     (f"{a}x^2+{b}", f"{b}+{a}x^{{2}}" if good else f"{b}+{a + 1}x^{{2}}")]
            gold, pred = forms[i % len(forms)]
            out.append(("MATH500", _traj(f"\\boxed{{{pred}}}", rng), gold))
        else:
            k, m = rng.randint(1, 9), rng.randint(-5, 5)
            xs = [rng.randint(-50, 50) for _ in range(4)]
            bump = "" if good else " + 1"
            if kind == "code_stdin":
                prog = f"x = int(input())\nprint({k} * x + {m}{bump})"
                gt = {"stdin": [f"{x}\n" for x in xs], "expected_output": [f"{k * x + m}\n" for x in xs]}
                out.append(("livecodebench_v5", _traj(f"{F}python\n{prog}\n{F}", rng), gt))
            elif kind == "code_asserts":
                prog = f"class Solution:\n    def f(self, x: int) -> int:\n        return {k} * x + {m}{bump}"
                gt = {"functional": "".join(f"assert Solution().f({x}) == {k * x + m}\n" for x in xs)}
                out.append(("livecodebench_v5", _traj(f"{F}python\n{prog}\n{F}", rng), gt))
            else:
                prog = f"def f(x):\n    return {k} * x + {m}{bump}"
                gt = {"test": "def check(candidate):\n" + "".join(f"    assert candidate({x}) == {k * x + m}\n"
                                                                  for x in xs), "entry_point": "f"}
                out.append(("codecontests", _traj(f"{F}python\n{prog}\n{F}", rng), gt))
    return out


KINDS = ("qa", "math", "code_stdin", "code_asserts", "code_humaneval")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="answers per kind (half right)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]),
                    help="the checkout whose afm is measured (default: this one)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    sys.path.insert(0, args.repo)
    import afm
    from afm.rewards import compute_score

    print(f"afm from {Path(afm.__file__).parent}, {os.cpu_count()} cores, n={args.n}")
    rows = []
    for kind in args.kinds.split(","):
        work = items(kind, args.n, seed=7)
        for ds, sol, gt in work[:5]:  # warm-up: workers and pools start
            compute_score(ds, sol, gt)
        lat, right = [], 0
        for i, (ds, sol, gt) in enumerate(work):
            t = time.perf_counter()
            res = compute_score(ds, sol, gt)
            lat.append(time.perf_counter() - t)
            right += res["acc"] == (1.0 if i % 2 == 0 else 0.0)
        lat.sort()
        row = {"kind": kind, "p50_ms": 1000 * statistics.median(lat),
               "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
               "scores_per_s": len(lat) / sum(lat), "labels_agree": right / len(work)}
        rows.append(row)
        print(f"{kind:15s} p50 {row['p50_ms']:8.2f} ms  p99 {row['p99_ms']:8.2f} ms  {row['scores_per_s']:8.1f}/s"
              f"  labels agree {row['labels_agree']:.0%}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
