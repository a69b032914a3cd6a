"""Sandbox throughput and latency: bare python vs jailed one-shot vs jailed pool.

For `print(1)` and `import numpy`, sequentially and at concurrency 2 x cores, it reports executions/s and p50/p99
latency of: bare `python -c` (baselines measured in the same run: the interpreter the jail runs and this
environment's interpreter), a fresh jail per execution, and the pre-forked pool. The bare runs see the same
packages as the jail (a PYTHONPATH of symlinks) only when the program imports one: a PYTHONPATH pointing at a
large site-packages folder triples Python's start-up on its own. Targets (issue 4): jailed
one-shot >= 0.8x bare; pool >= 100 exec/s for `print(1)` on 2 cores.

    python benchmarks/bench_sandbox.py [--n 100] [--json benchmarks/out/sandbox.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from afm.sandbox import Limits, Sandbox

PROGRAMS = {"print(1)": "print(1)", "import numpy": "import numpy; print(numpy.__version__)"}


def measure(fn, n: int, concurrency: int) -> dict[str, float]:
    """Run ``fn`` n times with ``concurrency`` threads; execs/s and latency percentiles in ms."""
    lat: list[float] = []

    def one(_: int) -> None:
        t = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t)

    for _ in range(min(3, n)):  # warm-up: page cache, pool workers, cgroup parents
        fn()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(one, range(n)))
    wall = time.perf_counter() - t0
    lat.sort()
    return {"execs_per_s": n / wall, "p50_ms": 1000 * statistics.median(lat),
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]}


def site_dir(sandbox: Sandbox) -> str:
    """A folder of symlinks to the same packages the jail sees at /site (the fair PYTHONPATH for bare runs)."""
    d = tempfile.mkdtemp(prefix="afm-bare-site-")
    for m in sandbox.runtime.mounts:
        if m.dst.startswith("/site/"):
            os.symlink(m.src, os.path.join(d, os.path.basename(m.dst)))
    return d


def bare(python: str, code: str, pythonpath: str | None = None) -> None:
    env = {"PATH": "/usr/bin:/bin"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run([python, "-c", code], capture_output=True, env=env)
    assert proc.returncode == 0, proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--json", default="benchmarks/out/sandbox.json")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    conc = 2 * cores
    limits = Limits(wall_s=10, memory_mb=1024)
    rows: list[dict[str, object]] = []
    with Sandbox(limits=limits) as oneshot, Sandbox(mode="pool", limits=limits, concurrency=conc) as pool:
        jail_python = oneshot.runtime.python
        site = site_dir(oneshot)
        print(f"backend: {oneshot.describe()['backend']} (cgroups={oneshot.describe().get('cgroups')}), "
              f"jail python {jail_python}, {cores} cores, concurrency {conc}, n={args.n}")
        for prog_name, code in PROGRAMS.items():
            runners = {
                f"bare {jail_python} -c": lambda c=code: bare(jail_python, c, site if "import" in c else None),
                f"bare {Path(sys.executable).name} (this venv) -c": lambda c=code: bare(sys.executable, c),
                "jailed one-shot": lambda c=code: _check(oneshot.run(c)),
                "jailed pool": lambda c=code: _check(pool.run(c)),
            }
            for c in (1, conc):
                base = None
                for name, fn in runners.items():
                    m = measure(fn, args.n, c)
                    base = base or m["execs_per_s"]
                    rows.append({"program": prog_name, "concurrency": c, "runner": name, **m,
                                 "ratio_vs_bare": m["execs_per_s"] / base})
                    print(f"{prog_name:13s} c={c:<3d} {name:40s} {m['execs_per_s']:8.1f}/s  p50 {m['p50_ms']:7.1f} ms"
                          f"  p99 {m['p99_ms']:7.1f} ms  x{m['execs_per_s'] / base:5.2f} vs bare")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"wrote {args.json}")


def _check(res) -> None:
    assert res.status == "ok", (res.status, res.stderr[-300:])


if __name__ == "__main__":
    main()
