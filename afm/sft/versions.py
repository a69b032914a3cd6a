"""Multi-process SFT: every rank runs the same afm, LLaMA-Factory, transformers and torch, or the job stops at once.

A node with another checkout would mask, tokenize or compute the loss differently without a word (DDP only needs the
parameter shapes to agree). Each rank, before LLaMA-Factory starts, publishes its versions to the job's rendezvous
store (the torchrun agent's, at MASTER_ADDR:MASTER_PORT) and compares everyone's; a difference makes every rank
print one line, ``[afm] stop: ...`` (the launcher makes it the node's error line), and exit.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from datetime import timedelta
from typing import Any

MARK = "[afm] stop: "
EXIT_STATUS = 2
PACKAGES = ("afm", "llamafactory", "transformers", "torch")
_KEY = "afm_versions/"


def installed() -> dict[str, str]:
    """The versions of :data:`PACKAGES` in this interpreter (their ``__version__``; "missing" when absent)."""
    found = {}
    for name in PACKAGES:
        try:
            module = __import__(name)
        except ImportError:
            found[name] = "missing"
            continue
        found[name] = str(getattr(module, "__version__", "unknown"))
    return found


def difference(ranks: dict[int, dict[str, Any]]) -> str | None:
    """The first rank whose versions differ from rank 0's, as one line; None when all agree."""
    base = ranks[min(ranks)]
    for rank in sorted(ranks):
        theirs = ranks[rank]
        for name in PACKAGES:
            if theirs["versions"].get(name) != base["versions"].get(name):
                return (f"rank {rank} (node {theirs['node']}, {theirs['host']}) runs {name} "
                        f"{theirs['versions'].get(name)}, rank {min(ranks)} (node {base['node']}, {base['host']}) "
                        f"{name} {base['versions'].get(name)}: install the same afm, LLaMA-Factory, transformers and "
                        "torch on every node")
    return None


def check(timeout: float = 300.0) -> None:
    """Under torchrun with more than one process: publish, wait for every rank's versions (``timeout`` seconds: a
    rank that died before publishing is torchrun's to report), and stop this process on a difference."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2 or not os.environ.get("MASTER_ADDR") or not os.environ.get("TORCHELASTIC_RUN_ID"):
        return
    from torch.distributed import TCPStore

    rank = int(os.environ["RANK"])
    store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                     timeout=timedelta(seconds=timeout))
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    key = f"{_KEY}{run}/"
    store.set(f"{key}{rank}", json.dumps({"versions": installed(), "host": socket.gethostname(),
                                          "node": os.environ.get("GROUP_RANK", "?")}))
    keys = [f"{key}{r}" for r in range(world)]
    try:
        store.wait(keys, timedelta(seconds=timeout))
    except Exception:  # a rank that never published: torchrun reports why it stopped
        return
    line = difference({r: json.loads(store.get(k)) for r, k in enumerate(keys)})
    if line:
        print(f"{MARK}{line}", file=sys.stderr, flush=True)
        os._exit(EXIT_STATUS)
