"""The places where verl 0.9.1 has no extension point for what afm needs, patched at import time.

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
from collections import Counter
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

# verl/trainer/ppo/v1/replay_buffer.py:442-488 (0.9.1): with DAPO's group filter on, the sync ReplayBuffer refills
# every filtered group (all answers right, or all wrong) and loops until a batch's worth of groups carries a gradient.
# algorithm.filter_groups.max_num_gen_batches, the DAPO paper's cap that verl's earlier DAPO trainer enforced, is not
# read any more (config/algorithm.py:52 documents it), so a policy that solves every prompt always or never samples
# forever without a word. afm reads the cap again: a step that has filtered max_num_gen_batches x train_batch_size
# groups stops the run with an error that says what to change. 0 or less keeps verl's endless refills.
REFILL_CAP_ATTR = "afm_max_num_gen_batches"
REFILL_SOURCE_MARK = "refill_credit += 2 * dapo_count"


def _check_source(fn: Any, mark: str, where: str) -> None:
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError) as exc:  # pragma: no cover - source always ships in the verl wheel
        raise RuntimeError(f"afm.rl.local: cannot read {where} to check the patch target: {exc}") from exc
    if mark not in source:
        raise RuntimeError(f"afm.rl.local: {where} no longer contains {mark!r}; verl changed under the patch "
                           "(afm.rl.local.patches supports verl 0.9.x): update the patch before training")


# A process group of one process whose master port was taken between verl's choice (a bind to port 0 in the
# ephemeral range) and torch's listen: on a busy machine another process's outgoing connection can get that port
# (seen once in a full test run: EADDRINUSE at a resumed run's start). Nobody else connects to a one-process group's
# store, so it may move to a new port; a group of several ranks may not (they share MASTER_PORT) and still fails.
PORT_RETRIES = 3


def _retry_on_a_new_port(exc: BaseException) -> bool:
    """Whether ``exc`` is a taken master port of a one-process group; if so, point MASTER_PORT at a free port."""
    if "EADDRINUSE" not in str(exc) and "address already in use" not in str(exc).lower():
        return False
    if int(os.environ.get("WORLD_SIZE", "1")) != 1 or os.environ.get("DIST_INIT_METHOD"):
        return False
    from afm.common.procs import free_port

    old, os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT"), str(free_port())
    logger.warning("afm.rl.local: the process group's master port %s was taken; retrying on %s", old,
                   os.environ["MASTER_PORT"])
    return True


def patch_process_group_backend(module: ModuleType) -> None:
    """Make ``initialize_global_process_group_ray`` default to plain ``cpu:gloo`` on the cpu device, and move a
    one-process group whose master port was taken to a free one (:data:`PORT_RETRIES`).

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
        for attempt in range(PORT_RETRIES + 1):
            try:
                return original(timeout_second=timeout_second, backend=backend)
            except Exception as exc:  # torch's DistNetworkError: a RuntimeError
                if attempt == PORT_RETRIES or not _retry_on_a_new_port(exc):
                    raise
        return None  # unreachable: the last attempt returns or raises

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


class TooManyFilteredGroups(RuntimeError):
    """DAPO's group filter dropped ``max_num_gen_batches`` batches' worth of groups in one step."""


def patch_replay_refill_cap(module: ModuleType) -> None:
    """Make verl's sync ``ReplayBuffer`` stop after ``max_num_gen_batches`` batches of filtered groups in a step.

    The cap is set on the buffer by :func:`patch_build_replay_buffer` (``afm_max_num_gen_batches``); a buffer built
    without it (a custom sampler, a test) keeps verl's behaviour.
    """
    cls = module.ReplayBuffer
    original = cls._evict_terminal_groups
    if getattr(original, "__afm_patched__", False):
        return
    _check_source(cls.sample, REFILL_SOURCE_MARK, "verl.trainer.ppo.v1.replay_buffer.ReplayBuffer.sample")

    @functools.wraps(original)
    def _evict_terminal_groups(self: Any, global_steps: int, partition_id: str, eviction_reasons: Any) -> Any:
        out = original(self, global_steps, partition_id, eviction_reasons)
        cap, batch = int(getattr(self, REFILL_CAP_ATTR, 0) or 0), int(getattr(self, "train_batch_size", 0) or 0)
        if partition_id == "val" or cap <= 0 or batch <= 0:
            return out
        counts = self.__dict__.setdefault("_afm_filtered_groups", {})
        key = (partition_id, global_steps)
        if key not in counts:
            counts.clear()
            counts[key] = 0
        counts[key] += int(out[2])
        if counts[key] >= cap * batch:
            raise TooManyFilteredGroups(
                f"DAPO's group filter dropped {counts[key]} groups in step {global_steps} "
                f"(algorithm.filter_groups.max_num_gen_batches={cap} x data.train_batch_size={batch}): every "
                "rollout group of the policy got the same answer score, so no batch carries a gradient. The data is "
                "too hard or too easy for this policy: select it with `afm data select` from the policy's pass "
                "rates, or set FILTER_GROUPS=false, or MAX_NUM_GEN_BATCHES=0 to refill without a cap (verl's default)")
        return out

    _evict_terminal_groups.__afm_patched__ = True  # type: ignore[attr-defined]
    cls._evict_terminal_groups = _evict_terminal_groups


