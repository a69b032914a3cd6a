"""OpenMP's passive wait policy (afm.common.openmp): set by afm's entry points and the CPU trainer's environment
unless the user chose a policy or opted out; torch in a child process then runs with it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from afm.common.openmp import passive_wait_env, prefer_passive_wait


def test_passive_unless_chosen_or_opted_out():
    assert passive_wait_env({}) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert passive_wait_env({"OMP_WAIT_POLICY": "ACTIVE"}) == {}  # the user's choice stays
    assert passive_wait_env({"AFM_OPENMP_PASSIVE": "0"}) == {}  # OpenMP's own default
    assert passive_wait_env({"AFM_OPENMP_PASSIVE": "1"}) == {"OMP_WAIT_POLICY": "PASSIVE"}
    env = {"OMP_NUM_THREADS": "2"}
    prefer_passive_wait(env)
    assert env == {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}


@pytest.mark.parametrize("entry", ["afm", "afm-sft"])
def test_entry_points_set_it_before_anything_else(entry, monkeypatch, capsys):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("AFM_OPENMP_PASSIVE", raising=False)
    if entry == "afm":
        from afm.cli import main

        with pytest.raises(SystemExit):
            main(["--help"])
    else:
        from afm.sft.cli import main

        assert main(["--help"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    if entry == "afm-sft":
        main(["--help"])
        assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_cpu_trainer_environment_carries_it_to_every_worker():
    from afm.rl.cluster import FORWARDED
    from afm.rl.knobs import trainer_env

    assert trainer_env("cpu", {})["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in trainer_env("cpu", {"OMP_WAIT_POLICY": "ACTIVE"})  # the caller's env has it
    assert "OMP_WAIT_POLICY" not in trainer_env("gpu", {})
    assert "OMP_WAIT_POLICY" in FORWARDED  # to the other nodes' Ray workers


def test_libgomp_in_a_child_reads_the_value_afm_sets():
    # an invalid value makes libgomp complain on stderr when torch loads it: the same variable is the one it reads
    code = ("from afm.common.openmp import prefer_passive_wait; prefer_passive_wait(); import os, torch; "
            "a = torch.ones(256, 256); (a @ a).sum(); print(os.environ['OMP_WAIT_POLICY'])")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "AFM_OPENMP_PASSIVE")}
    ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0 and ok.stdout.strip() == "PASSIVE" and "OMP_WAIT_POLICY" not in ok.stderr, ok.stderr
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**env, "OMP_WAIT_POLICY": "sometimes"})
    assert "Invalid value for environment variable OMP_WAIT_POLICY" in bad.stderr
