"""In-process Hugging Face model backend, batched across concurrent trajectories (CPU tests, small runs).

Requests that arrive within ``batch_wait_s`` of each other and share sampling settings are generated in one
left-padded ``model.generate`` call on a worker thread, so the event loop keeps running tools meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from afm.agent.backend import Generation, SamplingParams, find_stop
from afm.agent.tokens import TokenizerAdapter


class HFBackend:
    """``generate(prompt_ids, sampling)`` on a local ``transformers`` causal LM."""

    def __init__(self, model: Any, tokenizer: TokenizerAdapter, *, max_batch: int = 8, batch_wait_s: float = 0.005,
                 seed: int = 0) -> None:
        self.model = model.eval()
        self.tok = tokenizer
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self.seed = seed
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
        await self._queue.put((list(prompt_ids), sampling, fut))
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
            groups: dict[SamplingParams, list[tuple[list[int], asyncio.Future]]] = {}
            for ids, sampling, fut in batch:
                if not fut.cancelled():
                    groups.setdefault(sampling, []).append((ids, fut))
            for sampling, items in groups.items():
                try:
                    outs = await asyncio.to_thread(self._generate_batch, [i for i, _ in items], sampling)
                except Exception as exc:
                    for _, fut in items:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (_, fut), out in zip(items, outs, strict=True):
                    if not fut.done():
                        fut.set_result(out)

    def _generate_batch(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

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
            do_sample = sampling.temperature > 0
            kwargs: dict[str, Any] = {
                "max_new_tokens": sampling.max_new_tokens, "do_sample": do_sample,
                "eos_token_id": sorted(self.tok.eos_ids), "pad_token_id": pad,
                "repetition_penalty": sampling.repetition_penalty,
                "stopping_criteria": StoppingCriteriaList([_Aborted()]),
            }
            if do_sample:
                # top_k 0, not left out, for "no top-k": transformers then takes the model's generation_config or its
                # own default (50), a cut the caller did not ask for and DAPO's rollouts do not make
                kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p,
                              top_k=sampling.top_k if sampling.top_k > 0 else 0)
            if sampling.stop:
                kwargs.update(stop_strings=list(sampling.stop), tokenizer=self.tok.tok)
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
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
