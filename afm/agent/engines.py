"""Serving engines' completion dialects, declared in one place: what to send, and how to read what comes back.

Engines differ in exactly the things a token-level agent needs:

========== ============================ ===================================== ========== =====================
dialect    endpoint                     sampled ids (stop string included?)   stop text  id prompts / ``n>1``
========== ============================ ===================================== ========== =====================
vllm       ``/v1/completions``          ``token_ids`` (yes)                   kept       yes / yes
sglang     ``/v1/completions``          ``output_ids`` (yes)                  kept       yes / yes
llamacpp   ``/completion`` (native)     ``tokens`` (yes, the EOS too)         stripped   yes / yes
openai     ``/v1/completions``          none: retokenized                     unknown    assumed / assumed
========== ============================ ===================================== ========== =====================

vLLM keeps the stop string when asked (``include_stop_str_in_output``) and names it in ``stop_reason``; SGLang
names it in ``matched_stop``. llama.cpp's ``llama-server`` strips the stop string from the text on both of its
endpoints; its native ``/completion`` says which one matched (``stopping_word``, ``stop_type`` ``word``/``eos``/
``limit``) and, with ``return_tokens``, returns every sampled id including the stop string's tokens and the EOS.
Its OpenAI ``/v1/completions`` says neither: ``finish_reason`` is ``stop`` for an EOS and for a stop string alike,
and the ids in ``logprobs.content[i].id`` (``logprobs >= 1``) leave out the stop string's tokens, so afm talks to
llama-server through the native endpoint. ``openai`` is any other OpenAI-compatible server: the vLLM request and
every known place for ids and stops are tried, and the text is retokenized when no ids come back.

``--engine auto`` (the default) asks the server once which engine it is (``GET /props`` answers on llama-server
only; ``/v1/models`` says ``owned_by`` ``vllm`` or ``sglang``) and falls back to ``openai``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from afm.agent.backend import SamplingParams

ENGINES = ("auto", "vllm", "sglang", "llamacpp", "openai")


@dataclass(frozen=True)
class Parsed:
    """One completion read from an engine's answer, before the backend turns it into a ``Generation``.

    ``ids`` is None when the engine returned no token ids; ``finish`` is ``stop`` (``stop_str`` matched), ``eos``
    or ``length``; ``text`` ends with ``stop_str`` when one matched (re-appended where the engine cut it).
    """

    text: str
    ids: list[int] | None
    finish: str
    stop_str: str | None
    meta: dict[str, Any]


@dataclass(frozen=True)
class Dialect:
    """How one engine takes a completion request and answers it (see the module docstring's table)."""

    name: str
    path: str  # the completion endpoint, relative to the server root (the base URL without /v1)
    sampled_ids: bool  # the engine returns the sampled ids (token in, token out)
    stop_kept: bool  # the stop string stays in the returned text
    id_prompts: bool  # a prompt may be a list of token ids
    multi_sample: bool  # ``n > 1`` in one request
    describe: str  # one line for the console

    def request_body(self, model: str, prompt_ids: list[int], sampling: SamplingParams, n: int = 1) -> dict[str, Any]:
        """The JSON body of one completion request for ``prompt_ids``."""
        if self.name == "llamacpp":
            body: dict[str, Any] = {
                "prompt": prompt_ids, "n_predict": sampling.max_new_tokens, "temperature": sampling.temperature,
                "top_p": sampling.top_p, "top_k": max(sampling.top_k, 0), "min_p": 0.0,
                "stop": list(sampling.stop), "return_tokens": True, "cache_prompt": True, "n": n,
                "presence_penalty": sampling.presence_penalty, "frequency_penalty": sampling.frequency_penalty,
                "repeat_penalty": sampling.repetition_penalty, "stream": False,
            }
            if sampling.seed is not None:
                body["seed"] = sampling.seed
            return body
        body = {
            "model": model, "prompt": prompt_ids, "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature, "top_p": sampling.top_p, "n": n,
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
        return body

    def parse(self, data: Any, sampling: SamplingParams) -> list[Parsed]:
        """Every completion in an answer, in order (one per sample of ``n``)."""
        if self.name == "llamacpp":
            return [_parse_llamacpp(r) for r in (data if isinstance(data, list) else [data])]
        return [_parse_openai(c, sampling) for c in sorted(data["choices"], key=lambda c: c.get("index", 0))]


DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    Dialect("vllm", "/v1/completions", True, True, True, True,
            "vLLM /v1/completions: sampled ids (token_ids), stop strings kept"),
    Dialect("sglang", "/v1/completions", True, True, True, True,
            "SGLang /v1/completions: sampled ids (output_ids), stop strings named"),
    Dialect("llamacpp", "/completion", True, False, True, True,
            "llama.cpp native /completion: sampled ids (tokens) with stop tokens and EOS, stopping_word"),
    Dialect("openai", "/v1/completions", False, False, True, True,
            "generic OpenAI /v1/completions: ids and stop strings where the answer has them, else retokenized"),
)}


