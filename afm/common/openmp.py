"""OpenMP's wait policy for afm's CPU processes: threads that sleep at a barrier instead of spinning.

Torch's OpenMP threads spin-wait between parallel regions by default (libgomp: ~300k spins before sleeping). On a
machine with other work (a second job, a test suite, the quickstart's own servers and teacher) a spinning thread takes
the core the thread it waits for needs: the quickstart's SFT step took 2.8x as long beside one busy process on 2 cores
and burned 2x the CPU (benchmarks/RESULTS.md, twentieth session). ``OMP_WAIT_POLICY=PASSIVE`` makes them sleep at
once: no slower on an idle machine there, 1.7x faster beside one busy process. It must be in the environment before
torch loads libgomp, so afm's entry points set it first thing, and their children inherit it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

WAIT_POLICY = "OMP_WAIT_POLICY"
OPT_OUT = "AFM_OPENMP_PASSIVE"  # "0": leave OpenMP's own default (spin, then sleep)


def passive_wait_env(env: Mapping[str, str]) -> dict[str, str]:
    """``{"OMP_WAIT_POLICY": "PASSIVE"}`` when ``env`` sets no wait policy and does not opt out (``AFM_OPENMP_PASSIVE=0``),
    else ``{}``: a value the user chose (ACTIVE, PASSIVE) is theirs."""
    if env.get(WAIT_POLICY) or env.get(OPT_OUT, "").strip() == "0":
        return {}
    return {WAIT_POLICY: "PASSIVE"}


def prefer_passive_wait(env: MutableMapping[str, str] | None = None) -> None:
    """Set the passive wait policy in ``env`` (default: this process's environment, for torch loaded after it and for
    every child process) unless one is set or opted out of."""
    target = os.environ if env is None else env
    target.update(passive_wait_env(target))
