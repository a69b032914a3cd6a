"""The SFT watchdog's judgement (afm/sft/watchdog.py) for the cases the two-node test does not stage: a rank whose
heartbeat stopped (a stopped process, a dead host), every rank stuck at one point, a rank saving, and the launcher's
one line from a node log that holds the watchdog's line. The staged hang runs in tests/test_sft_two_nodes.py."""

from __future__ import annotations

from afm.launch.multinode import failure_line, hang_env
from afm.sft.watchdog import verdict


def _rank(step: int, seq: int, phase: str, node: int, age: float = 40.0) -> dict:
    return {"step": step, "seq": seq, "phase": phase, "age": age, "host": f"host{node}", "node": str(node),
            "pid": 100 + node}


def test_a_rank_whose_heartbeat_stopped_is_named_first():
    ranks = {0: _rank(5, 2, "backward", 0), 1: _rank(5, 1, "forward", 1), 2: _rank(5, 2, "backward", 1)}
    line = verdict(ranks, frozen={2: 61.0}, timeout=60)
    assert line is not None and line.startswith("rank 2 (node 1, host1 pid 101) stopped responding during the "
                                                "backward pass")
    assert "no heartbeat for 61 s (HANG_TIMEOUT=60 s)" in line


def test_the_rank_furthest_behind_is_named_with_what_to_check():
    ranks = {0: _rank(5, 1, "sync", 0), 1: _rank(5, 0, "load", 1, age=75), 2: _rank(5, 1, "sync", 1)}
    line = verdict(ranks, frozen={}, timeout=60)
    assert line == ("rank 1 (node 1, host1 pid 101) made no progress for 75 s in loading its batch of step 5, while 2 "
                    "other rank(s) wait in counting the batch's tokens across ranks (all-gather) of step 5 "
                    "(HANG_TIMEOUT=60 s): check its data loading (the dataset's filesystem, dataloader workers) on "
                    "host1")


def test_at_one_point_the_rank_outside_a_collective_is_named():
    """DDP's forward syncs buffers: a rank stuck before its forward finds the others blocked inside theirs."""
    ranks = {0: {**_rank(2, 2, "forward", 0), "frame": "/x/torch/nn/parallel/distributed.py:1 in _sync_buffers"},
             1: {**_rank(2, 2, "forward", 1), "frame": "/data/reader.py:7 in read"}}
    line = verdict(ranks, frozen={}, timeout=60)
    assert line is not None and line.startswith("rank 1 (node 1, host1 pid 101) made no progress for 40 s in the "
                                                "forward pass of step 2, at /data/reader.py:7 in read, while 1 other "
                                                "rank(s) wait in the forward pass of step 2 (in a collective)")
    ranks[1]["frame"] = "/x/torch/distributed/distributed_c10d.py:9 in all_reduce"  # every rank waits
    assert verdict(ranks, frozen={}, timeout=60).startswith("every rank has been in the forward pass of step 2")


def test_every_rank_at_one_point_is_a_collective_or_a_slow_step():
    ranks = {r: _rank(3, 3, "backward", r) for r in (0, 1)}
    line = verdict(ranks, frozen={}, timeout=60)
    assert line is not None and line.startswith("every rank has been in the backward pass")
    assert "raise it" in line


def test_nothing_is_judged_while_a_rank_saves():
    ranks = {0: _rank(4, 5, "save", 0, age=500), 1: _rank(5, 3, "backward", 1, age=500)}
    assert verdict(ranks, frozen={}, timeout=60) is None


def test_the_node_line_is_the_watchdog_line_and_off_means_no_watchdog():
    log = ("0%| 1/1000 [afm] hang: rank 1 (node 1, h pid 7) made no progress for 21 s in loading its batch of step 2\n"
           "Connection closed by peer\nRoot Cause (first observed failure):\n  rank : 0 (local_rank: 0)\n"
           "  exitcode  : 3\n")
    line = failure_line(log, node_rank="0", nnodes="2", master="127.0.0.1:1", join_timeout="600")
    assert line == "node 0: rank 1 (node 1, h pid 7) made no progress for 21 s in loading its batch of step 2"
    assert hang_env("0") == {} and hang_env("1800") == {"AFM_SFT_HANG_TIMEOUT": "1800"}


def test_a_rank_stops_even_when_the_store_left_while_it_waited(monkeypatch, capsys):
    """The verdict is printed, then the rank waits for the others to print it through the job's store; when the
    node holding the store has already left, the wait fails and the rank must still stop (before, only the watchdog
    thread ended and the hung rank hung on)."""
    import pytest

    from afm.sft import watchdog

    class GoneStore:
        def add(self, key, value):
            raise RuntimeError("Connection was likely closed")

    class Exited(Exception):
        pass

    def fake_exit(code):
        raise Exited(code)

    monkeypatch.setattr(watchdog.os, "_exit", fake_exit)
    dog = watchdog.Watchdog(GoneStore(), rank=1, world=2, timeout=20)
    with pytest.raises(Exited) as exc:
        dog._stop("rank 1 made no progress", alive=1)
    assert exc.value.args == (watchdog.EXIT_STATUS,)
    assert "rank 1 made no progress" in capsys.readouterr().err
