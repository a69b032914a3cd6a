"""In-process Hugging Face model backend, batched across concurrent trajectories (CPU tests, small runs).

Requests that arrive within ``batch_wait_s`` of each other and share sampling settings are generated in one
left-padded ``model.generate`` call on a worker thread, so the event loop keeps running tools meanwhile.

Each sampled request draws from its own generator (:mod:`afm.common.row_sampling`): with ``sampling.seed`` set, from
that seed and the prompt (the same request gives the same ids, as vLLM's per-request seed does); without one, from
the backend's ``seed``, the prompt and how many identical prompts came before. Which requests shared a batch, and so
the machine's load, does not change what is sampled.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from afm.agent.backend import Generation, SamplingParams, find_stop
from afm.agent.tokens import TokenizerAdapter
from afm.common.row_sampling import SeedBook, request_seed


class HFBackend:
    """``generate(prompt_ids, sampling)`` on a local ``transformers`` causal LM."""

    def __init__(self, model: Any, tokenizer: TokenizerAdapter, *, max_batch: int = 8, batch_wait_s: float = 0.005,
                 seed: int = 0) -> None:
        self.model = model.eval()
        self.tok = tokenizer
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self.seed = seed
        self.seeds = SeedBook(seed)
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._lock = threading.Lock()  # one generate at a time on the model
        # Set by aclose(): a generate running in its worker thread stops at its next token. A thread cannot be
        # cancelled, and asyncio.run waits for it at exit, so without this SIGTERM waited for the whole batch.
        self._abort = threading.Event()
        self.batches = 0
        self.batched_requests = 0
        self.aborted_batches = 0

    @classmethod
    def from_pretrained(cls, path: str, **kw: Any) -> HFBackend:
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        return cls(model, TokenizerAdapter.from_pretrained(path), **kw)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._worker is None or self._worker.done():
            self._abort.clear()
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._serve())
        fut: asyncio.Future = loop.create_future()
        ids = list(prompt_ids)
        # the draw is fixed here, in arrival order, not when the batch forms
        seed = (request_seed(sampling.seed, ids, 0) if sampling.seed is not None else self.seeds.seed_for(ids))
        await self._queue.put((ids, sampling, seed, fut))
        return await fut

    async def _serve(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self.batch_wait_s
            while len(batch) < self.max_batch:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                except TimeoutError:
                    break
            # requests that differ only in their seeds share a batch: each row draws from its own generator
            groups: dict[SamplingParams, list[tuple[list[int], int, asyncio.Future]]] = {}
            for ids, sampling, seed, fut in batch:
                if not fut.cancelled():
                    groups.setdefault(sampling.with_(seed=None), []).append((ids, seed, fut))
            for sampling, items in groups.items():
                try:
                    outs = await asyncio.to_thread(self._generate_batch, [i for i, _, _ in items], sampling,
                                                   [s for _, s, _ in items])
                except Exception as exc:
                    for _, _, fut in items:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (_, _, fut), out in zip(items, outs, strict=True):
                    if not fut.done():
                        fut.set_result(out)

    def _generate_batch(self, prompts: list[list[int]], sampling: SamplingParams,
                        seeds: list[int] | None = None) -> list[Generation]:
        import torch
        from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

        abort = self._abort

        class _Aborted(StoppingCriteria):
            def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
                return torch.full((input_ids.shape[0],), abort.is_set(), dtype=torch.bool, device=input_ids.device)

        with self._lock:
            self.batches += 1
            self.batched_requests += len(prompts)
            width = max(len(p) for p in prompts)
            pad = self.tok.pad_id
            input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
            attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
            # sampling happens in RowSampler, one generator a row; generate() then takes the one id it leaves
            kwargs: dict[str, Any] = {
                "max_new_tokens": sampling.max_new_tokens, "do_sample": False,
                "eos_token_id": sorted(self.tok.eos_ids), "pad_token_id": pad,
                "repetition_penalty": sampling.repetition_penalty,
                "stopping_criteria": StoppingCriteriaList([_Aborted()]),
            }
            if sampling.temperature > 0:
                if seeds is None:
                    seeds = [self.seeds.seed_for(p) for p in prompts]
                kwargs["logits_processor"] = LogitsProcessorList([RowSampler(
                    [torch.Generator().manual_seed(s) for s in seeds], sampling.temperature, sampling.top_p,
                    sampling.top_k)])
            if sampling.stop:
                kwargs.update(stop_strings=list(sampling.stop), tokenizer=self.tok.tok)
            with torch.no_grad():
                out = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
            if abort.is_set():
                self.aborted_batches += 1
                raise RuntimeError("generation aborted: the backend was closed")
            return [self._trim(row[width:].tolist(), sampling) for row in out]

    def _trim(self, ids: list[int], sampling: SamplingParams) -> Generation:
        """Cut a generated row at its EOS or its first stop string (padding after a finished row goes)."""
        for k, tid in enumerate(ids):
            if tid in self.tok.eos_ids:
                kept = ids[: k + 1]
                return Generation(kept, "eos", self.tok.decode(kept))
            if sampling.stop and ">" in self.tok.decode([tid]):
                text = self.tok.decode(ids[: k + 1])
                hit = find_stop(text, sampling.stop)
                if hit is not None:
                    kept = ids[: k + 1]
                    return Generation(kept, "stop", text, stop_str=hit[1])
        return Generation(ids, "length", self.tok.decode(ids))

    async def aclose(self) -> None:
        self._abort.set()
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
            self._worker = None


class RowSampler:
    """A ``generate`` logits processor that samples each row with its own generator and leaves only that id.

    Temperature, then top-k (``top_k`` <= 0: none, not transformers' default 50), then top-p, as transformers'
    warpers apply them; penalties were applied before it. Called with ``do_sample=False``, so generate's argmax takes
    the sampled id and the global random state is never touched."""

    def __init__(self, generators: list[Any], temperature: float, top_p: float = 1.0, top_k: int = -1) -> None:
        from transformers import TopKLogitsWarper, TopPLogitsWarper

        self.generators = generators
        self.temperature = float(temperature)
        self.warpers = ([TopKLogitsWarper(top_k=int(top_k))] if top_k > 0 else []) + \
            ([TopPLogitsWarper(top_p=float(top_p))] if top_p < 1.0 else [])

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        from afm.common.row_sampling import sample_rows

        scores = scores.float() / self.temperature
        for warp in self.warpers:
            scores = warp(input_ids, scores)
        ids = sample_rows(torch.softmax(scores, dim=-1), self.generators)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, ids.unsqueeze(-1), 0.0)
