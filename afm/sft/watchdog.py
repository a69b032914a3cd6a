"""Multi-process SFT: a rank that stops making progress mid-step stops every node within HANG_TIMEOUT, with one line.

A rank that hangs (a stuck data read, a deadlocked process, a collective that never completes) leaves the others
blocked in their next collective for DDP_TIMEOUT, which is years by default (rank 0 preprocesses the data while the
others wait in a barrier). With ``AFM_SFT_HANG_TIMEOUT`` set (the scripts' HANG_TIMEOUT), each rank runs a thread
that publishes where its training loop is (step, phase) with a heartbeat to the job's rendezvous store. When a rank
has been at the same point for HANG_TIMEOUT seconds, the rank that holds the others up is named (the one furthest
behind, or one whose heartbeat stopped) in one line, ``[afm] hang: ...``, which every rank prints (the launcher makes
it the node's error line) before it exits, so torchrun stops every node. Saving a checkpoint and evaluating are not
judged: the other ranks legitimately wait for rank 0 there.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from typing import Any

from afm.launch.multinode import HANG_ENV  # set by the launch (afm/launch/sft.py)

MARK = "[afm] hang: "
EXIT_STATUS = 3  # a rank stopped by the watchdog: torchrun reports it and stops the node's other ranks
_KEY = "afm_watchdog/"

# What a rank is doing in each phase, in the order a step runs them (the same on every rank).
DOING = {
    "load": "loading its batch",
    "sync": "counting the batch's tokens across ranks (all-gather)",
    "forward": "the forward pass",
    "backward": "the backward pass (gradient all-reduce) and optimizer step",
    "log": "logging the step (loss all-gather)",
    "save": "saving a checkpoint",
    "evaluate": "evaluating",
    "done": "done training",
}
NOT_JUDGED = frozenset({"save", "evaluate", "done"})
CHECK = {
    "load": "its data loading (the dataset's filesystem, dataloader workers)",
    "sync": "the network between the nodes",
    "forward": "that process and its device (py-spy dump, nvidia-smi)",
    "backward": "that process and its device (py-spy dump, nvidia-smi)",
    "log": "that process (py-spy dump)",
}


# Where a rank's training thread waits for the others: torch's collectives (and DDP's, DeepSpeed's wrappers of them).
_COLLECTIVE_FILES = ("/torch/distributed/", "/torch/nn/parallel/distributed.py", "/deepspeed/comm/")


def in_collective(frame: str) -> bool:
    """Whether a rank's innermost Python frame (``file:line in function``) is inside a collective."""
    return any(part in frame for part in _COLLECTIVE_FILES)


