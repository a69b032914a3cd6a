"""A --local run's Ray processes are found by its private RAY_TMPDIR and stopped without ending any other Ray
cluster of the machine (``ray stop --force`` ended every one: a concurrent two-node test lost its head)."""

from __future__ import annotations

import subprocess
import time

from afm.common.ray_scope import private_ray_tmpdir, processes_of, stop_ray_in


def _tree(folder: str) -> subprocess.Popen:
    # a "raylet" naming its folder, with two children that do not (Ray's workers rename themselves ray::...)
    return subprocess.Popen(["bash", "-c", "sleep 300 & sleep 300 & wait", "raylet", f"--session_dir={folder}/ray/s"],
                            start_new_session=True)


def test_stop_ends_the_runs_processes_and_only_those():
    mine = private_ray_tmpdir()
    assert len(str(mine)) < 40  # room below it for Ray's socket paths (107 bytes)
    neighbour = f"{mine}2"  # a prefix of another folder must not match
    a, b = _tree(str(mine)), _tree(neighbour)
    try:
        deadline = time.monotonic() + 30  # both trees' children started (on a busy machine they take a while)
        while (len(processes_of(mine)) < 3 or len(processes_of(neighbour)) < 3) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sorted(processes_of(mine))[0] == a.pid and len(processes_of(mine)) == 3
        assert stop_ray_in(mine) == 3
        assert a.wait(timeout=30) != 0
        assert processes_of(mine) == [] and not mine.exists()
        assert b.poll() is None and len(processes_of(neighbour)) == 3
    finally:
        for p in (a, b):
            if p.poll() is None:
                subprocess.run(["pkill", "-KILL", "-s", str(p.pid)], check=False)
                p.wait()
