"""Multi-node SFT launches: the rendezvous timeout torchrun is given, and one line that says why a node stopped.

torchrun's static rendezvous (what LLaMA-Factory starts: ``--nnodes/--node_rank/--master_addr``) waits 600 s for
the other nodes by default and then prints a stack of tracebacks; a rank that dies mid-step makes gloo raise on
every other node and each torchrun prints its own; a rank that hangs is named by the watchdog (afm/sft/watchdog.py)
after HANG_TIMEOUT. :func:`failure_line` reads the node's log and says which case it was, in one line.
"""

from __future__ import annotations

import re
import signal

# The variable every rank reads to run the watchdog (afm/sft/watchdog.py), set by the launch.
HANG_ENV = "AFM_SFT_HANG_TIMEOUT"
DEFAULT_JOIN_TIMEOUT = "600"  # torch.distributed.elastic's static rendezvous default
# A rank at one point of a step this long stops the job; above any real step (a 32k-token step of a 32B model takes
# minutes), far below DDP_TIMEOUT (years: rank 0 preprocesses while the others wait). Saving is not judged.
DEFAULT_HANG_TIMEOUT = "1800"


def rendezvous_env(join_timeout: str) -> dict[str, str]:
    """torchrun reads ``PET_<FLAG>`` for any flag not given: the seconds a node waits for the others to join
    (``timeout``: static rendezvous, node 0's store and every other node's connection to it; ``join_timeout``: the
    c10d rendezvous that RDZV_ID selects)."""
    return {"PET_RDZV_CONF": f"timeout={join_timeout},join_timeout={join_timeout}"}


def hang_env(hang_timeout: str) -> dict[str, str]:
    """What every rank reads to run the watchdog (afm/sft/watchdog.py); nothing for 0 (off)."""
    return {HANG_ENV: hang_timeout} if hang_timeout.strip("0") else {}


_RANK_LINE = re.compile(r"\[afm\] (?:hang|stop): (.+)")  # afm/sft/watchdog.py, afm/sft/versions.py
_WAITING = re.compile(r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined")
_CONNECT = re.compile(r"client socket has timed out after (\d+)ms while trying to connect to \(([^,]+), (\d+)\)")
_ROOT = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+) \(local_rank: \d+\)\s*"
                   r"exitcode\s*:\s*(-?\d+)", re.S)
_PEER = re.compile(r"Connection (?:closed|reset) by peer|Broken pipe", re.I)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def failure_line(log: str, *, node_rank: str, nnodes: str, master: str, join_timeout: str) -> str:
    """Why this node's torchrun failed, from its output ``log``: a node missing from the rendezvous, a rank killed
    here, a rank that hung or another afm on some node (the line a rank printed), or a rank elsewhere that died
    (gloo lost its peer); else the node and where to look."""
    if m := _RANK_LINE.search(log):  # first: the other ranks' exits that follow it read as deaths
        return f"node {node_rank}: {m.group(1)}"
    if m := _WAITING.search(log):
        return (f"node {node_rank}: only {m.group(2)} of {m.group(3)} nodes joined the rendezvous at {master} within "
                f"JOIN_TIMEOUT={join_timeout} s: start the script on every node, NODE_RANK 0.."
                f"{int(nnodes) - 1}, with the same NNODES, MASTER_ADDR and MASTER_PORT")
    if m := _CONNECT.search(log):
        return (f"node {node_rank}: node 0 was not reachable at {m.group(2)}:{m.group(3)} within "
                f"JOIN_TIMEOUT={join_timeout} s: start node 0 (NODE_RANK=0) and set "
                "MASTER_ADDR to its address as this node reaches it")
    root = _ROOT.search(log)
    if root and int(root.group(2)) < 0:
        return (f"node {node_rank}: rank {root.group(1)} was killed by {_signal_name(int(root.group(2)))} "
                "(out of memory? killed by the scheduler?); every other node stops with it")
    if _PEER.search(log):
        return (f"node {node_rank}: a rank on another node died (the connection to it closed mid-step); that "
                "node's log says why")
    if root:
        return (f"node {node_rank}: rank {root.group(1)} exited with status {root.group(2)}; its traceback is "
                "above")
    return f"node {node_rank} of {nnodes}: training failed; the log above says why"
