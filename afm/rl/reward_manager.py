"""afm's reward managers: verl's ``dapo``, ``naive`` and ``rate_limited`` managers, registered in verl's reward
manager registry as ``afm_dapo``, ``afm_naive`` and ``afm_rate_limited`` (the scripts' ``REWARD_MANAGER=dapo`` etc.
select them: :mod:`afm.rl.knobs` writes ``reward.reward_manager.name=afm_<REWARD_MANAGER>``).

Why: verl 0.9.1's managers do not hand the reward function the same ``extra_info``. When an agent loop finishes a
trajectory, verl's agent-loop worker scores it at once (``AgentLoopWorkerBase._compute_score``) with a one-row
DataProto that carries the dataset row, the loop's ``extra_fields`` as ``tool_extra_fields`` and the turn count as
``__num_turns__``. ``naive`` merges both into ``extra_info`` (``naive.py:44-52``), ``rate_limited`` merges the
fields but not the turn count (``limited.py:410-412``), and ``dapo`` — afm's default — passes the dataset's
``extra_info`` alone (``dapo.py:60-62``). Both merging managers also update the dataset's dict in place, and the
``rollout.n`` rows of one prompt can share that dict object.

Each afm manager is verl's class, unchanged, behind one step: :func:`with_rollout_fields` gives every row a fresh
``extra_info`` = the dataset's ``extra_info``, then the loop's ``extra_fields`` (``afm_agent``'s ``finish_reason``,
``turns``, ``tool_calls``, ``tool_errors``, ``tool_status``, ``tool_infra_errors``, ``infra_error``, … see
:mod:`afm.rl.agent_loop`), then ``num_turns`` (verl's count: prompt, generations and observations). So
``compute_score`` — and any scorer registered with :func:`afm.rewards.register_scorer` — reads the same keys under
every manager; DAPO's overlong shaping and the rate limits are verl's own code.

``afm_rate_limited`` also lets :class:`afm.rewards.score.InfrastructureError` (``INFRA_FAIL_LIMIT`` infrastructure
failures in a row) stop the step: verl's ``rate_limited`` turns any exception of the reward function into a 0
reward (``limited.py:455-462``), which is exactly what that error exists to prevent.

Imported by the verl plugin (:mod:`afm.rl.local.plugin`) as soon as verl's reward manager package loads, in the
driver and in every reward worker, so the names resolve wherever verl looks them up.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

import numpy as np
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager
from verl.experimental.reward_loop.reward_manager.limited import RateLimitedRewardManager
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.experimental.reward_loop.reward_manager.registry import register

# REWARD_MANAGER knob value -> the registered afm manager
AFM_REWARD_MANAGERS = {"dapo": "afm_dapo", "naive": "afm_naive", "rate_limited": "afm_rate_limited"}

# verl loads afm/rewards/score.py by file path, as a module of its own, so its InfrastructureError is not the class
# importable here: match it by name.
_INFRA_ERROR_NAME = "InfrastructureError"


def with_rollout_fields(data: DataProto) -> DataProto:
    """``data`` with a fresh ``extra_info`` dict per row: dataset ``extra_info`` | ``tool_extra_fields`` |
    ``num_turns``. Rows without rollout columns (a dataset batch scored outside the agent loop) come back as they
    are. The tensors and the other columns are shared, not copied."""
    columns = data.non_tensor_batch
    fields, turns = columns.get("tool_extra_fields"), columns.get("__num_turns__")
    if fields is None and turns is None:
        return data
    base = columns.get("extra_info")
    infos = np.empty(len(data), dtype=object)
    for i in range(len(data)):
        info = dict(base[i]) if base is not None and isinstance(base[i], Mapping) else {}
        if fields is not None and isinstance(fields[i], Mapping):
            info.update(fields[i])
        if turns is not None:
            info["num_turns"] = int(turns[i])
        infos[i] = info
    return DataProto(batch=data.batch, non_tensor_batch={**columns, "extra_info": infos},
                     meta_info=data.meta_info)


class _RolloutFields:
    """Mixin before a verl manager: its ``run_single`` sees :func:`with_rollout_fields` of the row."""

    async def run_single(self, data: DataProto) -> dict:
        return await super().run_single(with_rollout_fields(data))  # type: ignore[misc]


@register("afm_dapo")
class AfmDAPORewardManager(_RolloutFields, DAPORewardManager):
    """verl's ``dapo`` manager (overlong buffer included) whose reward function sees the rollout's fields."""


@register("afm_naive")
class AfmNaiveRewardManager(_RolloutFields, NaiveRewardManager):
    """verl's ``naive`` manager whose reward function sees the rollout's fields (in a dict of its own per row)."""


# The InfrastructureError raised inside one run_single call, kept for that call (rows are scored concurrently).
_FATAL: contextvars.ContextVar[list[BaseException] | None] = contextvars.ContextVar("afm_reward_fatal", default=None)


@register("afm_rate_limited")
class AfmRateLimitedRewardManager(_RolloutFields, RateLimitedRewardManager):
    """verl's ``rate_limited`` manager whose reward function sees the rollout's fields, and whose
    ``InfrastructureError`` stops the step instead of becoming a 0 reward."""

    async def _compute_reward(self, **kwargs: Any) -> dict | float:
        try:
            return await super()._compute_reward(**kwargs)
        except Exception as exc:
            caught = _FATAL.get()
            if caught is not None and type(exc).__name__ == _INFRA_ERROR_NAME:
                caught.append(exc)
            raise

    async def run_single(self, data: DataProto) -> dict:
        caught: list[BaseException] = []
        token = _FATAL.set(caught)  # the list is shared with the wait_for task verl scores in
        try:
            result = await super().run_single(data)
        finally:
            _FATAL.reset(token)
        if caught:
            raise caught[0]
        return result
