"""A :class:`afm.agent.ModelBackend` over verl's LLM server client (``AgentLoopBase.server_manager``).

Each call is ``server_manager.generate(request_id, prompt_ids=..., sampling_params=...)`` with one request id for
all turns of a trajectory (verl routes it to the same replica, so the prefix cache is reused). The afm sampling
settings become the engine's: ``max_tokens``, ``stop`` and keeping the stop string in the output
(``include_stop_str_in_output`` for vLLM and TensorRT-LLM, ``no_stop_trim`` for SGLang); keys verl set that afm does not
model (``logprobs``, ``stop_token_ids``, …) pass through unchanged.

verl's ``TokenOutput.stop_reason`` does not tell a stop string from the length limit ("completed" for both), so the
finish is read from the tokens: a stop string in the decoded new text → ``stop``; last id an end-of-sequence id →
``eos``; otherwise ``length``. Should a server run past a stop string, the ids are cut to the shortest prefix whose
text contains it (a prefix of the sampled ids; nothing is re-tokenised).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from afm.agent.backend import Generation, SamplingParams, find_stop
from afm.agent.tokens import TokenizerAdapter

# Fields of afm's SamplingParams that the backend writes itself (anything else verl set passes through).
_OWN_KEYS = ("max_tokens", "max_new_tokens", "temperature", "top_p", "top_k", "stop", "seed", "repetition_penalty",
             "presence_penalty", "frequency_penalty", "include_stop_str_in_output", "no_stop_trim")
_SPEC_DECODE_KEYS = ("spec_num_draft_tokens", "spec_num_accepted_tokens", "spec_num_verify_steps")


def sampling_from_verl(params: Mapping[str, Any]) -> SamplingParams:
    """afm sampling settings from the dict verl hands to ``AgentLoopBase.run`` (validation overrides included)."""
    return SamplingParams(
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        top_k=int(params.get("top_k", -1) if params.get("top_k") is not None else -1),
        repetition_penalty=float(params.get("repetition_penalty", 1.0)),
    )


class VerlServerBackend:
    """``generate(prompt_ids, sampling) -> Generation`` for one trajectory, through verl's server client.

    Args:
        server_manager: verl's ``LLMServerClient`` (anything with its ``generate`` signature).
        tokenizer: the trajectory's :class:`TokenizerAdapter` (decoding and end-of-sequence ids).
        request_id: sticky id of the trajectory, the same for every turn.
        verl_params: the sampling dict verl passed to ``run`` (its extra keys are forwarded).
        engine: ``rollout.name`` (``vllm``, ``sglang`` or ``trtllm``): how "keep the stop string" is spelled.
        priority: the sample's scheduling priority (verl's ``priority`` column; vLLM only), sent with every turn.

    After the trajectory: ``generate_s`` (time in ``generate``), ``calls``, ``num_preempted`` (-1 when no server
    reported it), ``routed_experts`` (the last non-empty one), ``extra_fields`` (the first turn's, with
    ``max_global_steps`` updated and speculative-decoding counters summed, as verl's ``tool_agent`` does).
    """

    def __init__(self, server_manager: Any, tokenizer: TokenizerAdapter, request_id: str,
                 verl_params: Mapping[str, Any] | None = None, engine: str = "vllm", priority: int = 0) -> None:
        self.server = server_manager
        self.tok = tokenizer
        self.request_id = request_id
        self.passthrough = {k: v for k, v in dict(verl_params or {}).items() if k not in _OWN_KEYS}
        self.engine = engine
        self.priority = int(priority)
        self.generate_s = 0.0
        self.calls = 0
        self.num_preempted = -1
        self.routed_experts: Any = None
        self.extra_fields: dict[str, Any] = {}

    def engine_params(self, sampling: SamplingParams) -> dict[str, Any]:
        """The ``sampling_params`` dict sent to the server for one turn."""
        params: dict[str, Any] = dict(self.passthrough)
        params.update(max_tokens=int(sampling.max_new_tokens), temperature=sampling.temperature,
                      top_p=sampling.top_p, top_k=sampling.top_k, repetition_penalty=sampling.repetition_penalty)
        if sampling.stop:
            params["stop"] = list(sampling.stop)
            if self.engine == "sglang":
                params["no_stop_trim"] = True
            else:
                params["include_stop_str_in_output"] = True
        if sampling.seed is not None:
            params["seed"] = sampling.seed
        if sampling.presence_penalty:
            params["presence_penalty"] = sampling.presence_penalty
        if sampling.frequency_penalty:
            params["frequency_penalty"] = sampling.frequency_penalty
        return params

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        t0 = time.monotonic()
        try:
            out = await self.server.generate(self.request_id, prompt_ids=list(prompt_ids),
                                             sampling_params=self.engine_params(sampling), priority=self.priority)
        finally:
            self.generate_s += time.monotonic() - t0
            self.calls += 1
        self._collect(out)
        ids = [int(i) for i in out.token_ids]
        logprobs = [float(x) for x in out.log_probs] if out.log_probs else None
        gen = self.finish(ids, sampling.stop)
        if logprobs is not None and len(logprobs) >= len(gen.ids):
            gen.meta["logprobs"] = logprobs[: len(gen.ids)]
        gen.meta["stop_reason"] = out.stop_reason
        return gen

    def finish(self, ids: list[int], stops: tuple[str, ...] | list[str]) -> Generation:
        """Classify sampled ids (and cut them after the first stop string, should they run past one)."""
        text = self.tok.decode(ids)
        hit = find_stop(text, stops) if stops else None
        if hit is not None and hit[0] < len(text.rstrip()):
            # The text goes on after the stop string: keep the shortest prefix of ids whose text holds it
            # (holding a stop is monotone in the prefix length, so bisect).
            lo, hi = 1, len(ids)
            while lo < hi:
                mid = (lo + hi) // 2
                if find_stop(self.tok.decode(ids[:mid]), stops) is not None:
                    hi = mid
                else:
                    lo = mid + 1
            ids, text = ids[:lo], self.tok.decode(ids[:lo])
            hit = find_stop(text, stops) or hit
        if hit is not None:
            return Generation(ids, "stop", text, stop_str=hit[1])
        if ids and ids[-1] in self.tok.eos_ids:
            return Generation(ids, "eos", text)
        return Generation(ids, "length", text)

    def _collect(self, out: Any) -> None:
        preempted = getattr(out, "num_preempted", None)
        if preempted is not None:
            self.num_preempted = max(self.num_preempted, 0) + int(preempted)
        if getattr(out, "routed_experts", None) is not None:
            self.routed_experts = out.routed_experts
        extra = dict(getattr(out, "extra_fields", None) or {})
        if not self.extra_fields:
            self.extra_fields.update(extra)
            return
        if extra.get("max_global_steps"):
            self.extra_fields["max_global_steps"] = extra["max_global_steps"]
        for key in _SPEC_DECODE_KEYS:
            if key in extra and key in self.extra_fields:
                self.extra_fields[key] = int(self.extra_fields[key]) + int(extra[key])

    async def aclose(self) -> None:
        """Nothing to release: the server client belongs to the verl worker."""
        return None
