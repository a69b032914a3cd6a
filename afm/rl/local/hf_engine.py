"""Batched token-in-token-out sampling from a transformers causal LM: the engine behind the ``hf`` rollout.

Requests queue up; whenever the model is free, every queued request (up to ``max_batch_size``) is decoded together
in one left-padded batch with a KV cache, so concurrent trajectories share forward passes and nothing waits on a
timer. Each row keeps its own sampling settings (temperature, top-k, top-p, max_tokens, stop strings, stop ids) and
finishes on its own; the batch ends when every row has. Requests that arrive during a batch form the next one (a
static batch, not vLLM's continuous batching: on a CPU or a single GPU with small models that is the simple thing
that keeps every core busy).

Semantics follow vLLM's, which is what verl and ``afm_agent`` expect:

* the returned ids are exactly the sampled ids; a stop string ends generation after the token that completes it,
  and that token is kept (``include_stop_str_in_output``; ids are never trimmed);
* an end-of-sequence id (the model's ``generation_config`` and tokenizer EOS, plus ``stop_token_ids``) is kept and
  ends the row unless ``ignore_eos``;
* ``max_tokens`` is capped by ``max_model_len - len(prompt)``; a prompt that leaves no room is an error;
* log-probabilities are of the sampled token under ``softmax(logits / temperature)`` (raw logits at temperature 0),
  the distribution verl's actor recomputes, so the rollout/trainer log-prob gap measures only numerics;
* a request's ``seed`` (vLLM's per-request seed) fixes its draws; without one, its draws come from the engine's seed,
  its prompt and how many identical prompts came before it (:mod:`afm.common.row_sampling`): what a request samples
  does not depend on which requests shared its batch (up to floating point across batch shapes). A DAPO run is still
  not reproducible: verl picks each step's groups as they finish (docs/rl.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from afm.common.row_sampling import SeedBook, sample_rows

logger = logging.getLogger(__name__)


@torch.no_grad()
def weights_checksum(model: torch.nn.Module) -> str:
    """SHA-256 over every tensor of the state dict (name, float64 bytes): equal on two models iff their weights are."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().to("cpu", torch.float64).contiguous().numpy().tobytes())
    return h.hexdigest()


