"""Multi-node RL: what a run needs from the Ray cluster that experiments/ray_cluster.sh started, checked before verl.

* :func:`runtime_env_overrides`: the trainer's own environment (the cpu platform, afm's poll interval, a trace dir)
  reaches the workers of every node through the job's Ray runtime env; on one node the workers inherit it from the
  driver that started Ray, on a cluster they inherit the environment of ``ray start`` instead.
* ``python -m afm.rl.cluster --nnodes N --gpus G``: waits up to ``--timeout`` seconds for N alive nodes with G GPUs
  each, all labelled (by ray_cluster.sh) with this environment's afm and verl versions, and otherwise exits 2 with
  one line saying which node is missing or different. verl itself would fail at once on a node still joining and
  would run a node with another afm without a word.
* :func:`dead_actor_line`: when a trainer rank or a rollout server dies mid-step (killed, out of memory, crashed),
  verl stops within seconds with a page of Ray tracebacks; this says in one line which one died, on which node, and
  what verl was doing.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Mapping

# Variables the trainer's launcher sets (afm/rl/knobs.py run()) or a user sets for afm's traces.
FORWARDED = ("VERL_PLATFORM", "VERL_ENGINE_DEVICE", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
             "TOKENIZERS_PARALLELISM", "AFM_VERL_POLL_S", "AFM_RL_TRACE_DIR")  # OpenMP's wait: docs/development.md


VERL_CPUS_PER_GPU = 3  # verl 0.9.1 ResourcePoolManager.max_colocate_count: the CPUs of each GPU's bundle


def runtime_env_overrides(env: Mapping[str, str]) -> list[str]:
    """Hydra overrides that put the FORWARDED variables of ``env`` into the job's Ray runtime env (quoted: Ray wants
    strings, and Hydra reads a bare 1 as a number)."""
    quote = {"\\": "\\\\", "'": "\\'"}
    return [f"++ray_kwargs.ray_init.runtime_env.env_vars.{name}='{env[name].translate(str.maketrans(quote))}'"
            for name in FORWARDED if env.get(name)]


def auth_env(env: Mapping[str, str]) -> dict[str, str]:
    """RAY_AUTH_MODE=token when a Ray token is at hand and no mode is set: Ray >= 2.52 turns token authentication on
    in `ray start --head` when ~/.ray/auth_token exists, but a process joining it by address must be told."""
    if env.get("RAY_AUTH_MODE"):
        return {}
    path = env.get("RAY_AUTH_TOKEN_PATH") or os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    return {"RAY_AUTH_MODE": "token"} if env.get("RAY_AUTH_TOKEN") or os.path.isfile(path) else {}


def verl_version() -> str:
    """``verl.__version__`` without importing verl (~5 s of a core: torch, transformers): verl 0.9.1 reads it from
    the ``version/version`` file of its package, which this reads too; a verl without that file is imported."""
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None:
        raise ModuleNotFoundError("No module named 'verl'", name="verl")
    for folder in spec.submodule_search_locations or ():
        path = os.path.join(folder, "version", "version")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
    import verl

    return verl.__version__


def versions() -> dict[str, str]:
    """This environment's afm and verl versions, as ray_cluster.sh labels a node."""
    import afm

    return {"afm_version": afm.__version__, "verl_version": verl_version()}


def problem(nodes: list[dict], nnodes: int, gpus: int, mine: Mapping[str, str]) -> str | None:
    """What keeps this cluster (``ray.nodes()``) from running ``nnodes`` x ``gpus``; None when nothing does."""
    alive = [n for n in nodes if n.get("Alive")]
    for node in alive:
        labels = node.get("Labels") or {}
        for key, want in mine.items():
            have = labels.get(key)
            if have != want:
                name = key.removesuffix("_version")
                return (f"node {node.get('NodeManagerAddress')} ({node.get('NodeID', '')[:12]}) runs {name} "
                        f"{have or '(unknown: not started by experiments/ray_cluster.sh)'}, this node {name} {want}: "
                        "install the same afm and verl on every node and restart it with experiments/ray_cluster.sh")
    ready = [n for n in alive if (n.get("Resources") or {}).get("GPU", 0) >= gpus]
    for node in ready:
        # verl reserves 3 CPUs with each GPU (RayResourcePool's bundle) and waits without end for a placement group
        # that cannot be placed
        cpus = (node.get("Resources") or {}).get("CPU", 0)
        if cpus < VERL_CPUS_PER_GPU * gpus:
            return (f"node {node.get('NodeManagerAddress')} ({node.get('NodeID', '')[:12]}) gives Ray {cpus:g} CPUs "
                    f"but verl reserves {VERL_CPUS_PER_GPU} per GPU, {VERL_CPUS_PER_GPU * gpus} for GPUS_PER_NODE={gpus}, "
                    "plus a few for its other actors: restart it with experiments/ray_cluster.sh and NUM_CPUS="
                    f"{VERL_CPUS_PER_GPU * gpus + 4} or more (logical CPUs)")
    if len(ready) < nnodes:
        return (f"NNODES={nnodes} but the Ray cluster has {len(ready)} node(s) with GPUS_PER_NODE={gpus} GPUs "
                f"({len(alive)} alive): start `experiments/ray_cluster.sh worker` on the missing node(s), with "
                "HEAD_ADDR and GPUS_PER_NODE set")
    return None


