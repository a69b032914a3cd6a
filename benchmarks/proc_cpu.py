"""Where a command's CPU goes, process by process: runs the command and samples every process of the machine.

``benchmarks/suite_cpu.py`` charges each test with the CPU of everything it started (cgroups); this one says which
processes inside such a test took it (a launch's Ray workers, its driver, Ray's daemons, vLLM's engine core), with
no root needed. Every ``--every`` seconds it reads ``utime + stime`` of each process in ``/proc`` and keeps the last
value a pid showed, so a process that lives less than one sample is missed and one that exits loses at most its last
interval. Processes that ran before the command are left out.

    python benchmarks/proc_cpu.py --json /tmp/cpu.json -- .venv-rl/bin/python -m pytest tests/rl/test_two_nodes.py
    python benchmarks/proc_cpu.py --report /tmp/cpu.json     # the report again, from a saved run

Prints the command's wall time, the sampled CPU of all its processes, the processes grouped by what they run (Ray's
worker setup, the zygote and its forks, verl's driver, ...) and the heaviest processes in the order they started.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# substrings of a command line, in the order they are tried: the first that matches names the process's group
GROUPS = ("setup_worker", "default_worker", "afm.rl.local.zygote", "zygote_client", "verl.trainer.main_ppo",
          "raylet", "gcs_server", "dashboard", "log_monitor", "runtime_env", "ray::", "multiprocessing.spawn",
          "pytest", "afm.servers", "afm.rl.cluster", "afm.rl.local.toy", "afm-sft", "llamafactory", "ray start")


def _cpu_of(pid: str, tick: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / tick


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def sample(command: list[str], every: float) -> dict:
    """Run ``command`` and sample every new process until it exits: ``{"wall_s", "rc", "procs": {pid: [cmd, cpu_s,
    first_seen_s]}}``."""
    tick = os.sysconf("SC_CLK_TCK")
    before = {p for p in os.listdir("/proc") if p.isdigit()}
    began = time.monotonic()
    proc = subprocess.Popen(command)
    seen: dict[str, list] = {}
    while True:
        done = proc.poll() is not None
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid in before or pid == str(os.getpid()):
                continue
            cpu = _cpu_of(pid, tick)
            if cpu is None:
                continue
            if pid not in seen:
                seen[pid] = [_cmdline(pid), cpu, round(time.monotonic() - began, 1)]
            seen[pid][1] = cpu
        if done:
            break
        time.sleep(every)
    return {"wall_s": round(time.monotonic() - began, 1), "rc": proc.returncode, "procs": seen}


def report(run: dict, top: int = 30) -> str:
    """The run's wall time, sampled CPU, CPU by group and its heaviest processes, as text."""
    procs = run["procs"]
    total = sum(cpu for _, cpu, _ in procs.values())
    by_group: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for cmd, cpu, _ in procs.values():
        group = next((g for g in GROUPS if g in cmd), cmd[:60] or "(no command line)")
        by_group[group] += cpu
        count[group] += 1
    lines = [f"wall {run['wall_s']} s, exit {run['rc']}, CPU {total:.1f} s in {len(procs)} processes (sampled)", "",
             "by group (cpu s, processes):"]
    lines += [f"  {cpu:8.1f} {count[g]:4d}  {g}" for g, cpu in by_group.most_common(top)]
    lines += ["", "heaviest processes (started at s, cpu s, command):"]
    heavy = sorted((v for v in procs.values() if v[1] >= 1.0), key=lambda v: v[2])
    lines += [f"  {start:7.1f} {cpu:7.1f}  {cmd[:150]}" for cmd, cpu, start in heavy[:top * 2]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="save the samples here")
    ap.add_argument("--report", help="print the report of a saved run and exit")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between samples (default 0.5)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")
    args = ap.parse_args(argv)
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give a command after --, or --report FILE")
    run = sample(command, args.every)
    if args.json:
        Path(args.json).write_text(json.dumps(run))
    print(report(run))
    return 0 if run["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
