"""Completions backend for serving engines (vLLM, SGLang, llama.cpp's llama-server, ...), token ids in and out.

The prompt is sent as token ids, in the dialect of the engine (``afm.agent.engines``: vLLM/SGLang's
``/v1/completions``, llama-server's native ``/completion``; ``engine="auto"`` asks the server which it is). The
sampled token ids are taken from the answer where the engine returns them, stop string included. Otherwise the text
is tokenised once and the generation is marked ``ids_source="retokenized"``; :attr:`OpenAIBackend.fallback_note`
then says so in one line, which the CLIs print once per run and put in the run's summary and report.

A server that refuses token-id prompts (llama-cpp-python's answers HTTP 500) is probed once, in the generic
``openai`` dialect only: the refused request is sent again as text and, if that works and the ids are refused a
second time, every later prompt goes as text (said once in the log; such servers return no ids either, so the
retokenized count covers those samples in the summary and the report headline).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from typing import Any

import httpx

from afm.agent.backend import EngineRefused, Generation, SamplingParams
from afm.agent.engines import DIALECTS, ENGINES, Dialect, Parsed, detect, server_root
from afm.agent.tokens import TokenizerAdapter

logger = logging.getLogger("afm.agent")


class BackendError(RuntimeError):
    """The model server failed after all retries (the message says how)."""


# vLLM's HTTP validation caps the stop strings of a request (VLLM_MAX_STOP_STRINGS, 4 by default in 0.31-0.32); its
# 400 names the field and the cap. afm sends one per enabled tool plus </answer>: 5 with the four tools.
_STOP_CAP = re.compile(r"stop.*?at most (\d+) items", re.IGNORECASE | re.DOTALL)
# A 4xx about this prompt's length (llama-server's exceed_context_size_error, vLLM's "maximum context length" and
# "longer than the maximum model length", OpenAI's context_length_exceeded): the next prompt may fit, so it fails
# this sample only, unretried, where every other 4xx stops the run
_PROMPT_TOO_LONG = re.compile(r"exceed_context_size|context_length_exceeded|maximum context length"
                              r"|longer than the maximum model length|exceeds the available context size",
                              re.IGNORECASE)


def prompt_too_long(status: int, text: str) -> bool:
    """Whether an engine's refusal is about this one prompt's length (a per-sample failure, not the run's)."""
    return status in (400, 413, 422) and bool(_PROMPT_TOO_LONG.search(text[:4000]))


def refusal_message(base_url: str, status: int, text: str, stops: int) -> str:
    """One line for an engine's refusal of afm's request, saying what to do where afm knows."""
    cap = _STOP_CAP.search(text)
    if cap and status == 400:
        return (f"the engine at {base_url} takes at most {cap.group(1)} stop strings a request and afm sends {stops} "
                "(the closing tag of each enabled tool and </answer>): start vLLM with VLLM_MAX_STOP_STRINGS="
                f"{max(stops, 8)} or more (evaluation/serve_model.sh sets 32), or enable fewer tools")
    return f"the engine at {base_url} refused afm's request: HTTP {status}: {' '.join(text.split())[:400]}"


class OpenAIBackend:
    """Async client with bounded concurrency, retries with backoff and a per-request timeout.

    ``engine`` names the server's dialect (``afm.agent.engines.ENGINES``); ``auto`` asks the server on the first
    request. ``retokenized`` counts the generations whose ids were rebuilt from text.
    """

    def __init__(self, base_url: str, model: str, tokenizer: TokenizerAdapter, *, api_key: str = "EMPTY",
                 concurrency: int = 64, timeout_s: float = 600.0, retries: int = 3,
                 extra_body: dict[str, Any] | None = None, engine: str = "auto") -> None:
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tok = tokenizer
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.extra_body = dict(extra_body or {})
        self.engine = engine
        self.dialect: Dialect | None = None if engine == "auto" else DIALECTS[engine]
        self._sem = asyncio.Semaphore(concurrency)
        self._detect_lock = asyncio.Lock()
        self._client: httpx.AsyncClient | None = None
        self.retokenized = 0
        self.generations = 0
        self.id_prompts: bool | None = None  # whether the server takes token-id prompts (None: not yet refused)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, headers={"Authorization": f"Bearer {self.api_key}"},
                                             limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200))
        return self._client

    async def resolve_dialect(self) -> Dialect:
        """The engine's dialect, asked of the server once when ``engine="auto"`` (said once in the log)."""
        if self.dialect is not None:
            return self.dialect
        async with self._detect_lock:
            if self.dialect is None:
                self.dialect = await detect(self._http(), self.base_url)
                logger.info("engine at %s: %s", self.base_url, self.dialect.describe)
        return self.dialect

    @property
    def fallback_note(self) -> str | None:
        """One line when some generations' token ids were rebuilt from text (not the model's own), else None."""
        if not self.retokenized:
            return None
        name = self.dialect.name if self.dialect else self.engine
        refused = "; it refused token-id prompts, so prompts were sent as text" if self.id_prompts is False else ""
        return (f"token ids retokenized from text for {self.retokenized} of {self.generations} generations: the "
                f"engine ({name} dialect at {self.base_url}) returned no sampled ids{refused}, so training on these "
                "trajectories is not token-in-token-out (serve with vLLM, SGLang or llama-server, or pass --engine)")

    def request_body(self, prompt_ids: list[int], sampling: SamplingParams, dialect: Dialect | None = None,
                     n: int = 1) -> dict[str, Any]:
        body = (dialect or self.dialect or DIALECTS["openai"]).request_body(self.model, prompt_ids, sampling, n)
        body.update(self.extra_body)
        return body

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        return (await self.generate_n(prompt_ids, sampling, 1))[0]

    async def generate_n(self, prompt_ids: list[int], sampling: SamplingParams, n: int) -> list[Generation]:
        """``n`` samples for one prompt in one request (engines whose dialect allows ``n > 1``; else n requests)."""
        dialect = await self._dialect_or_retry()
        if n > 1 and not dialect.multi_sample:
            return [g for _ in range(n) for g in await self.generate_n(prompt_ids, sampling, 1)]
        body = self.request_body(prompt_ids, sampling, dialect, n)
        # OpenAI paths hang off the base URL as given; a native endpoint off the server's root
        url = (self.base_url + dialect.path.removeprefix("/v1") if dialect.path.startswith("/v1/")
               else server_root(self.base_url) + dialect.path)
        last: str = ""
        async with self._sem:
            for attempt in range(self.retries + 1):
                if self.id_prompts is False and isinstance(body.get("prompt"), list):
                    body = {**body, "prompt": self.tok.decode(prompt_ids)}
                try:
                    resp = await self._http().post(url, json=body)
                except (httpx.TransportError, httpx.TimeoutException) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                else:
                    resp = await self._text_if_ids_refused(dialect, url, body, prompt_ids, resp)
                    if resp.status_code == 200:
                        try:
                            parsed = dialect.parse(resp.json(), sampling)
                            if len(parsed) != n:
                                raise ValueError(f"{len(parsed)} completions for n={n}")
                            return [self._generation(p) for p in parsed]
                        except (ValueError, KeyError, IndexError, TypeError) as exc:
                            last = f"unreadable response ({exc}): {resp.text[:300]}"
                    elif resp.status_code in (408, 409, 429) or resp.status_code >= 500:
                        last = f"HTTP {resp.status_code}: {resp.text[:300]}"
                    elif prompt_too_long(resp.status_code, resp.text):  # this sample's prompt: no retry helps
                        raise BackendError(f"the engine refused a prompt of {len(prompt_ids)} tokens as too long: "
                                           f"HTTP {resp.status_code}: {' '.join(resp.text.split())[:300]}")
                    else:  # a 4xx other than rate limits: every sample would get it, so the run stops here
                        raise EngineRefused(refusal_message(self.base_url, resp.status_code, resp.text,
                                                            len(sampling.stop)))
                if attempt < self.retries:
                    await asyncio.sleep(min(30.0, 0.5 * 2**attempt) * (0.5 + random.random()))
        raise BackendError(f"model server failed after {self.retries + 1} attempts: {last}")

    async def _text_if_ids_refused(self, dialect: Dialect, url: str, body: dict[str, Any], prompt_ids: list[int],
                                   resp: httpx.Response) -> httpx.Response:
        """``resp``, or the answer to the same request with the prompt as text when the server refused the ids and
        took the text (a generic OpenAI server not yet known to take ids; llama-cpp-python's answers 500 to ids).
        Probed once a run: when the ids go through the second time, the first failure was the server's own and is
        returned as it was (the caller's retries decide), so a failing server is never hidden behind the probe."""
        # only a 500 (what llama-cpp-python answers to ids); 502-504 and rate limits say the server is busy
        if (resp.status_code != 500 or self.id_prompts is not None
                or dialect.name != "openai" or not isinstance(body.get("prompt"), list)):
            return resp
        try:
            as_text = await self._http().post(url, json={**body, "prompt": self.tok.decode(prompt_ids)})
            if as_text.status_code != 200:
                return resp  # text fails too: the server is failing, not refusing the prompt's form
            # ids once more, one token's worth: a server that failed once by chance must not turn the run to text
            again = await self._http().post(url, json={**body, "max_tokens": 1, "n": 1})
        except (httpx.TransportError, httpx.TimeoutException):
            return resp
        if again.status_code == 200:
            self.id_prompts = True
            return resp
        if self.id_prompts is None:
            self.id_prompts = False
            logger.warning("afm: the engine at %s refused token-id prompts (HTTP %d twice) and took the same prompt "
                           "as text: prompts are sent as text from now on (the server tokenizes them itself); the "
                           "run's summary and report count these samples", self.base_url, resp.status_code)
        return as_text

    async def _dialect_or_retry(self) -> Dialect:
        """The dialect; a server that cannot be reached yet is asked again (with the request's retries)."""
        for attempt in range(self.retries + 1):
            try:
                return await self.resolve_dialect()
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                if attempt == self.retries:
                    raise BackendError(f"model server at {self.base_url} cannot be reached: "
                                       f"{type(exc).__name__}: {exc}") from exc
                await asyncio.sleep(min(30.0, 0.5 * 2**attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    def parse(self, data: dict[str, Any], sampling: SamplingParams) -> Generation:
        """The first completion of an answer in this backend's dialect (generic OpenAI until one is known)."""
        return self._generation((self.dialect or DIALECTS["openai"]).parse(data, sampling)[0])

    def _generation(self, p: Parsed) -> Generation:
        self.generations += 1
        ids, finish, text = p.ids, p.finish, p.text
        source = "sampled"
        if ids is None:
            ids = self.tok.encode(text)
            source = "retokenized"
            self.retokenized += 1
            if self.retokenized == 1:  # said once per run; the summary and the eval report count them
                name = self.dialect.name if self.dialect else self.engine
                logger.warning("afm: the engine (%s dialect at %s) returned no sampled token ids: they are "
                               "retokenized from the text, so these trajectories are not token-in-token-out; the "
                               "run's summary counts them", name, self.base_url)
            if finish == "eos" and (not ids or ids[-1] not in self.tok.eos_ids):
                ids.append(min(self.tok.eos_ids))
        stop_token = p.meta.get("stop_reason")
        if (finish == "eos" and ids and ids[-1] not in self.tok.eos_ids
                and not (isinstance(stop_token, int) and ids[-1] == stop_token)):
            # an engine that drops the EOS from its ids (vLLM 0.31-0.32 keeps it, as it keeps a stop token it names
            # in stop_reason, such as a second end-of-turn id of the model's generation config)
            ids = [*ids, min(self.tok.eos_ids)]
        return Generation(ids, finish, self.tok.decode(ids) if source == "sampled" else text, p.stop_str,  # type: ignore[arg-type]
                          source, meta=dict(p.meta))

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
