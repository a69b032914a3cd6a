"""The quickstart's rule-based teacher behind the OpenAI API: milliseconds a chat call on one kept-alive
connection, with Nagle's algorithm on its sockets (the baseline: how the teacher answered before the twenty-third
session) and off (``disable_nagle_algorithm``, as it answers now), in the same process, alternating.

The teacher writes a reply's headers and body in two sends; with Nagle on, the second waits for the client's delayed
ACK of the first (~40 ms on Linux), and the distillation's ~14k teacher calls waited on it.

    .venv/bin/python benchmarks/bench_teacher.py [--calls 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx

from afm.quickstart.teacher import TeacherModel

MESSAGES = [{"role": "system", "content": "You are the planner of a team of agents."},
            {"role": "user", "content": "Question: Compute 16*61+62.\nWork so far:\n"}]


def ms_per_call(nagle_off: bool, calls: int) -> float:
    """Mean milliseconds of ``calls`` sequential chat calls on one connection."""
    with TeacherModel(seed=0) as teacher:
        handler = teacher.server.RequestHandlerClass
        handler.disable_nagle_algorithm = nagle_off  # this server's own handler class (TeacherModel makes one each)
        with httpx.Client(timeout=30) as client:
            url = teacher.base_url + "/chat/completions"
            for _ in range(3):  # connect and warm up
                client.post(url, json={"model": "teacher", "messages": MESSAGES}).raise_for_status()
            t0 = time.perf_counter()
            for _ in range(calls):
                client.post(url, json={"model": "teacher", "messages": MESSAGES}).raise_for_status()
            return (time.perf_counter() - t0) / calls * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    on, off = [], []
    for _ in range(args.rounds):
        on.append(ms_per_call(False, args.calls // 4))  # ~40 ms each: fewer calls
        off.append(ms_per_call(True, args.calls))
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f"Nagle on (baseline):  {m_on:7.2f} ms a call  (rounds: {', '.join(f'{x:.2f}' for x in on)})")
    print(f"Nagle off (as landed): {m_off:7.2f} ms a call  (rounds: {', '.join(f'{x:.2f}' for x in off)})")
    print(f"ratio: {m_on / m_off:.1f}x")


if __name__ == "__main__":
    main()