def main_frame() -> str:
    """The training (main) thread's innermost Python frame, as ``file:line in function``."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    if frame is None:
        return "?"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def verdict(ranks: dict[int, dict[str, Any]], frozen: dict[int, float], timeout: float) -> str | None:
    """The line naming what holds the job up, from each rank's last report (``step``, ``seq``: phases since the
    step began, ``phase``, ``age``: seconds in it, ``frame``: its training thread's innermost frame, ``host``,
    ``node``, ``pid``) and the ranks whose heartbeat stopped (seconds since it last moved); None while any rank is
    where waiting is expected (saving, evaluating, done)."""
    if any(r["phase"] in NOT_JUDGED for r in ranks.values()):
        return None

    def where(r: dict[str, Any]) -> str:
        return f"{DOING.get(r['phase'], r['phase'])} of step {r['step']}"

    def who(rank: int) -> str:
        r = ranks[rank]
        return f"rank {rank} (node {r['node']}, {r['host']} pid {r['pid']})"

    if frozen:
        rank = min(frozen)
        return (f"{who(rank)} stopped responding during {where(ranks[rank])}: no heartbeat for {frozen[rank]:.0f} s "
                f"(HANG_TIMEOUT={timeout:g} s): is that process stopped or swapping, or that host down?")
    low = min((r["step"], r["seq"]) for r in ranks.values())
    behind = sorted(k for k, r in ranks.items() if (r["step"], r["seq"]) == low)
    if len(behind) == len(ranks):
        # all at one point: the ranks not blocked in a collective hold up those that are (DDP's forward, for one,
        # syncs buffers, so a rank stuck before its forward finds the others in theirs)
        working = [k for k in behind if not in_collective(ranks[k].get("frame", ""))]
        if not working or len(working) == len(ranks):
            r = ranks[behind[0]]
            return (f"every rank has been in {where(r)} for {r['age']:.0f} s (HANG_TIMEOUT={timeout:g} s): a "
                    "collective that never completes (check the network between the nodes; NCCL_DEBUG=INFO) or a "
                    "step slower than HANG_TIMEOUT (raise it)")
        behind = working
    rank = behind[0]
    ahead = next(r for k, r in ranks.items() if k not in behind)
    others = len(ranks) - len(behind)
    also = f" (and rank(s) {', '.join(map(str, behind[1:]))})" if len(behind) > 1 else ""
    at = f", at {ranks[rank]['frame']}" if ranks[rank].get("frame") else ""
    waiting = " (in a collective)" if in_collective(ahead.get("frame", "")) else ""
    return (f"{who(rank)}{also} made no progress for {ranks[rank]['age']:.0f} s in {where(ranks[rank])}{at}, while "
            f"{others} other rank(s) wait in {where(ahead)}{waiting} (HANG_TIMEOUT={timeout:g} s): check "
            f"{CHECK.get(ranks[rank]['phase'], 'that process')} on {ranks[rank]['host']}")


class Watchdog:
    """This rank's position in the training loop, published with a heartbeat; judges the job when it stalls."""

    def __init__(self, store: Any, rank: int, world: int, timeout: float) -> None:
        self.store, self.rank, self.world, self.timeout = store, rank, world, timeout
        self.tick = min(10.0, max(1.0, timeout / 10))
        self.step, self.seq, self.phase = 0, 0, "load"
        self.changed = time.monotonic()
        self.beat = 0
        self.seen: dict[int, tuple[int, float]] = {}  # rank -> (its last heartbeat, when it last moved here)
        self.me = {"host": socket.gethostname(), "node": os.environ.get("GROUP_RANK", "?"), "pid": os.getpid()}

    def enter(self, phase: str, step: int) -> None:
        """The training loop (main thread) moved to ``phase`` of ``step``."""
        self.seq = 0 if step != self.step else self.seq + 1
        self.step, self.phase, self.changed = step, phase, time.monotonic()

    def _publish(self, now: float) -> None:
        self.beat += 1
        self.store.set(f"{_KEY}rank{self.rank}", json.dumps(
            {"step": self.step, "seq": self.seq, "phase": self.phase, "age": now - self.changed, "beat": self.beat,
             "frame": main_frame(), **self.me}))

    def _ranks(self, now: float) -> tuple[dict[int, dict[str, Any]], dict[int, float]]:
        ranks, frozen = {}, {}
        for rank in range(self.world):
            key = f"{_KEY}rank{rank}"
            if not self.store.check([key]):
                continue
            ranks[rank] = report = json.loads(self.store.get(key))
            beat, since = self.seen.get(rank, (-1, now))
            if report["beat"] != beat:
                self.seen[rank] = (report["beat"], now)
            elif now - since > self.timeout and report["phase"] != "done":
                frozen[rank] = now - since
        return ranks, frozen

    def _stop(self, line: str, alive: int) -> None:
        """Print the verdict, then exit once every live rank has printed it (or a few heartbeats later): a rank that
        left first would make the others fail in their collective before they say why."""
        print(f"{MARK}{line}", file=sys.stderr, flush=True)
        # the store may have left with the node that held it: the line is out, stop anyway
        with contextlib.suppress(Exception):
            self.store.add(f"{_KEY}printed", 1)
            deadline = time.monotonic() + 3 * self.tick + 5
            while self.store.add(f"{_KEY}printed", 0) < alive and time.monotonic() < deadline:
                time.sleep(0.2)
        # always: before, a store gone mid-wait ended only this thread (run's except), and a hung rank whose node
        # 0 had already printed and left hung on (tests/test_sft_two_nodes.py, at its 600 s deadline, 2 of 2 runs)
        os._exit(EXIT_STATUS)

    def _check(self) -> None:
        now = time.monotonic()
        self._publish(now)
        ranks, frozen = self._ranks(now)
        if self.store.check([f"{_KEY}verdict"]):
            found = json.loads(self.store.get(f"{_KEY}verdict"))
            self._stop(found["line"], found["alive"])
        if self.phase in NOT_JUDGED or now - self.changed < self.timeout or len(ranks) < self.world:
            return
        line = verdict(ranks, frozen, self.timeout)
        if line is None:
            return
        if self.store.add(f"{_KEY}claim", 1) == 1:  # the first rank to judge speaks for all
            self.store.set(f"{_KEY}verdict", json.dumps({"line": line, "alive": self.world - len(frozen)}))
        found = json.loads(self.store.get(f"{_KEY}verdict"))
        self._stop(found["line"], found["alive"])

    def run(self) -> None:
        try:
            while True:
                self._check()
                time.sleep(self.tick)
        except Exception:  # the store is gone: the job is ending anyway, and the watchdog must not add to it
            return


