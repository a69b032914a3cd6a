"""OpenMP's short spin (afm.common.openmp): set by afm's entry points and the CPU trainer's environment unless the
user chose a wait or opted out; torch's libgomp in a child process reads the variable afm sets."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from afm.common.openmp import prefer_short_spin, short_spin_env

CHOICES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "AFM_OPENMP_SHORT_SPIN")


def test_short_spin_unless_chosen_or_opted_out():
    assert short_spin_env({}) == {"GOMP_SPINCOUNT": "3000"}
    assert short_spin_env({"OMP_WAIT_POLICY": "ACTIVE"}) == {}  # the user's choice stays
    assert short_spin_env({"GOMP_SPINCOUNT": "100000"}) == {}
    assert short_spin_env({"AFM_OPENMP_SHORT_SPIN": "0"}) == {}  # libgomp's own default
    assert short_spin_env({"AFM_OPENMP_SHORT_SPIN": "1"}) == {"GOMP_SPINCOUNT": "3000"}
    env = {"OMP_NUM_THREADS": "2"}
    prefer_short_spin(env)
    assert env == {"OMP_NUM_THREADS": "2", "GOMP_SPINCOUNT": "3000"}


@pytest.mark.parametrize("entry", ["afm", "afm-sft"])
def test_entry_points_set_it_before_anything_else(entry, monkeypatch):
    for name in CHOICES:
        monkeypatch.delenv(name, raising=False)
    if entry == "afm":
        from afm.cli import main

        def run() -> None:
            with pytest.raises(SystemExit):
                main(["--help"])
    else:
        from afm.sft.cli import main

        def run() -> None:
            assert main(["--help"]) == 0
    run()
    assert os.environ["GOMP_SPINCOUNT"] == "3000"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    run()
    assert "GOMP_SPINCOUNT" not in os.environ and os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_cpu_trainer_environment_carries_it_to_every_worker():
    from afm.rl.cluster import FORWARDED
    from afm.rl.knobs import trainer_env

    assert trainer_env("cpu", {})["GOMP_SPINCOUNT"] == "3000"
    assert "GOMP_SPINCOUNT" not in trainer_env("cpu", {"OMP_WAIT_POLICY": "PASSIVE"})  # the caller's env has it
    assert "GOMP_SPINCOUNT" not in trainer_env("gpu", {})
    assert {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} <= set(FORWARDED)  # to the other nodes' Ray workers


def test_torchs_libgomp_reads_the_variable_afm_sets():
    # an invalid value makes libgomp complain when torch loads it: proof that it reads this variable
    code = ("from afm.common.openmp import prefer_short_spin; prefer_short_spin(); import os, torch; "
            "a = torch.ones(256, 256); (a @ a).sum(); print(os.environ['GOMP_SPINCOUNT'])")
    env = {k: v for k, v in os.environ.items() if k not in CHOICES}
    ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0 and ok.stdout.strip() == "3000" and "GOMP_SPINCOUNT" not in ok.stderr, ok.stderr
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**env, "GOMP_SPINCOUNT": "often"})
    assert "Invalid value for environment variable GOMP_SPINCOUNT" in bad.stderr, bad.stderr