def wait_for_nodes(address: str, nnodes: int, gpus: int, timeout: float) -> str | None:
    """Poll the cluster at ``address`` until :func:`problem` finds nothing or ``timeout`` passes; the last problem."""
    import ray

    try:
        ray.init(address=address or "auto", logging_level="ERROR", log_to_driver=False)
    except Exception as exc:  # ConnectionError, AuthenticationError, ...: one line whatever Ray raised
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (f"no Ray cluster is reachable at {address or 'auto'} ({first}): start it with "
                "experiments/ray_cluster.sh head|worker")
    try:
        mine = versions()
        deadline = time.monotonic() + timeout
        while True:
            found = problem(ray.nodes(), nnodes, gpus, mine)
            if found is None or "NNODES=" not in found or time.monotonic() >= deadline:
                return found
            time.sleep(1.0)
    finally:
        ray.shutdown()


_DIED = re.compile(r"ActorDiedError: The actor died\b[^\n]*\n((?:[^\n]*\n){1,12})")
_FIELD = re.compile(r"^\s*(class_name|pid|name|ip): (\S*)\s*$", re.M)
_FRAME = re.compile(r'File "[^"]*?/(verl/[^"]+)", line \d+, in (\w+)')


def dead_actor_line(log: str, gpus: int) -> str | None:
    """One line for the Ray actor whose death stopped verl (the last ``ActorDiedError`` of its output ``log``): a
    trainer rank (verl's ``WorkerDict_<node>:<local rank>``) or a rollout server, the Ray node it ran on, what
    verl was doing; None when no actor died."""
    found = list(_DIED.finditer(log))
    if not found:
        return _dead_worker_line(log, gpus)
    last = found[-1]
    block = last.group(1)
    info = dict(_FIELD.findall(block))
    cls, name, pid = info.get("class_name", "?").split(".")[-1], info.get("name", ""), info.get("pid", "?")
    if m := re.search(r"WorkerDict_(\d+):(\d+)", name):
        who = f"trainer rank {int(m.group(1)) * gpus + int(m.group(2))} (verl's {cls} {name})"
    elif m := re.search(r"server_(\d+)_\d+", name):
        who = f"the rollout server of replica {m.group(1)} ({cls})"
    else:
        who = f"Ray actor {cls}" + (f" ({name})" if name else "")
    node = re.search(rf"Node ID: (\w+) Worker IP address: \S+ Worker port: \d+ Worker PID: {re.escape(pid)}\b", log)
    where = f"Ray node {node.group(1)[:12]}" if node else "a Ray node"
    if info.get("ip"):
        where += f" ({info['ip']})"
    frames = [f for f in _FRAME.findall(log[:last.start()]) if not f[0].startswith(("verl/utils/",
                                                                                    "verl/single_controller/"))]
    doing = f" while verl ran {frames[-1][1]} ({frames[-1][0]})" if frames else ""
    if "because its node has died" in block or "node died" in block.lower():
        why = "its node left the Ray cluster: check that machine and its raylet"
    else:
        why = (f"its process (pid {pid}) died: out of memory (dmesg on that node), killed (the scheduler?) or "
               "crashed (that node's Ray logs, session_latest/logs/*" + pid + "*)")
    return f"{who} on {where} died{doing}: {why}; the run stopped"


_WORKER_DIED = re.compile(r"A worker died or was killed while executing a task by an unexpected system error\b.*?"
                          r"Node ID: (\w+) Worker IP address: (\S+) Worker port: \d+ Worker PID: (\d+)")


def _dead_worker_line(log: str, gpus: int) -> str | None:
    """The line of :func:`dead_actor_line` from the raylet's report of a dead worker, for a run whose first error was
    another rank's broken collective (its peer gone) rather than Ray's ``ActorDiedError``: the dead process's class
    and torch rank come from its own output lines (``(WorkerDict pid=N)``, ``[rankR]:``)."""
    found = list(_WORKER_DIED.finditer(log))
    if not found:
        return None
    last = found[-1]
    node, ip, pid = last.groups()
    prefix = re.search(rf"\((\w+) pid={pid}(?:, ip=[^)]*)?\)", log)
    cls = prefix.group(1) if prefix else ""
    own = "\n".join(line for line in log.splitlines() if f" pid={pid}" in line and cls in line) if cls else ""
    rank = re.search(r"\[[Rr]ank ?(\d+)\]", own)
    if cls == "WorkerDict" and rank:
        who = f"trainer rank {rank.group(1)} (verl's WorkerDict, pid {pid})"
    else:
        who = f"Ray actor {cls} (pid {pid})" if cls else f"a Ray worker (pid {pid})"
    # what the trainer was doing: the driver's traceback after the report (verl/trainer frames)
    frames = [f for f in _FRAME.findall(log[last.end():]) if f[0].startswith("verl/trainer/")]
    doing = f" while verl ran {frames[-1][1]} ({frames[-1][0]})" if frames else ""
    why = (f"its process (pid {pid}) died: out of memory (dmesg on that node), killed (the scheduler?) or crashed "
           f"(that node's Ray logs, session_latest/logs/*{pid}*); the other ranks lost their peer")
    return f"{who} on Ray node {node[:12]} ({ip}) died{doing}: {why}; the run stopped"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m afm.rl.cluster", description=__doc__.splitlines()[0])
    p.add_argument("--address", default="auto", help="the Ray cluster (RAY_ADDRESS)")
    p.add_argument("--nnodes", type=int, required=True)
    p.add_argument("--gpus", type=int, required=True, help="GPUs (logical ones on the cpu platform) per node")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the nodes to join")
    args = p.parse_args(argv)
    found = wait_for_nodes(args.address, args.nnodes, args.gpus, args.timeout)
    if found is not None:
        if "NNODES=" in found:
            found += f" (waited {args.timeout:g} s, JOIN_TIMEOUT)"
        print(f"[afm] error: {found}", file=sys.stderr, flush=True)
        return 2
    print(f"[afm] Ray cluster: {args.nnodes} node(s) x {args.gpus} GPU(s), same afm and verl", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
