"""The two places where verl 0.9.1 has no extension point for the local backend, patched at import time.

Each patch names the verl line it works around, checks that the code it wraps still looks as expected (so a verl
upgrade that changes it fails loudly instead of running unpatched), and is applied by :mod:`afm.rl.local.plugin`
through a post-import hook, in every process that imports the module. tests/rl/test_local_backend.py fails when
either assumption stops holding.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

# verl/utils/distributed.py:89 (0.9.1): `backend = backend or f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"`.
# On the cpu platform that is "cpu:gloo,cpu:gloo", which torch rejects ("Duplicate device type cpu").
PROCESS_GROUP_FUNCTION = "initialize_global_process_group_ray"
PROCESS_GROUP_SOURCE_MARK = 'f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"'

# verl/trainer/ppo/v1/replay_buffer.py:144/409 (0.9.1): the V1 trainer's ReplayBuffer sleeps a fixed
# `poll_interval=2.0` s between looks at the finished trajectories, and the trainer builds it without passing one
# (trainer_base.py:155-186). With the local rollout a whole step takes well under a second, so every step waited
# ~2 s for nothing. AFM_VERL_POLL_S (set by experiments/common.sh, default 0.02) replaces the default.
REPLAY_POLL_ENV = "AFM_VERL_POLL_S"


def _check_source(fn: Any, mark: str, where: str) -> None:
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError) as exc:  # pragma: no cover - source always ships in the verl wheel
        raise RuntimeError(f"afm.rl.local: cannot read {where} to check the patch target: {exc}") from exc
    if mark not in source:
        raise RuntimeError(f"afm.rl.local: {where} no longer contains {mark!r}; verl changed under the patch "
                           "(afm.rl.local.patches supports verl 0.9.x): update the patch before training")


def patch_process_group_backend(module: ModuleType) -> None:
    """Make ``initialize_global_process_group_ray`` default to plain ``cpu:gloo`` on the cpu device.

    Modules that import the function by name (``verl.workers.engine_workers``, ``verl.checkpoint_engine.base``)
    import it after this runs, because every verl submodule import executes ``verl/__init__`` (and so this plugin)
    first.
    """
    original = getattr(module, PROCESS_GROUP_FUNCTION)
    if getattr(original, "__afm_patched__", False):
        return
    _check_source(original, PROCESS_GROUP_SOURCE_MARK, f"verl.utils.distributed.{PROCESS_GROUP_FUNCTION}")
    if "backend" not in inspect.signature(original).parameters:
        raise RuntimeError(f"afm.rl.local: verl.utils.distributed.{PROCESS_GROUP_FUNCTION} lost its backend "
                           "argument; update afm.rl.local.patches")

    @functools.wraps(original)
    def initialize_global_process_group_ray(timeout_second: Any = None, backend: str | None = None) -> Any:
        if backend is None and module.get_device_name() == "cpu":
            backend = "cpu:gloo"
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray.__afm_patched__ = True  # type: ignore[attr-defined]
    setattr(module, PROCESS_GROUP_FUNCTION, initialize_global_process_group_ray)


def patch_replay_poll_interval(module: ModuleType) -> None:
    """Default ``ReplayBuffer(poll_interval=...)`` to ``$AFM_VERL_POLL_S`` when that is set."""
    cls = module.ReplayBuffer
    original = cls.__init__
    if getattr(original, "__afm_patched__", False):
        return
    params = inspect.signature(original).parameters
    if "poll_interval" not in params or params["poll_interval"].default != 2.0:
        raise RuntimeError("afm.rl.local: verl's ReplayBuffer.__init__ no longer has poll_interval=2.0; "
                           "update afm.rl.local.patches")
    _check_source(module.ReplayBuffer._wait_for_next_poll, "time.sleep(self.poll_interval)",
                  "verl.trainer.ppo.v1.replay_buffer.ReplayBuffer._wait_for_next_poll")

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        value = os.environ.get(REPLAY_POLL_ENV, "").strip()
        if value and "poll_interval" not in kwargs and len(args) < list(params).index("poll_interval"):
            kwargs["poll_interval"] = float(value)
            logger.info("afm.rl.local: replay buffer polls every %s s (%s)", value, REPLAY_POLL_ENV)
        original(self, *args, **kwargs)

    __init__.__afm_patched__ = True  # type: ignore[attr-defined]
    cls.__init__ = __init__
