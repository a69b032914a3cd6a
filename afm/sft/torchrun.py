"""``afm-sft train`` under ``FORCE_TORCHRUN``: start torchrun without importing the training stack first.

LLaMA-Factory's ``launcher.launch`` decides whether to start torchrun after importing its helpers, which pull in
torch, transformers and peft (~6 CPU-seconds, ~0.5 GB held for the whole job by a process that only waits for
torchrun). When the environment already says what to start (``FORCE_TORCHRUN`` and ``NPROC_PER_NODE``, which
``sft_scripts/`` export for every multi-process, multi-node or DeepSpeed run), afm-sft builds the same torchrun
command itself: the same flags and defaults as LLaMA-Factory 0.9.5 (static rendezvous, or c10d with ``RDZV_ID``;
``OPTIM_TORCH``'s two variables), every rank running :mod:`afm.sft.launcher`. Two differences, both deliberate:
the arguments reach the ranks as they were given (LLaMA-Factory joins them with spaces and splits again, so a value
with a space broke), and a failed torchrun's exit status is afm-sft's (LLaMA-Factory raised
``CalledProcessError``: a traceback and status 1). Anything else (no ``FORCE_TORCHRUN``, ``NPROC_PER_NODE`` to be
counted from the devices, ``USE_MCA``) goes through LLaMA-Factory's launcher as before.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LAUNCHER = str(Path(__file__).with_name("launcher.py"))


def env_enabled(env: Mapping[str, str], key: str, default: str = "0") -> bool:
    """A flag as LLaMA-Factory reads it (``true``, ``y`` or ``1``, any case)."""
    return env.get(key, default).lower() in ("true", "y", "1")


@dataclass(frozen=True)
class TorchrunPlan:
    """The torchrun command of one node, the environment it runs in and the line printed before it."""

    command: list[str]
    env: dict[str, str]
    banner: str


def free_port() -> int:
    """A TCP port free at this moment (what LLaMA-Factory does when MASTER_PORT is unset)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def torchrun_executable(env: Mapping[str, str]) -> str:
    """``torchrun`` as LLaMA-Factory finds it (on PATH), else the one installed beside this interpreter."""
    found = shutil.which("torchrun", path=env.get("PATH"))
    if found:
        return "torchrun"
    sibling = Path(sys.executable).with_name("torchrun")
    return str(sibling) if sibling.exists() else "torchrun"


def torchrun_plan(args: Sequence[str], env: Mapping[str, str]) -> TorchrunPlan | None:
    """The torchrun start of ``afm-sft train <args>`` when ``env`` fixes it without counting devices, else None
    (LLaMA-Factory's launcher decides)."""
    if not env_enabled(env, "FORCE_TORCHRUN") or env_enabled(env, "USE_MCA"):
        return None
    nproc = env.get("NPROC_PER_NODE", "")
    if not nproc.isdigit() or int(nproc) < 1:
        return None  # LLaMA-Factory counts the accelerators (needs torch)
    nnodes = env.get("NNODES", "1")
    node_rank = env.get("NODE_RANK", "0")
    addr = env.get("MASTER_ADDR", "127.0.0.1")
    port = env.get("MASTER_PORT") or str(free_port())
    child_env = dict(env)
    if env_enabled(env, "OPTIM_TORCH", "1"):  # LLaMA-Factory's DDP settings, harmless without CUDA
        child_env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        child_env["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "1"
    exe = torchrun_executable(env)
    if env.get("RDZV_ID") is not None:
        lo, hi = env.get("MIN_NNODES"), env.get("MAX_NNODES")
        rdzv_nnodes = f"{lo}:{hi}" if lo is not None and hi is not None else nnodes
        command = [exe, "--nnodes", rdzv_nnodes, "--nproc-per-node", nproc, "--rdzv-id", env["RDZV_ID"],
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{addr}:{port}",
                   "--max-restarts", env.get("MAX_RESTARTS", "0")]
    else:
        command = [exe, "--nnodes", nnodes, "--node_rank", node_rank, "--nproc_per_node", nproc,
                   "--master_addr", addr, "--master_port", port]
    # LLaMA-Factory's own two lines, word for word: logs and scripts search for them
    banner = f"[afm-sft] Initializing {nproc} distributed tasks at: {addr}:{port}"
    if nnodes.isdigit() and int(nnodes) > 1:
        banner += f"\n[afm-sft] Multi-node training enabled: num nodes: {nnodes}, node rank: {node_rank}"
    return TorchrunPlan([*command, LAUNCHER, *args], child_env, banner)


def run(plan: TorchrunPlan) -> int:
    """Start the plan's torchrun and return its exit status (a signal's death as 128 + the signal, as a shell)."""
    print(plan.banner, flush=True)
    code = subprocess.run(plan.command, env=plan.env).returncode
    return 128 - code if code < 0 else code