@dataclass
class Request:
    """One generation request and its per-row sampling settings."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: tuple[str, ...] = ()
    stop_ids: frozenset[int] = frozenset()
    want_logprobs: bool = False
    generator: torch.Generator | None = None  # this request's draws (afm.common.row_sampling)
    future: asyncio.Future | None = None
    loop: asyncio.AbstractEventLoop | None = None


@dataclass
class Result:
    ids: list[int]
    logprobs: list[float] | None
    finish: str  # stop | eos | length | aborted
    extra: dict[str, Any] = field(default_factory=dict)


class HFEngine:
    """A transformers causal LM that samples batches of requests (see the module docstring)."""

    def __init__(self, model_path: str, *, device: str = "cpu", dtype: str | torch.dtype = "float32",
                 max_model_len: int = 32768, max_batch_size: int = 64, seed: int = 0,
                 attn_implementation: str = "sdpa", trust_remote_code: bool = False) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        self.device = torch.device(device)
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=self.dtype, attn_implementation=attn_implementation,
            trust_remote_code=trust_remote_code).to(self.device).eval()
        eos: set[int] = set()
        try:
            gen = GenerationConfig.from_pretrained(model_path)
            ids = gen.eos_token_id
            eos.update([ids] if isinstance(ids, int) else list(ids or []))
        except OSError:
            pass
        if self.tokenizer.eos_token_id is not None:
            eos.add(int(self.tokenizer.eos_token_id))
        self.eos_ids = frozenset(eos)
        self.pad_id = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                          else next(iter(self.eos_ids), 0))
        self.max_model_len = int(max_model_len)
        self.max_batch_size = int(max_batch_size)
        self.seeds = SeedBook(int(seed))
        self._queue: list[Request] = []
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        # Held while a batch runs or weights change: weights never change in the middle of a batch.
        self._model_lock = threading.Lock()
        self._abort = threading.Event()
        self.batches = 0
        self.batch_sizes: list[int] = []
        self.tokens_generated = 0
        self.busy_s = 0.0  # seconds spent decoding batches

    # ---- requests ---------------------------------------------------------------------------------------------
    def make_request(self, prompt_ids: Sequence[int], params: dict[str, Any]) -> Request:
        """A :class:`Request` from verl's ``sampling_params`` dict (vLLM names)."""
        prompt = [int(i) for i in prompt_ids]
        room = self.max_model_len - len(prompt)
        if room < 1:
            raise ValueError(f"prompt length ({len(prompt)}) leaves no room to generate within max_model_len "
                             f"({self.max_model_len})")
        max_tokens = params.get("max_tokens", params.get("max_new_tokens"))
        max_tokens = room if max_tokens is None else max(1, min(int(max_tokens), room))
        stop = params.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(str(s) for s in stop)
        stop_ids = set(int(i) for i in (params.get("stop_token_ids") or ()))
        if not params.get("ignore_eos", False):
            stop_ids |= self.eos_ids
        top_k = params.get("top_k")
        seed = params.get("seed")
        generator = (torch.Generator().manual_seed(int(seed)) if seed is not None
                     else self.seeds.generator(prompt))
        return Request(prompt_ids=prompt, max_tokens=max_tokens, generator=generator,
                       temperature=float(params.get("temperature", 1.0)),
                       top_p=float(params.get("top_p", 1.0)),
                       top_k=-1 if top_k is None else int(top_k),
                       stop=stop, stop_ids=frozenset(stop_ids),
                       want_logprobs=bool(params.get("logprobs")))

    async def generate(self, prompt_ids: Sequence[int], params: dict[str, Any]) -> Result:
        """Queue one request and wait for its result (batched with whatever else is queued)."""
        req = self.make_request(prompt_ids, params)
        loop = asyncio.get_running_loop()
        req.loop, req.future = loop, loop.create_future()
        self._queue.append(req)
        self._ensure_worker()
        assert self._wake is not None
        self._wake.set()
        return await req.future

    def _ensure_worker(self) -> None:
        if self._worker is None or self._worker.done():
            self._wake = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch, self._queue = self._queue[: self.max_batch_size], self._queue[self.max_batch_size:]
                try:
                    results = await asyncio.to_thread(self.run_batch, batch)
                except Exception as exc:
                    logger.exception("hf rollout batch failed")
                    for req in batch:
                        if req.future is not None and not req.future.done():
                            req.future.set_exception(exc)
                    continue
                for req, res in zip(batch, results, strict=True):
                    if req.future is not None and not req.future.done():
                        req.future.set_result(res)

    # ---- control ----------------------------------------------------------------------------------------------
    def abort_running(self) -> None:
        """Make the running batch return what it has (finish ``aborted``)."""
        self._abort.set()

    def pending(self) -> int:
        return len(self._queue)

    @torch.no_grad()
    def load_weights(self, named: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Copy named tensors into the model (trainer names; tied weights share storage). Returns the count."""
        # state_dict keeps both names of tied weights (lm_head.weight and model.embed_tokens.weight)
        params = dict(self.model.state_dict(keep_vars=True))
        n = 0
        with self._model_lock:
            for name, tensor in named:
                target = params.get(name)
                if target is None:
                    raise KeyError(f"hf rollout: the trainer sent weight {name!r}, which the rollout model does not "
                                   f"have (first names: {list(params)[:5]})")
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ValueError(f"hf rollout: weight {name!r} has shape {tuple(tensor.shape)} from the "
                                     f"trainer, {tuple(target.shape)} in the rollout model")
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))
                n += 1
        return n

    def checksum(self) -> str:
        """:func:`weights_checksum` of the served model."""
        with self._model_lock:
            return weights_checksum(self.model)

    def to(self, device: str) -> None:
        """Move the model (sleep/wake on a GPU shared with the trainer)."""
        with self._model_lock:
            self.model.to(device)
            self.device = torch.device(device)

    # ---- decoding ---------------------------------------------------------------------------------------------
    def _sample(self, logits: torch.Tensor, reqs: list[Request]) -> tuple[torch.Tensor, torch.Tensor]:
        """Next ids and their log-probs for a [B, V] logits batch, each row with its own settings."""
        logits = logits.float()
        temps = torch.tensor([r.temperature for r in reqs], device=logits.device)
        greedy = temps <= 0
        scaled = logits / torch.where(greedy, torch.ones_like(temps), temps).unsqueeze(-1)
        vocab = scaled.shape[-1]
        filtered = scaled
        if any(0 < r.top_k < vocab or r.top_p < 1.0 for r in reqs):
            filtered = scaled.clone()
            for i, r in enumerate(reqs):
                if 0 < r.top_k < vocab:
                    kth = torch.topk(filtered[i], r.top_k).values[-1]
                    filtered[i][filtered[i] < kth] = float("-inf")
                if r.top_p < 1.0:
                    sorted_logits, order = torch.sort(filtered[i], descending=True)
                    cum = torch.softmax(sorted_logits, -1).cumsum(-1)
                    drop = cum - torch.softmax(sorted_logits, -1) >= r.top_p
                    filtered[i][order[drop]] = float("-inf")
        if bool(greedy.all()):  # validation and evaluations: no draw to make
            ids = logits.argmax(-1)
        else:
            probs = torch.softmax(filtered, dim=-1)
            sampled = sample_rows(probs, [r.generator if r.generator is not None
                                         else self.seeds.generator(r.prompt_ids) for r in reqs])
            ids = torch.where(greedy, logits.argmax(-1), sampled)
        # The log-prob of the chosen id under the temperature-scaled distribution, without a [B, V] log_softmax.
        chosen = scaled.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        return ids, chosen - torch.logsumexp(scaled, dim=-1)

    def _hit_stop(self, ids: list[int], stops: tuple[str, ...], tail_tokens: int) -> bool:
        text = self.tokenizer.decode(ids[-tail_tokens:], skip_special_tokens=False)
        return any(s in text for s in stops)

    @torch.no_grad()
    def run_batch(self, reqs: list[Request]) -> list[Result]:
        """Decode one batch to completion (synchronous; runs in a worker thread)."""
        with self._model_lock:
            self._abort.clear()
            t0 = time.perf_counter()
            out = self._decode(reqs)
            self.busy_s += time.perf_counter() - t0
        self.batches += 1
        self.batch_sizes.append(len(reqs))
        self.tokens_generated += sum(len(r.ids) for r in out)
        return out

    def _decode(self, reqs: list[Request]) -> list[Result]:
        dev = self.device
        b = len(reqs)
        width = max(len(r.prompt_ids) for r in reqs)
        input_ids = torch.full((b, width), self.pad_id, dtype=torch.long, device=dev)
        mask = torch.zeros((b, width), dtype=torch.long, device=dev)
        for i, r in enumerate(reqs):
            n = len(r.prompt_ids)
            input_ids[i, width - n:] = torch.tensor(r.prompt_ids, dtype=torch.long, device=dev)
            mask[i, width - n:] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        # A stop string spans at most len(stop) tokens (every token decodes to >= 1 character) plus one token that
        # completes it; decoding that tail is enough to see it.
        tails = [max((len(s) for s in r.stop), default=0) + 2 for r in reqs]
        outs: list[list[int]] = [[] for _ in reqs]
        lps: list[list[float]] = [[] for _ in reqs]
        finish: list[str | None] = [None] * b
        past = None
        step_ids, step_mask, step_pos = input_ids, mask, positions
        max_steps = max(r.max_tokens for r in reqs)
        for _ in range(max_steps):
            res = self.model(input_ids=step_ids, attention_mask=step_mask, position_ids=step_pos,
                             past_key_values=past, use_cache=True, logits_to_keep=1)
            past = res.past_key_values
            next_ids, next_lps = self._sample(res.logits[:, -1, :], reqs)
            ids_list, lps_list = next_ids.tolist(), next_lps.tolist()
            for i, r in enumerate(reqs):
                if finish[i] is not None:
                    continue
                tok = int(ids_list[i])
                outs[i].append(tok)
                lps[i].append(float(lps_list[i]))
                if tok in r.stop_ids:
                    finish[i] = "eos"
                elif r.stop and self._hit_stop(outs[i], r.stop, tails[i]):
                    finish[i] = "stop"
                elif len(outs[i]) >= r.max_tokens:
                    finish[i] = "length"
            if all(f is not None for f in finish):
                break
            if self._abort.is_set():
                finish = [f or "aborted" for f in finish]
                break
            # Finished rows keep decoding a pad token (their output is no longer recorded): a static batch.
            feed = [outs[i][-1] if finish[i] is None else self.pad_id for i in range(b)]
            step_ids = torch.tensor(feed, dtype=torch.long, device=dev).unsqueeze(-1)
            step_mask = torch.cat([step_mask, torch.ones((b, 1), dtype=torch.long, device=dev)], dim=-1)
            step_pos = step_pos[:, -1:] + 1
        return [Result(ids=outs[i], logprobs=lps[i] if reqs[i].want_logprobs else None,
                       finish=finish[i] or "length") for i in range(b)]