def server_root(base_url: str) -> str:
    """The server's root URL from an OpenAI base URL (``http://h:p/v1`` -> ``http://h:p``)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


async def detect(client: httpx.AsyncClient, base_url: str) -> Dialect:
    """Which engine serves ``base_url``: llama-server answers ``GET /props``; vLLM and SGLang name themselves as
    ``owned_by`` in ``/v1/models``; anything else is ``openai``. Raises ``httpx.TransportError`` when the server
    cannot be reached (the caller retries later rather than settle on a guess)."""
    root = server_root(base_url)
    resp = await client.get(f"{root}/props", timeout=10.0)
    if resp.status_code == 200:
        try:
            props = resp.json()
        except ValueError:
            props = {}
        if isinstance(props, dict) and "default_generation_settings" in props:
            return DIALECTS["llamacpp"]
    resp = await client.get(f"{base_url.rstrip('/')}/models", timeout=10.0)
    try:
        owners = {str(m.get("owned_by", "")).lower() for m in resp.json().get("data", [])}
    except (ValueError, AttributeError):
        owners = set()
    for name in ("vllm", "sglang"):
        if name in owners:
            return DIALECTS[name]
    return DIALECTS["openai"]


def _parse_llamacpp(r: dict[str, Any]) -> Parsed:
    text = r.get("content") or ""
    ids = r.get("tokens")
    ids = list(ids) if isinstance(ids, list) and all(isinstance(i, int) for i in ids) and ids else None
    kind = r.get("stop_type")
    stop_str: str | None = None
    if kind == "word" and r.get("stopping_word"):
        finish, stop_str = "stop", str(r["stopping_word"])
        text += stop_str  # llama-server cut it from the text; its tokens are in ``tokens``
    elif kind == "eos":
        finish = "eos"
    elif kind == "limit":
        finish = "length"
    else:
        raise ValueError(f"llama-server answer without a known stop_type ({kind!r})")
    return Parsed(text, ids, finish, stop_str, {"finish_reason": kind, "stop_reason": stop_str})


def _parse_openai(choice: dict[str, Any], sampling: SamplingParams) -> Parsed:
    text = choice.get("text") or ""
    reason = choice.get("finish_reason")
    matched = choice.get("stop_reason", choice.get("matched_stop"))
    ids = _openai_ids(choice)
    stop_str: str | None = None
    if reason == "length":
        finish = "length"
    elif isinstance(matched, str) and matched:
        finish, stop_str = "stop", matched
        if not text.endswith(matched) and ids is None:
            text += matched  # the server stripped the stop string despite include_stop_str_in_output
    else:
        # finish "stop" without a matched string: the model's end-of-sequence token (or, vLLM: an int stop_reason, a
        # stop token id such as another end-of-turn id of the generation config, which ends the ids), unless the
        # text still ends with a stop string (a server that keeps stops but does not name them).
        stop_str = next((s for s in sampling.stop if text.endswith(s)), None)
        finish = "stop" if stop_str else "eos"
    return Parsed(text, ids, finish, stop_str, {"finish_reason": reason, "stop_reason": matched})


def _openai_ids(choice: dict[str, Any]) -> list[int] | None:
    for key in ("token_ids", "output_ids"):
        ids = choice.get(key)
        if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
            return list(ids)
    lp = choice.get("logprobs") or {}
    toks = lp.get("tokens") if isinstance(lp, dict) else None
    if toks and all(isinstance(t, str) and t.startswith("token_id:") for t in toks):
        return [int(t.split(":", 1)[1]) for t in toks]
    return None