def _start(timeout: float) -> Watchdog | None:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    from torch.distributed.distributed_c10d import _get_default_store

    dog = Watchdog(_get_default_store(), dist.get_rank(), dist.get_world_size(), timeout)
    threading.Thread(target=dog.run, name="afm-sft-watchdog", daemon=True).start()
    return dog


def install() -> bool:
    """Patch transformers' Trainer to run the watchdog when ``AFM_SFT_HANG_TIMEOUT`` (seconds) is set and the job has
    more than one rank; True when it patched."""
    value = os.environ.get(HANG_ENV, "")
    if not value or float(value) <= 0:
        return False
    timeout = float(value)
    from transformers import Trainer

    if getattr(Trainer, "_afm_watchdog", False):
        return True
    dogs: list[Watchdog] = []

    def mark(name: str, phase: str, step_ahead: int):
        orig = getattr(Trainer, name)
        loss = name == "compute_loss"

        def wrapped(self, *args, **kwargs):
            # compute_loss also runs in evaluation (not judged); training_step sets model.train() itself
            training = getattr(self.model, "training", True) if loss else True
            if dogs and training:
                dogs[0].enter(phase, self.state.global_step + step_ahead)
            result = orig(self, *args, **kwargs)
            if dogs and training and loss:  # the loss is computed: the backward pass comes next
                dogs[0].enter("backward", self.state.global_step + step_ahead)
            return result
        return wrapped

    orig_train = Trainer.train

    def train(self, *args, **kwargs):
        dog = _start(timeout)
        if dog is not None:
            dogs[:] = [dog]
        try:
            return orig_train(self, *args, **kwargs)
        finally:
            if dogs:
                dogs[0].enter("done", self.state.global_step)

    # before global_step counts the step (load .. backward): step + 1; logging and saving come after it.
    # training_step marks the forward pass for trainers whose compute_loss does not reach Trainer's (DPO's).
    for name, phase, ahead in (("get_batch_samples", "load", 1), ("_get_num_items_in_batch", "sync", 1),
                               ("training_step", "forward", 1), ("compute_loss", "forward", 1),
                               ("_maybe_log_save_evaluate", "log", 0),
                               ("_save_checkpoint", "save", 0), ("_evaluate", "evaluate", 0)):
        setattr(Trainer, name, mark(name, phase, ahead))
    Trainer.train = train
    Trainer._afm_watchdog = True
    return True