def patch_build_replay_buffer(module: ModuleType) -> None:
    """Give the trainer's replay buffer the ``algorithm.filter_groups.max_num_gen_batches`` cap (when filtering)."""
    cls = module.PPOTrainer
    original = cls._build_replay_buffer
    if getattr(original, "__afm_patched__", False):
        return
    _check_source(original, "filter_groups", "verl.trainer.ppo.v1.trainer_base.PPOTrainer._build_replay_buffer")

    @functools.wraps(original)
    def _build_replay_buffer(self: Any) -> Any:
        buffer = original(self)
        groups = self.config.algorithm.get("filter_groups", None)
        if groups is not None and groups.get("enable", False):
            setattr(buffer, REFILL_CAP_ATTR, int(groups.get("max_num_gen_batches", 0) or 0))
        return buffer

    _build_replay_buffer.__afm_patched__ = True  # type: ignore[attr-defined]
    cls._build_replay_buffer = _build_replay_buffer


# verl/trainer/ppo/core_algos.py:267-331 (0.9.1): GRPO's group mean and std take every row of a group, including a
# row whose response_mask is all 0, which carries no gradient. afm_agent zeroes the mask of a trajectory whose tool
# calls failed for infrastructure reasons (afm.rl.agent_loop), so that row must not set the baseline of the rows it
# is compared with either: its reward says nothing about the policy.
GRPO_FUNCTION = "compute_grpo_outcome_advantage"
GRPO_SOURCE_MARK = "id2score[index[i]].append(scores[i])"


def patch_grpo_skip_masked_rows(module: ModuleType) -> None:
    """Make GRPO leave rows with an all-zero ``response_mask`` out of their group's mean and std (advantage 0).

    A group that keeps every row computes exactly as before (one call of verl's function, unchanged). A group that
    lost rows is scored over the rows it kept; one that keeps a single row gives it advantage 0 (nothing to compare
    it with; verl would give a lone row its raw score as advantage). Applied to the module attribute, which verl's
    ``compute_advantage`` calls, and to the ``grpo`` entry of the estimator registry.
    """
    original = getattr(module, GRPO_FUNCTION)
    if getattr(original, "__afm_patched__", False):
        return
    _check_source(original, GRPO_SOURCE_MARK, f"verl.trainer.ppo.core_algos.{GRPO_FUNCTION}")

    import numpy as np
    import torch

    @functools.wraps(original)
    def compute_grpo_outcome_advantage(token_level_rewards: Any, response_mask: Any, index: Any,
                                       *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        live = response_mask.sum(dim=-1) > 0
        if bool(live.all()):
            return original(token_level_rewards, response_mask, index, *args, **kwargs)
        keys = [str(k) for k in index]
        alive = live.cpu().tolist()
        total, kept = Counter(keys), Counter(k for k, a in zip(keys, alive, strict=True) if a)
        # a group cut down to one row has no baseline left: that row gets advantage 0 as well
        use = [a and not (kept[k] == 1 < total[k]) for k, a in zip(keys, alive, strict=True)]
        rows = [i for i, u in enumerate(use) if u]
        advantages = torch.zeros_like(token_level_rewards, dtype=torch.float32)
        if rows:
            picked = torch.tensor(rows, dtype=torch.long, device=token_level_rewards.device)
            sub, _ = original(token_level_rewards[picked], response_mask[picked], np.asarray(index)[rows],
                              *args, **kwargs)
            advantages = advantages.to(sub.dtype)
            advantages[picked] = sub
        return advantages, advantages

    compute_grpo_outcome_advantage.__afm_patched__ = True  # type: ignore[attr-defined]
    setattr(module, GRPO_FUNCTION, compute_grpo_outcome_advantage)
    registry = getattr(module, "ADV_ESTIMATOR_REGISTRY", None)
    if isinstance(registry, dict) and registry.get("grpo") is original:
        registry["grpo"] = compute_grpo_outcome_advantage
