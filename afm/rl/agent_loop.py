"""``afm_agent``: verl's agent loop running afm's CoA rollout engine (:func:`afm.agent.run_trajectory`).

Declared in ``configs/verl/agent_loops.yaml`` (``actor_rollout_ref.rollout.agent.agent_loop_config_path``), so every
``AgentLoopWorker`` Ray actor imports it; a row picks it with ``agent_name: afm_agent`` (or
``rollout.agent.default_agent_loop=afm_agent``). verl instantiates the class once per trajectory, passing the entry's
extra keys as keyword arguments (documented on :class:`AfmAgentLoop`).

One trajectory:

1. prompt ids = the chat template over ``raw_prompt`` (verl's Continuous Token builder, with
   ``data.apply_chat_template_kwargs``; capped at ``rollout.prompt_length`` like verl's own loops);
2. tools = the sample's (:func:`select_tools`), per-tool ``ToolContext.kwargs`` from ``tools_kwargs``;
3. generate through ``server_manager`` with the enabled tools' closing tags and ``</answer>`` as stop strings, run
   the called tool, append ``\\n\\n<observation>\\n…\\n</observation>\\n\\n`` (mask 0), repeat until ``</answer>``,
   EOS, ``max_turns``, the token budget or the timeout;
4. return the sampled ids and observation ids exactly as generated/encoded, ``response_mask`` (1 sampled, 0
   observation), ``response_logprobs`` when ``rollout.calculate_log_probs`` is on, and per-trajectory fields.

``extra_fields``: ``finish_reason`` (answer|eos|max_turns|max_tokens|timeout|error), ``turns`` (generations),
``tool_calls`` ({name: n}), ``tool_errors`` ({name: n} of calls whose status is not ok/duplicate), ``tool_status``
({status: n}), ``tool_infra_errors`` ({name: n} of calls that failed for infrastructure reasons: the tool's server
unreachable, 5xx, its timeout, after the agent core's retries), ``infra_error`` (any such call), ``tools`` (enabled
tool names), ``observation_tokens``, ``model_tokens``, ``tool_latency_s``, ``error``, plus
``turn_scores``/``tool_rewards`` (empty, as in ``tool_agent``) and the server's global-step fields.
``metrics``: ``generate_sequences`` (seconds in generation), ``tool_calls`` (seconds in tools), ``num_preempted``.

Where they go: verl scores each trajectory as it finishes, handing the reward manager the fields as
``tool_extra_fields`` and the turn count as ``__num_turns__``. afm's reward managers (``afm_dapo``, ``afm_naive``,
``afm_rate_limited``, :mod:`afm.rl.reward_manager`, what ``REWARD_MANAGER`` selects) put every field, and
``num_turns``, into the reward function's ``extra_info``; verl's own ``dapo`` manager would pass none of them, its
``rate_limited`` no ``num_turns``.

**A tool infrastructure failure is not a wrong answer.** A trajectory with ``infra_error`` is still returned (so it
is scored and counted), but with ``response_mask`` all 0: none of its tokens carries a gradient. ``compute_score``
reads ``infra_error`` from ``extra_info`` and returns an infrastructure failure without grading the answer
(``infra_error`` 1.0, counted towards ``INFRA_FAIL_LIMIT``; :mod:`afm.rewards.score`), and afm's patch of verl's GRPO
(:func:`afm.rl.local.patches.patch_grpo_skip_masked_rows`) leaves rows whose mask is all 0 out of their group's mean
and std, so the failed sample neither trains nor moves the advantages of the samples it is grouped with.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from uuid import uuid4

from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    ToolListWrap,
)

from afm.agent.loop import AgentConfig, ToolRunner, run_trajectory
from afm.agent.record import Trajectory
from afm.agent.tokens import TokenizerAdapter
from afm.rl.backend import VerlServerBackend, sampling_from_verl
from afm.rl.tools import BoundTool, afm_tools_from_verl, context_kwargs, shared_afm_tools
from afm.tools.base import Tool

logger = logging.getLogger(__name__)

OK_STATUSES = ("ok", "duplicate")

# Semaphores shared by every trajectory of a worker process, per event loop and tool (``tool_concurrency``).
_SEMAPHORES: dict[tuple[int, str], asyncio.Semaphore] = {}


def _plain(value: Any) -> Any:
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _names(value: Any) -> list[str] | None:
    """A list of tool names from a row value (list, tuple, numpy array, or one comma-separated string)."""
    if value is None:
        return None
    if isinstance(value, str):
        return [s.strip() for s in value.split(",") if s.strip()]
    return [str(v) for v in list(value)]


def select_tools(available: Sequence[str], *, extra_info: Mapping[str, Any] | None,
                 tools_kwargs: Mapping[str, Any] | None, default: Sequence[str] | None = None) -> list[str]:
    """The tools enabled for one sample, in ``available`` order.

    First found wins: ``extra_info.tool_selection`` (verl's ``tool_agent`` key; ``[]`` = no tools), the names in
    the sample's ``tools_kwargs`` whose value is not null (the original AFM data's convention), the loop's
    ``default_tools``, all tools
    of the tools yaml. A name that is not in the tools yaml is an error (a silently missing tool would train a
    different task).
    """
    extra_info = extra_info or {}
    chosen = _names(extra_info.get("tool_selection"))
    if chosen is None and tools_kwargs:
        # Parquet stores tools_kwargs as a struct over all rows' keys: a tool absent from this row reads as None.
        chosen = [str(k) for k, v in tools_kwargs.items() if v is not None] or None
    if chosen is None and default is not None:
        chosen = list(default)
    if chosen is None:
        return list(available)
    unknown = sorted(set(chosen) - set(available))
    if unknown:
        raise ValueError(f"sample asks for tools {unknown} that the tools yaml does not define; defined: "
                         f"{list(available)} (check extra_info.tool_selection / tools_kwargs and "
                         "rollout.multi_turn.tool_config_path)")
    return [name for name in available if name in set(chosen)]


def _question(extra_info: Mapping[str, Any], tools_kwargs: Mapping[str, Any], messages: list[dict]) -> str:
    """The task as asked: ``extra_info.question``, a tool's ``question`` kwarg, else the last user message."""
    if isinstance(extra_info.get("question"), str):
        return extra_info["question"]
    for entry in tools_kwargs.values():
        q = context_kwargs(entry).get("question") if isinstance(entry, Mapping) else None
        if isinstance(q, str):
            return q
    users = [m.get("content") for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str)]
    return users[-1] if users else ""


