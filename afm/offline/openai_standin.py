"""A scriptable OpenAI-compatible server for tests and benchmarks (judge, summary LLM, teacher models).

It is a real HTTP server (``python -m afm.offline.openai_standin --port N``) serving ``/v1/chat/completions``,
``/v1/completions`` and ``/v1/models``. Replies come from, in order:

1. the **queue** (``POST /_control/queue {"replies": [spec, ...]}``), consumed one reply per request;
2. **rules** (``POST /_control/rules {"rules": [spec, ...]}``): the first whose ``match`` regex is found in the
   request's text (all message contents, or the prompt) answers; ``times`` limits how often a rule applies;
3. the default reply (``--default-reply``; ``"{echo}"`` echoes the last user message).

A reply spec is ``{"content": str, "status": int, "delay": float, "raw": str, "finish_reason": str}``:
``status`` >= 400 answers with an OpenAI-style error body, ``raw`` sends that text verbatim as the body (malformed
JSON on demand), ``delay`` sleeps before answering (timeouts). Every request is recorded (``GET /_control/requests``)
with its JSON body, so tests can assert on the prompts the client sent. ``POST /_control/reset`` clears everything.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from afm.common.procs import OwnsServer, ServerProcess, free_port

DIALECTS = ("vllm", "llamacpp", "llamacpp-python")


def create_app(default_reply: str = "{echo}", model: str = "standin", tokenizer_path: str | None = None,
               dialect: str = "vllm") -> Any:
    """The stand-in FastAPI app (one process; state lives in the app).

    With ``tokenizer_path``, ``/v1/completions`` behaves like vLLM for token-level clients: the prompt may be a
    list of token ids, the reply is cut after the first requested stop string (kept, ``stop_reason`` set) or ends
    with the end-of-sequence token (``stop_reason`` null), ``max_tokens`` truncates it (``finish_reason``
    ``length``), and ``token_ids`` are returned unless the request or the reply spec says ``no_token_ids``.

    ``dialect="llamacpp"`` (with a tokenizer) answers as llama.cpp's llama-server documents it instead: ``GET
    /props``; the native ``POST /completion`` (``prompt`` as ids, ``n_predict``, ``n``; ``content`` with the stop
    string cut off, ``tokens`` with every sampled id, stop string's and EOS included, when ``return_tokens``;
    ``stop_type`` ``word``/``eos``/``limit`` and ``stopping_word``; a list of results when ``n > 1``); and
    ``/v1/completions`` with the stop string cut off, no ``stop_reason``, and ids only in ``logprobs.content[i].id``
    (``logprobs >= 1``) without the stop string's tokens.

    ``dialect="llamacpp-python"`` (with a tokenizer) answers as llama-cpp-python's server (``python -m
    llama_cpp.server``) does: a prompt given as token ids gets HTTP 500; a text prompt gets ``/v1/completions`` with
    the stop string cut off, no ``stop_reason`` and no token ids; ``/v1/models`` says ``owned_by`` ``me``.
    """
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; choose one of {', '.join(DIALECTS)}")
    if dialect != "vllm" and not tokenizer_path:
        raise ValueError(f"the {dialect} dialect needs a tokenizer (token ids in and out)")
    app = FastAPI(title="afm OpenAI-compatible stand-in")
    tok = None
    if tokenizer_path:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer_path)
        eos_id = tok.convert_tokens_to_ids("<|im_end|>")
        if not isinstance(eos_id, int) or eos_id == tok.unk_token_id:
            eos_id = tok.eos_token_id
    state: dict[str, Any] = {"queue": [], "rules": [], "requests": [], "default": default_reply, "count": 0}

    def request_text(body: dict[str, Any]) -> str:
        if "messages" in body:
            parts = []
            for m in body.get("messages") or []:
                c = m.get("content")
                parts.append(c if isinstance(c, str) else str(c))
            return "\n".join(parts)
        prompt = body.get("prompt", "")
        if tok is not None and isinstance(prompt, list) and all(isinstance(i, int) for i in prompt):
            return tok.decode(prompt)  # token-id prompts are matched by their text
        return prompt if isinstance(prompt, str) else str(prompt)

    def last_user(body: dict[str, Any]) -> str:
        for m in reversed(body.get("messages") or []):
            if m.get("role") == "user":
                return m.get("content") if isinstance(m.get("content"), str) else str(m.get("content"))
        return request_text(body)

    def pick(body: dict[str, Any]) -> dict[str, Any]:
        if state["queue"]:
            return state["queue"].pop(0)
        text = request_text(body)
        for rule in state["rules"]:
            if rule.get("times", -1) == 0:
                continue
            if re.search(rule.get("match", ""), text, re.DOTALL):
                if rule.get("times", -1) > 0:
                    rule["times"] -= 1
                return rule
        return {"content": state["default"]}

    def sample(body: dict[str, Any], spec: dict[str, Any], content: str,
               max_tokens: Any) -> tuple[list[int], str, str | None, int]:
        """``(ids, finish, stop, stop_ids)`` of one reply: ``finish`` is ``word``, ``eos`` or ``limit``; the
        last ``stop_ids`` ids are the matched stop string's."""
        assert tok is not None
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else stops
        hits = [(content.find(s) + len(s), s) for s in stops if s in content]
        stop: str | None = None
        eos = False
        if hits:
            end, stop = min(hits)
            content = content[:end]
        elif spec.get("finish_reason", "stop") == "stop":
            eos = True
        ids = tok.encode(content, add_special_tokens=False)
        stop_ids = len(ids) - len(tok.encode(content[: len(content) - len(stop)], add_special_tokens=False)) if stop \
            else 0
        if eos:
            ids.append(eos_id)
        if spec.get("finish_reason") == "length" or (max_tokens is not None and len(ids) > int(max_tokens)):
            ids = ids[: int(max_tokens)] if max_tokens is not None else ids
            return ids, "limit", None, 0
        return ids, "word" if stop else "eos", stop, stop_ids

    def token_choice(body: dict[str, Any], spec: dict[str, Any], content: str, index: int) -> dict[str, Any]:
        assert tok is not None
        ids, kind, stop, stop_ids = sample(body, spec, content, body.get("max_tokens"))
        finish = "length" if kind == "limit" else "stop"
        if dialect == "llamacpp-python":  # the stop string is cut from the text and not named; no ids at all
            kept = ids[: len(ids) - stop_ids]
            return {"index": index, "text": tok.decode(kept, skip_special_tokens=True), "finish_reason": finish,
                    "logprobs": None}
        if dialect == "llamacpp":  # the stop string is cut from the text and not named; ids only in logprobs
            kept = ids[: len(ids) - stop_ids]
            choice: dict[str, Any] = {"index": index, "text": tok.decode(kept, skip_special_tokens=True),
                                      "finish_reason": finish, "logprobs": None}
            if int(body.get("logprobs") or 0) >= 1:
                choice["logprobs"] = {"content": [{"id": i, "token": tok.decode([i]), "logprob": 0.0}
                                                  for i in kept]}
            return choice
        text = tok.decode(ids, skip_special_tokens=True)
        choice = {"index": index, "text": text, "finish_reason": finish, "stop_reason": stop}
        if body.get("return_token_ids") and not spec.get("no_token_ids"):
            choice["token_ids"] = ids
        return choice

    def native_result(body: dict[str, Any], spec: dict[str, Any], content: str, index: int) -> dict[str, Any]:
        """One result of llama-server's native ``/completion``."""
        assert tok is not None
        ids, kind, stop, stop_ids = sample(body, spec, content, body.get("n_predict"))
        out: dict[str, Any] = {"index": index, "content": tok.decode(ids[: len(ids) - stop_ids],
                                                                     skip_special_tokens=True),
                               "tokens": ids if body.get("return_tokens") and not spec.get("no_token_ids") else [],
                               "id_slot": 0, "stop": True, "model": model, "tokens_predicted": len(ids),
                               "stop_type": kind, "stopping_word": stop or "", "truncated": False}
        return out

    async def answer(request: Request, kind: str) -> Response:
        try:
            body = await request.json()
        except Exception:
            return JSONResponse({"error": {"message": "invalid JSON body", "type": "invalid_request_error"}}, 400)
        state["count"] += 1
        state["requests"].append({"path": request.url.path, "body": body, "time": time.time()})
        prompt = body.get("prompt")
        if dialect == "llamacpp-python" and kind == "text" and isinstance(prompt, list) and prompt \
                and all(isinstance(i, int) for i in prompt):
            # what llama-cpp-python's server answers to a token-id prompt (its request model takes a string)
            return JSONResponse({"error": {"message": "Internal Server Error", "type": "internal_server_error"}},
                                500)
        spec = pick(body)
        if spec.get("delay"):
            await asyncio.sleep(float(spec["delay"]))
        if "raw" in spec:
            return Response(spec["raw"], status_code=int(spec.get("status", 200)), media_type="application/json")
        status = int(spec.get("status", 200))
        if status >= 400:
            return JSONResponse({"error": {"message": spec.get("content", "stand-in failure"),
                                           "type": "server_error", "code": status}}, status)
        content = spec.get("content", "")
        content = content.replace("{echo}", last_user(body))
        n = int(body.get("n") or 1)
        if kind == "native":
            results = [native_result(body, spec, content, i) for i in range(n)]
            return JSONResponse(results if n > 1 else results[0])
        finish = spec.get("finish_reason", "stop")
        created = int(time.time())
        usage = {"prompt_tokens": len(request_text(body).split()), "completion_tokens": len(content.split())}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if kind == "chat":
            choices = [{"index": i, "message": {"role": "assistant", "content": content},
                        "finish_reason": finish} for i in range(n)]
            obj = "chat.completion"
        elif tok is not None:
            choices = [token_choice(body, spec, content, i) for i in range(n)]
            obj = "text_completion"
        else:
            choices = [{"index": i, "text": content, "finish_reason": finish} for i in range(n)]
            obj = "text_completion"
        return JSONResponse({"id": f"standin-{state['count']}", "object": obj, "created": created,
                             "model": body.get("model", model), "choices": choices, "usage": usage})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await answer(request, "chat")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(request, "text")

    if dialect == "llamacpp":
        @app.post("/completion")
        async def native_completion(request: Request) -> Response:
            return await answer(request, "native")

        @app.get("/props")
        async def props() -> dict[str, Any]:
            return {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1, "model_path": model,
                    "build_info": "afm stand-in (llamacpp dialect)"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        owner = "me" if dialect == "llamacpp-python" else "afm"  # llama-cpp-python's answer
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": owner}]}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "requests": state["count"]}

    @app.post("/_control/queue")
    async def queue(payload: dict[str, Any]) -> dict[str, Any]:
        state["queue"].extend(payload.get("replies", []))
        return {"queued": len(state["queue"])}

    @app.post("/_control/rules")
    async def rules(payload: dict[str, Any]) -> dict[str, Any]:
        state["rules"] = list(payload.get("rules", []))
        return {"rules": len(state["rules"])}

    @app.post("/_control/default")
    async def default(payload: dict[str, Any]) -> dict[str, Any]:
        state["default"] = payload.get("content", "")
        return {"default": state["default"]}

    @app.get("/_control/requests")
    async def requests() -> dict[str, Any]:
        return {"requests": state["requests"], "count": state["count"]}

    @app.post("/_control/reset")
    async def reset() -> dict[str, Any]:
        state.update(queue=[], rules=[], requests=[], count=0, default=default_reply)
        return {"reset": True}

    return app


class StandIn(OwnsServer):
    """Client and process handle for a running stand-in; ``with StandIn() as llm: llm.base_url ...``."""

    def __init__(self, port: int | None = None, default_reply: str = "{echo}", model: str = "standin",
                 tokenizer: str | None = None, dialect: str = "vllm") -> None:
        self.port = port or free_port()
        self.model = model
        argv = ["-m", "afm.offline.openai_standin", "--port", str(self.port), "--default-reply", default_reply,
                "--model", model, "--dialect", dialect]
        if tokenizer:
            argv += ["--tokenizer", str(tokenizer)]
        # a stand-in with a tokenizer imports transformers (and torch) before it listens: a few seconds idle, and
        # more than 60 beside a loaded test suite (seen with a DAPO run and two test processes on 2 cores). A dead
        # process still fails at once (wait_http polls it); the limit only bounds a slow start.
        self.server = ServerProcess(argv, self.port, startup_timeout=240.0)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends with ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(f"http://127.0.0.1:{self.port}{path}", json=payload, timeout=10)
        r.raise_for_status()
        return r.json()

    def queue(self, *replies: str | dict[str, Any]) -> None:
        """Queue replies (strings are contents) answered in order before any rule."""
        self._post("/_control/queue", {"replies": [{"content": r} if isinstance(r, str) else r for r in replies]})

    def rules(self, *rules: dict[str, Any]) -> None:
        """Replace the rule list (see the module docstring for the spec)."""
        self._post("/_control/rules", {"rules": list(rules)})

    def set_default(self, content: str) -> None:
        self._post("/_control/default", {"content": content})

    def requests(self) -> list[dict[str, Any]]:
        """Every request received since the last reset, oldest first."""
        r = httpx.get(f"http://127.0.0.1:{self.port}/_control/requests", timeout=10)
        r.raise_for_status()
        return r.json()["requests"]

    def reset(self) -> None:
        self._post("/_control/reset", {})


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8800)
    p.add_argument("--default-reply", default="{echo}")
    p.add_argument("--model", default="standin")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder: answer completions with token ids")
    p.add_argument("--dialect", choices=DIALECTS, default="vllm",
                   help="whose completion dialect to speak (llamacpp needs --tokenizer)")
    args = p.parse_args(argv)
    uvicorn.run(create_app(args.default_reply, args.model, args.tokenizer, args.dialect), host=args.host,
                port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
