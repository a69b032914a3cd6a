"""afm's math scorer vs the original's (Math-Verify with the gold boxed) on the answer classes of issue 27.

```bash
.venv/bin/python benchmarks/bench_math_classes.py                                  # class table only
.venv/bin/python benchmarks/bench_math_classes.py --original-python /path/mv08/bin/python \\
    --original-data /path/AFM/data                                                  # + the original's files
```

1. **Classes**: every (gold, prediction, truth) row of ``tests/test_rewards_math_forms.py``'s ``CLASSES`` (number
   bases, units, symbol case, thin-space thousands, degree sign, roman i, repeating decimals, e-notation, each with
   near misses). Both scorers get the same answer body, ``\\boxed{prediction}``. afm: ``compute_score("MATH500",
   "<answer>\\boxed{pred}</answer>", gold)``. The original (``mathverify.py`` of its verl tree, as
   ``/work/shared/reference`` describes it): ``parse(answer, parsing_timeout=5)``, 0 with fewer than two parsed
   items, 1 when ``parsed[1]`` is one of the golds as a string, else ``verify(parse("\\boxed{gold}"), parsed)``.
   It runs in ``--original-python`` (a Python with the original's pinned ``math-verify==0.8.0``; default this
   one, whose version is printed).
2. **The original's files** (``--original-data``, a data root in afm's or the original's ``AFM/data`` layout):
   for MATH500, OlympiadBench, AIME24/25 and AMC23, every row's gold as the answer (should score 1) and the gold
   of the row half a file away (should score 0, unless the two golds are equal), by both scorers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from afm.rewards import compute_score  # noqa: E402

FILES = ("math500", "olympiadbench", "aime24", "aime25", "amc23")

# The original's scorer, run in another interpreter: JSON [[golds, answer], ...] on stdin, JSON [0/1, ...] out.
ORIGINAL = r"""
import json, logging, sys
from importlib.metadata import version
from math_verify import parse, verify
logging.disable(logging.CRITICAL)

def score(golds, answer):
    try:
        parsed = parse(answer, parsing_timeout=5)
    except Exception:
        return 0
    if len(parsed) < 2:
        return 0
    if parsed[1] in golds:
        return 1
    for gold in golds:
        try:
            if verify(parse("\\boxed{" + gold + "}", parsing_timeout=5), parsed, timeout_seconds=5):
                return 1
        except Exception:
            continue
    return 0

items = json.load(sys.stdin)
print(json.dumps({"version": version("math-verify"), "scores": [score(g, a) for g, a in items]}))
"""


def original_scores(python: str, items: list[tuple[list[str], str]]) -> tuple[str, list[int]]:
    """The original scorer's verdicts on ``items`` (golds, answer body), and its Math-Verify version."""
    proc = subprocess.run([python, "-c", ORIGINAL], input=json.dumps(items), capture_output=True, text=True,
                          check=True, timeout=3600)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["version"], out["scores"]


def afm_score(data_source: str, gold: str, answer: str) -> int:
    return int(compute_score(data_source, f"<answer>{answer}</answer>", gold)["acc"] == 1.0)


def classes(python: str) -> None:
    from test_rewards_math_forms import CLASSES

    rows = [(name, gold, pred, truth) for name, table in CLASSES.items() for gold, pred, truth in table]
    version, original = original_scores(python, [([g], "\\boxed{" + p + "}") for _, g, p, _ in rows])
    ours = [afm_score("MATH500", g, "\\boxed{" + p + "}") for _, g, p, _ in rows]
    print(f"## Classes (original: Math-Verify {version} with the gold boxed; afm: compute_score)\n")
    print("| class | gold | prediction | truth | original | afm |\n|---|---|---|---|---|---|")
    for (name, gold, pred, truth), o, a in zip(rows, original, ours, strict=True):
        print(f"| {name} | `{gold}` | `{pred}` | {'equal' if truth else 'different'} | "
              f"{'✓' if o == truth else '✗'} | {'✓' if a == truth else '✗'} |")
    print("\n| class | cases | original right | afm right |\n|---|---|---|---|")
    for name in CLASSES:
        idx = [i for i, r in enumerate(rows) if r[0] == name]
        print(f"| {name} | {len(idx)} | {sum(original[i] == rows[i][3] for i in idx)} | "
              f"{sum(ours[i] == rows[i][3] for i in idx)} |")
    print(f"\nall: {len(rows)} cases, original right on {sum(o == r[3] for o, r in zip(original, rows, strict=True))}, "
          f"afm right on {sum(a == r[3] for a, r in zip(ours, rows, strict=True))}\n")


def files(python: str, root: Path) -> None:
    from afm.eval.datasets import load_benchmark

    print("## The original's files (gold as the answer; the gold of the row half a file away)\n")
    print("| file | rows | afm gold | afm shuffled | original gold | original shuffled | afm seconds |")
    print("|---|---|---|---|---|---|---|")
    for name in FILES:
        items = load_benchmark(name, data_root=root)
        golds = [str(it.gold if isinstance(it.gold, str) else it.gold[0]) for it in items]
        n = len(golds)
        other = [golds[(i + n // 2) % n] for i in range(n)]
        keep = [i for i in range(n) if other[i].strip() != golds[i].strip()]
        start = time.perf_counter()
        gold_afm = [afm_score(items[i].data_source, golds[i], "\\boxed{" + golds[i] + "}") for i in range(n)]
        shuf_afm = [afm_score(items[i].data_source, golds[i], "\\boxed{" + other[i] + "}") for i in keep]
        seconds = time.perf_counter() - start
        _, gold_orig = original_scores(python, [([g], "\\boxed{" + g + "}") for g in golds])
        _, shuf_orig = original_scores(python, [([golds[i]], "\\boxed{" + other[i] + "}") for i in keep])
        print(f"| {name} | {n} | {sum(gold_afm)}/{n} | {sum(shuf_afm)}/{len(keep)} | {sum(gold_orig)}/{n} | "
              f"{sum(shuf_orig)}/{len(keep)} | {seconds:.1f} |")
        for i, (a, o) in enumerate(zip(gold_afm, gold_orig, strict=True)):
            if not a:
                print(f"    afm misses its own gold: row {i} {golds[i]!r} (original: {o})")
        for i, a in zip(keep, shuf_afm, strict=True):
            if a:
                print(f"    afm accepts another row's gold: row {i} {golds[i]!r} <- {other[i]!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--original-python", default=sys.executable,
                    help="a Python with the original's math-verify (0.8.0); default this one")
    ap.add_argument("--original-data", type=Path, help="data root holding the original's code_agent files")
    args = ap.parse_args()
    classes(args.original_python)
    if args.original_data:
        files(args.original_python, args.original_data)


if __name__ == "__main__":
    main()