def _semaphore(name: str, limit: int) -> asyncio.Semaphore:
    key = (id(asyncio.get_running_loop()), name)
    if key not in _SEMAPHORES:
        _SEMAPHORES[key] = asyncio.Semaphore(limit)
    return _SEMAPHORES[key]


class AfmAgentLoop(AgentLoopBase):
    """verl ``AgentLoopBase`` running an afm CoA trajectory; see the module docstring for what it returns.

    Keyword arguments (the optional keys of the ``afm_agent`` entry in ``agent_loops.yaml``):
        tool_config_path: tools yaml for this loop; default: the worker's tools from
            ``rollout.multi_turn.tool_config_path`` (built once per worker, shared).
        default_tools: tools enabled when a row names none (default: all tools of the yaml).
        max_turns: generations per trajectory (default ``rollout.multi_turn.max_assistant_turns``, else
            ``AgentConfig.max_turns``).
        max_tokens_per_turn: cap of one generation (default: ``rollout.response_length``).
        max_observation_chars: cap of one observation's text (default
            ``rollout.multi_turn.max_tool_response_length``, else ``AgentConfig.max_observation_chars``); longer
            ones keep head and tail around a marker.
        min_turn_tokens: do not start a generation with less room than this.
        tool_timeout_s: seconds per tool call, queueing for ``tool_concurrency`` included.
        trajectory_timeout_s: seconds per trajectory; ends it with finish_reason ``timeout`` (null = none).
        tool_concurrency: ``{tool: n}`` calls at once per worker process (absent/0 = unbounded).
        dedupe: answer repeated identical searches/crawls with a short note.
        raise_on_error: raise when a trajectory ends in an engine error (server failure) instead of returning
            it with finish_reason ``error`` (true); tool failures never raise, they become observations.
        trace_dir: append every trajectory as it goes to the trainer (prompt and response ids, the response mask,
            the observation texts, finish reason, tool infrastructure failures, the server's global step) to
            ``<trace_dir>/afm_agent.<pid>.jsonl`` (default ``$AFM_RL_TRACE_DIR``; unset = off). For checking what
            RL trains on; large on real runs.

    An absent key takes :class:`afm.agent.loop.AgentConfig`'s default for the field of the same name (the one
    place the rollout limits are written). Token limits always hold: response ≤ ``rollout.response_length``,
    prompt + response ≤ ``rollout.max_model_len`` (default prompt_length + response_length).
    """

    def __init__(self, *args: Any, tools: ToolListWrap | None = None, name: str | None = None,
                 tool_config_path: str | None = None, default_tools: Sequence[str] | None = None,
                 max_turns: int | None = None, max_tokens_per_turn: int | None = None,
                 max_observation_chars: int | None = None,
                 min_turn_tokens: int = AgentConfig.default("min_turn_tokens"),
                 tool_timeout_s: float = AgentConfig.default("tool_timeout_s"),
                 trajectory_timeout_s: float | None = AgentConfig.default("trajectory_timeout_s"),
                 tool_concurrency: Mapping[str, int] | None = None, dedupe: bool = AgentConfig.default("dedupe"),
                 raise_on_error: bool = True, trace_dir: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        trace_dir = trace_dir or os.environ.get("AFM_RL_TRACE_DIR") or None
        self.trace_path = Path(trace_dir) / f"afm_agent.{os.getpid()}.jsonl" if trace_dir else None
        self.loop_name = name or "afm_agent"
        if tool_config_path:
            self.afm_tools: dict[str, Tool] = shared_afm_tools(tool_config_path)
        else:
            self.afm_tools = afm_tools_from_verl(tools.tools if tools is not None else [])
            if not self.afm_tools and self.rollout_config.multi_turn.get("tool_config_path"):
                self.afm_tools = shared_afm_tools(self.rollout_config.multi_turn.tool_config_path)
        self.default_tools = _names(_plain(default_tools))
        self.tool_concurrency = {str(k): int(v) for k, v in dict(_plain(tool_concurrency) or {}).items()}
        self.raise_on_error = bool(raise_on_error)
        self.adapter = TokenizerAdapter(self.tokenizer)
        self.base_config = self._agent_config(max_turns, max_tokens_per_turn, max_observation_chars,
                                              min_turn_tokens, tool_timeout_s, trajectory_timeout_s, dedupe)

    def _agent_config(self, max_turns: int | None, max_tokens_per_turn: int | None,
                      max_observation_chars: int | None, min_turn_tokens: int, tool_timeout_s: float,
                      trajectory_timeout_s: float | None, dedupe: bool) -> AgentConfig:
        rc, mt = self.rollout_config, self.rollout_config.multi_turn
        response_length = int(rc.response_length)
        model_len = rc.get("max_model_len") or int(rc.prompt_length) + response_length
        turns = max_turns or mt.get("max_assistant_turns") or AgentConfig.default("max_turns")
        obs_chars = (max_observation_chars or mt.get("max_tool_response_length")
                     or AgentConfig.default("max_observation_chars"))
        return AgentConfig(
            tools=tuple(self.afm_tools), max_turns=int(turns),
            max_tokens_per_turn=int(max_tokens_per_turn or response_length),
            max_response_tokens=response_length, max_model_len=int(model_len),
            min_turn_tokens=int(min_turn_tokens), tool_timeout_s=float(tool_timeout_s),
            max_observation_chars=int(obs_chars),
            trajectory_timeout_s=float(trajectory_timeout_s) if trajectory_timeout_s else None, dedupe=bool(dedupe))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = [dict(m) for m in list(kwargs["raw_prompt"])]
        extra_info = dict(_plain(kwargs.get("extra_info")) or {})
        tools_kwargs = dict(_plain(kwargs.get("tools_kwargs")) or extra_info.get("tools_kwargs") or {})
        enabled = select_tools(list(self.afm_tools), extra_info=extra_info, tools_kwargs=tools_kwargs,
                               default=self.default_tools)
        bound = {name: BoundTool(self.afm_tools[name], context_kwargs(tools_kwargs.get(name)),
                                 _semaphore(name, n) if (n := self.tool_concurrency.get(name, 0)) > 0 else None)
                 for name in enabled}
        config = replace(self.base_config, tools=tuple(enabled), sampling=sampling_from_verl(sampling_params))

        prompt_ids = await self.ct_build_initial_tokens(messages)
        priority = int(kwargs.get("priority", 0))  # np.int64 in verl's batch
        full_determinism = bool(self.rollout_config.get("full_determinism", False))
        request_id = f"det-{priority}" if full_determinism else uuid4().hex
        backend = VerlServerBackend(self.server_manager, self.adapter, request_id, sampling_params,
                                    engine=str(self.rollout_config.name), priority=priority)
        traj = await run_trajectory(backend, self.adapter, ToolRunner(bound, config), config, prompt_ids,
                                    question=_question(extra_info, tools_kwargs, messages),
                                    meta={"request_id": request_id})
        if traj.finish_reason == "error" and self.raise_on_error:
            raise RuntimeError(f"afm_agent trajectory {request_id} failed: {traj.error}")
        out = self._output(traj, backend, enabled, want_logprobs=bool(sampling_params.get("logprobs")))
        if self.trace_path is not None:
            self._trace(traj, out)
        return out

    def _trace(self, traj: Trajectory, out: AgentLoopOutput) -> None:
        record = {"request_id": traj.meta.get("request_id"), "prompt_ids": list(out.prompt_ids),
                  "response_ids": list(out.response_ids), "response_mask": list(out.response_mask),
                  "observations": [s.text for s in traj.segments if s.kind == "observation"],
                  "finish_reason": traj.finish_reason, "global_steps": out.extra_fields.get("global_steps"),
                  "tool_calls": out.extra_fields.get("tool_calls"),
                  "tool_infra_errors": out.extra_fields.get("tool_infra_errors"),
                  "generate_s": out.metrics.generate_sequences,
                  "tool_s": out.metrics.tool_calls}
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        with self.trace_path.open("a") as f:
            f.write(json.dumps(record) + "\n")

    def _output(self, traj: Trajectory, backend: VerlServerBackend, enabled: list[str],
                want_logprobs: bool) -> AgentLoopOutput:
        limit = int(self.rollout_config.response_length)
        response_ids = traj.response_ids()[:limit]
        response_mask = traj.response_mask()[:limit]
        logprobs = None
        if want_logprobs:
            logprobs = [lp for s in traj.segments
                        for lp in (s.logprobs if s.logprobs is not None else [0.0] * len(s.ids))][:limit]
        counts, errors, statuses, infra = traj.tool_counts(), {}, {}, {}
        for rec in traj.tool_calls:
            statuses[rec.status] = statuses.get(rec.status, 0) + 1
            if rec.status not in OK_STATUSES:
                errors[rec.name] = errors.get(rec.name, 0) + 1
            if rec.infra:
                infra[rec.name] = infra.get(rec.name, 0) + 1
        if infra:
            # the sample says nothing about the policy: no token of it is trained on (module docstring)
            response_mask = [0] * len(response_mask)
        tool_s = sum(rec.latency_s for rec in traj.tool_calls)
        extra = {
            **backend.extra_fields,
            "finish_reason": traj.finish_reason, "turns": traj.turns, "tools": list(enabled),
            "tool_calls": counts, "tool_errors": errors, "tool_status": statuses,
            "tool_infra_errors": infra, "infra_error": bool(infra),
            "observation_tokens": traj.n_observation_tokens, "model_tokens": traj.n_model_tokens,
            "tool_latency_s": tool_s, "error": traj.error,
            "logprobs_missing": bool(want_logprobs and any(s.kind == "model" and s.logprobs is None
                                                           for s in traj.segments)),
            "turn_scores": [], "tool_rewards": [],
        }
        routed = backend.routed_experts
        if routed is not None:
            routed = routed[: len(traj.prompt_ids) + limit]
        n_obs = sum(1 for s in traj.segments if s.kind == "observation")
        return AgentLoopOutput(
            prompt_ids=list(traj.prompt_ids), response_ids=response_ids, response_mask=response_mask,
            response_logprobs=logprobs, routed_experts=routed, num_turns=1 + traj.turns + n_obs,
            metrics=AgentLoopMetrics(generate_sequences=backend.generate_s, tool_calls=tool_s,
                                     num_preempted=backend.num_preempted),
            extra_fields=extra,
        )
