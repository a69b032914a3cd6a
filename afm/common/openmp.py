"""OpenMP's spin before sleeping, for afm's CPU processes: short, so that a thread waiting at a barrier gives its core
back to the thread it waits for.

Torch's OpenMP threads (libgomp, the OpenMP of torch's Linux wheels) spin ~300k times (~3 ms) at each barrier before
they sleep. On a machine with other work (a second job, a test suite, the quickstart's own servers and teacher) the
spinning thread takes the core the late thread needs: the quickstart's SFT took 1.6-1.8x as long beside one busy
process on 2 cores and burned 1.8x the CPU (benchmarks/RESULTS.md, twentieth session). ``GOMP_SPINCOUNT=3000`` (~30 us)
keeps the idle machine's speed and the busy machine's too; ``OMP_WAIT_POLICY=PASSIVE`` (no spin) was as fast beside a
busy process but ~14% slower idle. It must be in the environment before torch loads libgomp, so afm's entry points set
it first thing, and their children inherit it. A user's ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is kept;
``AFM_OPENMP_SHORT_SPIN=0`` leaves libgomp's default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

SPIN_COUNT = "3000"
CHOSEN = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # the user's choice of a wait, kept as it is
OPT_OUT = "AFM_OPENMP_SHORT_SPIN"  # "0": libgomp's own default


def short_spin_env(env: Mapping[str, str]) -> dict[str, str]:
    """``{"GOMP_SPINCOUNT": "3000"}`` when ``env`` chooses no wait (``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``) and does
    not opt out (``AFM_OPENMP_SHORT_SPIN=0``), else ``{}``."""
    if any(env.get(name) for name in CHOSEN) or env.get(OPT_OUT, "").strip() == "0":
        return {}
    return {"GOMP_SPINCOUNT": SPIN_COUNT}


def prefer_short_spin(env: MutableMapping[str, str] | None = None) -> None:
    """Set the short spin in ``env`` (default: this process's environment, for torch loaded after it and for every
    child process) unless a wait is chosen there or opted out of."""
    target = os.environ if env is None else env
    target.update(short_spin_env(target))
