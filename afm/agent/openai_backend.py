"""OpenAI-compatible completions backend (vLLM, SGLang, llama.cpp server, ...), token ids in and out.

The prompt is sent as token ids. Sampled token ids are taken from the response where the server returns them:
vLLM's ``choices[i].token_ids`` (``return_token_ids``), or logprob tokens rendered as ``token_id:N``
(``return_tokens_as_token_ids``), or SGLang's ``output_ids``. Otherwise the text is tokenised once and the
generation is marked ``ids_source="retokenized"``. Stop strings are kept in the output
(``include_stop_str_in_output``; when a server strips them anyway, the matched stop is re-appended).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx

from afm.agent.backend import Generation, SamplingParams
from afm.agent.tokens import TokenizerAdapter


class BackendError(RuntimeError):
    """The model server failed after all retries (the message says how)."""


class OpenAIBackend:
    """Async client with bounded concurrency, retries with backoff and a per-request timeout."""

    def __init__(self, base_url: str, model: str, tokenizer: TokenizerAdapter, *, api_key: str = "EMPTY",
                 concurrency: int = 64, timeout_s: float = 600.0, retries: int = 3,
                 extra_body: dict[str, Any] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tok = tokenizer
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.extra_body = dict(extra_body or {})
        self._sem = asyncio.Semaphore(concurrency)
        self._client: httpx.AsyncClient | None = None
        self.retokenized = 0

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, headers={"Authorization": f"Bearer {self.api_key}"},
                                             limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200))
        return self._client

    def request_body(self, prompt_ids: list[int], sampling: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model, "prompt": prompt_ids, "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature, "top_p": sampling.top_p, "n": 1,
            "stop": list(sampling.stop) or None, "include_stop_str_in_output": True, "skip_special_tokens": False,
            "return_token_ids": True, "logprobs": 0, "return_tokens_as_token_ids": True,
            "presence_penalty": sampling.presence_penalty, "frequency_penalty": sampling.frequency_penalty,
        }
        if sampling.top_k > 0:
            body["top_k"] = sampling.top_k
        if sampling.repetition_penalty != 1.0:
            body["repetition_penalty"] = sampling.repetition_penalty
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        body.update(self.extra_body)
        return body

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        body = self.request_body(prompt_ids, sampling)
        last: str = ""
        async with self._sem:
            for attempt in range(self.retries + 1):
                try:
                    resp = await self._http().post(f"{self.base_url}/completions", json=body)
                except (httpx.TransportError, httpx.TimeoutException) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                else:
                    if resp.status_code == 200:
                        try:
                            return self.parse(resp.json(), sampling)
                        except (ValueError, KeyError, IndexError, TypeError) as exc:
                            last = f"unreadable response ({exc}): {resp.text[:300]}"
                    elif resp.status_code in (408, 409, 429) or resp.status_code >= 500:
                        last = f"HTTP {resp.status_code}: {resp.text[:300]}"
                    else:  # a 4xx other than rate limits will not get better by retrying
                        raise BackendError(f"model server refused the request: HTTP {resp.status_code}: "
                                           f"{resp.text[:500]}")
                if attempt < self.retries:
                    await asyncio.sleep(min(30.0, 0.5 * 2**attempt) * (0.5 + random.random()))
        raise BackendError(f"model server failed after {self.retries + 1} attempts: {last}")

    def parse(self, data: dict[str, Any], sampling: SamplingParams) -> Generation:
        choice = data["choices"][0]
        text = choice.get("text") or ""
        reason = choice.get("finish_reason")
        matched = choice.get("stop_reason", choice.get("matched_stop"))
        ids = _token_ids(choice)
        source = "sampled"
        if reason == "length":
            finish = "length"
            stop_str = None
        elif isinstance(matched, str) and matched:
            finish, stop_str = "stop", matched
            if not text.endswith(matched) and ids is None:
                text += matched  # the server stripped the stop string despite include_stop_str_in_output
        else:
            # finish "stop" without a matched string: the model's end-of-sequence token.
            stop_str = next((s for s in sampling.stop if text.endswith(s)), None)
            finish = "stop" if stop_str else "eos"
        if ids is None:
            ids = self.tok.encode(text)
            source = "retokenized"
            self.retokenized += 1
            if finish == "eos" and (not ids or ids[-1] not in self.tok.eos_ids):
                ids.append(min(self.tok.eos_ids))
        if finish == "eos" and ids and ids[-1] not in self.tok.eos_ids and reason != "length":
            ids = [*ids, min(self.tok.eos_ids)]  # servers drop the EOS from the output; the context keeps it
        return Generation(ids, finish, self.tok.decode(ids) if source == "sampled" else text, stop_str, source,
                          meta={"finish_reason": reason, "stop_reason": matched})

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _token_ids(choice: dict[str, Any]) -> list[int] | None:
    for key in ("token_ids", "output_ids"):
        ids = choice.get(key)
        if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
            return list(ids)
    lp = choice.get("logprobs") or {}
    toks = lp.get("tokens") if isinstance(lp, dict) else None
    if toks and all(isinstance(t, str) and t.startswith("token_id:") for t in toks):
        return [int(t.split(":", 1)[1]) for t in toks]
    return None
