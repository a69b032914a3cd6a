"""CPU time of each test with everything it started: a pytest plugin for finding where the suite's CPU goes.

The suite keeps both cores busy (benchmarks/RESULTS.md, twentieth session), so its wall time is its CPU time over two:
the tests to shorten are those with the most CPU, not the longest. ``--durations`` times a test by the wall clock
(a test beside a busy neighbour looks slow) and a per-process log misses processes that never exit normally (Ray's
workers, servers stopped by a signal, llama-server, vLLM's engine). Here each test runs in its own cgroup (cgroup v1
``cpuacct``, or v2's ``cpu.stat``): the pytest process moves into it for the test, every process started then
inherits it, and the cgroup's usage counts all of them, alive, exited or killed. A session fixture's servers stay in
the cgroup of the test that started them: their later CPU is charged to it.

    AFM_SUITE_CPU=/tmp/cpu.jsonl bash scripts/test.sh -p benchmarks.suite_cpu -q
    python benchmarks/suite_cpu.py /tmp/cpu.jsonl          # the tests, files and fixtures with the most CPU

Needs root (or a delegated cgroup); otherwise the plugin says so once and records nothing. Each xdist worker appends
one JSON line a test to the file (``{"test", "cpu_s", "wall_s", "worker", "group"}``) and, at its end, the final usage
of the groups whose processes outlived their test (``{"late_groups"}``), which the report adds to those tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

_V1 = Path("/sys/fs/cgroup/cpuacct")
_V2 = Path("/sys/fs/cgroup/unified")
_STATE: dict = {}


def _own_cgroup(root: Path, v1: bool) -> Path | None:
    """This process's cgroup folder under ``root`` (the cpuacct line of /proc/self/cgroup, or v2's ``0::``)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (v1 and "cpuacct" in controllers.split(",")) or (not v1 and controllers == ""):
            return root / path.lstrip("/")
    return None


def _setup() -> tuple[Path, Path, bool] | None:
    """(the folder for the tests' cgroups, the cgroup to return to, v1?) or None where cgroups cannot be made."""
    for root, v1 in ((_V1, True), (_V2, False)):
        if not root.is_dir():
            continue
        home = _own_cgroup(root, v1)
        if home is None:
            continue
        base = root / f"afm-suite-cpu-{os.getpid()}"
        try:
            base.mkdir(exist_ok=True)
            probe = base / "probe"
            probe.mkdir(exist_ok=True)
            probe.rmdir()
        except OSError:
            continue
        return base, home, v1
    return None


def _usage_s(group: Path, v1: bool) -> float:
    if v1:
        return int((group / "cpuacct.usage").read_text()) / 1e9
    for line in (group / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    return 0.0


def _move(pid: int, group: Path) -> None:
    (group / "cgroup.procs").write_text(str(pid))


def pytest_configure(config: pytest.Config) -> None:
    out = os.environ.get("AFM_SUITE_CPU")
    if not out:
        return
    found = _setup()
    if found is None:
        sys.stderr.write("[suite_cpu] cannot make cgroups here (needs root): no CPU figures recorded\n")
        return
    _STATE.update(out=Path(out), base=found[0], home=found[1], v1=found[2], n=0,
                  worker=os.environ.get("PYTEST_XDIST_WORKER", "main"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if "base" not in _STATE:
        yield
        return
    _STATE["n"] += 1
    group = _STATE["base"] / f"t{_STATE['n']}"
    group.mkdir()
    _move(os.getpid(), group)
    start = time.monotonic()
    try:
        yield
    finally:
        _move(os.getpid(), _STATE["home"])
        wall = time.monotonic() - start
        record = {"test": item.nodeid, "cpu_s": round(_usage_s(group, _STATE["v1"]), 2), "wall_s": round(wall, 2),
                  "worker": _STATE["worker"], "group": group.name}
        with open(_STATE["out"], "a") as f:
            f.write(json.dumps(record) + "\n")
        with contextlib.suppress(OSError):
            group.rmdir()  # only when nothing it started is still alive


def pytest_unconfigure(config: pytest.Config) -> None:
    base = _STATE.get("base")
    if base is None:
        return
    # the groups whose processes outlived their test (session servers): their CPU since then, one more line each
    late = {}
    for group in sorted(base.glob("t*")):
        try:
            late[group.name] = _usage_s(group, _STATE["v1"])
        except OSError:
            continue
    if late:
        with open(_STATE["out"], "a") as f:
            f.write(json.dumps({"late_groups": {k: round(v, 2) for k, v in late.items()},
                                "worker": _STATE["worker"]}) + "\n")
    for group in [*base.glob("t*"), base]:
        with contextlib.suppress(OSError):
            group.rmdir()  # a group with a process still in it stays (the kernel refuses)


def main(argv: list[str]) -> None:
    """Print the tests, files and xdist workers with the most CPU from a log the plugin wrote."""
    rows = [json.loads(line) for line in Path(argv[0]).read_text().splitlines() if line.strip()]
    tests = [r for r in rows if "test" in r]
    # a group whose processes outlived its test kept counting: charge the rest to that test
    final = {(r["worker"], g): cpu for r in rows if "late_groups" in r for g, cpu in r["late_groups"].items()}
    for r in tests:
        late = final.get((r["worker"], r.get("group")), r["cpu_s"]) - r["cpu_s"]
        r["cpu_s"] += max(late, 0.0)
    total = sum(r["cpu_s"] for r in tests)
    print(f"{len(tests)} tests, {total:.0f} CPU s (charged to the test that started each process)")
    by_file: Counter = Counter()
    for r in tests:
        by_file[r["test"].split("::")[0]] += r["cpu_s"]
    print("\nfiles with the most CPU:")
    for name, cpu in by_file.most_common(25):
        print(f"{cpu:8.1f} {100 * cpu / total:5.1f}%  {name}")
    print("\ntests with the most CPU (cpu s, wall s):")
    for r in sorted(tests, key=lambda r: -r["cpu_s"])[:40]:
        print(f"{r['cpu_s']:8.1f} {r['wall_s']:8.1f}  {r['test']}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BrokenPipeError:  # | head
        sys.stderr.close()
