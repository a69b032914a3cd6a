"""``afm infer``: questions (JSON/JSONL/parquet) -> CoA trajectories (JSONL), n samples each, resumable.

    afm infer --input questions.jsonl --output runs/infer/traj.jsonl --backend openai \\
        --base-url http://127.0.0.1:10000/v1 --model AFM-WebAgent --tokenizer /path/to/model \\
        --prompt web_agent --n 4 --temperature 1.0 --top-p 0.9 --top-k 20

The backend is a completions server (vLLM, SGLang, llama.cpp's llama-server; token ids in and out, in the dialect
``--engine`` names or the server says it speaks) or, with ``--backend hf``, the model loaded in this process.
Tools come from ``--tools-config`` (YAML, see ``configs/tools/``) or are built with their defaults for the
prompt's tools. When the engine returns no sampled token ids, they are retokenized from the text: said once on
the console when it first happens, and counted in the run's summary.

A trajectory whose generation failed (the engine answered an error) or that still holds a tool call failed for
infrastructure reasons after the engine's retries (``--tool-infra-retry``) is stored with ``"status": "failed"``
and its ``failure``, counted as failed, and run again by the same command (resume). Exit status: 0 when every
question is done, 1 when some failed, 130/143 when interrupted by SIGINT/SIGTERM, 1 when a result could not be
written (disk full; nothing stored before is lost), 2 at once, with one line naming the running one, when another
run writes the same ``--output``: a run holds ``<output>.lock`` (``afm.common.run_lock``) from before it loads
the model until it ends; a lock left by a killed run is taken over.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from afm.agent.backend import EngineRefused, ModelBackend, SamplingParams
from afm.agent.engines import ENGINES
from afm.agent.loop import AgentConfig, ToolRunner, run_trajectory
from afm.agent.runner import (
    FAILED,
    JsonlStore,
    RolloutTask,
    StoreWriteError,
    close_run,
    format_summary,
    run_tasks,
    stopped_line,
    summarize,
    unfinished_line,
)
from afm.agent.runner import exit_code as run_exit_code
from afm.agent.tokens import TokenizerAdapter, recorded_tokenizer, served_record
from afm.common.run_lock import RunLock, command_line, take_or_say
from afm.common.table_io import read_rows
from afm.tools import Tool, build_tool, load_tools_config


def read_questions(path: str | Path, q_key: str = "question", id_key: str | None = "id") -> list[dict[str, Any]]:
    """Rows of a JSON list, JSONL or parquet file; each gets ``_id`` (``id_key`` or the row index)."""
    out = []
    for i, row in enumerate(read_rows(path)):
        if q_key not in row:
            raise ValueError(f"{path}: row {i} has no {q_key!r} field (fields: {sorted(row)[:10]}); use --q-key")
        row = dict(row)
        row["_id"] = str(row[id_key]) if id_key and row.get(id_key) is not None else str(i)
        out.append(row)
    return out


class BackendLoadError(ValueError):
    """The model or tokenizer named on the command line could not be loaded (a wrong path or hub name, or a hub
    name while offline): the user's to fix, so the CLIs print it as one line."""


def _load_tokenizer(name: str, what: str, hint: str) -> TokenizerAdapter:
    """``TokenizerAdapter.from_pretrained(name)``; :class:`BackendLoadError` saying ``what`` failed, and ``hint``."""
    try:
        return TokenizerAdapter.from_pretrained(name)
    except OSError as exc:  # transformers' error for a missing folder, an unknown hub id, or no network
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BackendLoadError(f"cannot load {what}: {reason} {hint}") from exc


def served_tokenizer(tokenizer: str | None, model: str) -> tuple[TokenizerAdapter, str | None]:
    """The tokenizer of the served ``model`` and, when it was not given, a line saying where it came from.

    ``--tokenizer``; else the one evaluation/serve_model.sh recorded for the served name (the scripts' rule,
    evaluation/tokenizer.sh); else ``model`` itself when this machine has it (a folder, or the hub's cache).
    Otherwise :class:`BackendLoadError` at once: a served name (a GGUF's) is no hub id, and asking the hub
    offline retried for a minute before failing.
    """
    if tokenizer:
        return _load_tokenizer(tokenizer, f"the tokenizer (--tokenizer) {tokenizer!r}",
                               "Give a local model folder, or a hub name with network access."), None
    recorded = recorded_tokenizer(model)
    if recorded:
        record = served_record(model)
        tok = _load_tokenizer(recorded, f"the tokenizer {recorded!r} recorded for {model!r} in {record}",
                              "Pass --tokenizer <hf folder>, or serve again with TOKENIZER=<hf folder>.")
        return tok, f"tokenizer: {recorded} (recorded for {model} in {record})"
    try:
        return TokenizerAdapter.from_pretrained(model, local_files_only=True), None
    except (OSError, ValueError):
        raise BackendLoadError(
            f"no tokenizer for the served model {model!r}: pass --tokenizer <hf folder> (the hf folder `afm model "
            "prepare` wrote, or the model folder the server serves; evaluation/serve_model.sh records it for "
            "--model when started with TOKENIZER=<hf folder>)") from None


def build_backend(args: argparse.Namespace, prefix: str = "[infer]") -> tuple[ModelBackend, TokenizerAdapter]:
    """The model backend of ``--backend`` and its tokenizer; :class:`BackendLoadError` when they cannot be loaded.
    Where a tokenizer not given came from is said on the console after ``prefix``."""
    if args.backend == "hf":
        from afm.agent.hf_backend import HFBackend

        try:
            backend = HFBackend.from_pretrained(args.model, max_batch=args.batch_size, seed=args.seed or 0)
        except OSError as exc:  # transformers' error for a missing folder, an unknown hub id, or no network
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise BackendLoadError(f"cannot load the model {args.model!r}: {reason} Give a local model folder, or a "
                                   "hub name with network access.") from exc
        return backend, backend.tok
    from afm.agent.openai_backend import OpenAIBackend

    tok, note = served_tokenizer(args.tokenizer, args.model)
    if note:
        print(f"{prefix} {note}", flush=True)
    return OpenAIBackend(args.base_url, args.model, tok, api_key=args.api_key, concurrency=args.concurrency,
                         timeout_s=args.request_timeout, engine=args.engine), tok


class EngineNote:
    """The engine that serves a run, said once on the console as soon as it is known: at once for ``--backend hf``
    and a named ``--engine``; for ``--engine auto`` once the server answered (the backend asks it on the first
    request), so callers :meth:`check` after each trajectory."""

    def __init__(self, backend: Any, args: argparse.Namespace, prefix: str) -> None:
        self.backend, self.args, self.prefix = backend, args, prefix
        self.said = False

    @property
    def name(self) -> str | None:
        """``hf``, or the dialect the server is spoken to in (None while ``--engine auto`` has not asked yet)."""
        if self.args.backend == "hf":
            return "hf"
        dialect = getattr(self.backend, "dialect", None)
        return dialect.name if dialect is not None else None

    def check(self) -> str | None:
        """The engine's name the first time it is known (said on the console then), else None."""
        name = self.name
        if self.said or name is None:
            return None
        self.said = True
        if self.args.backend == "hf":
            how = "--backend hf: the model in this process"
        elif self.args.engine == "auto":
            how = f"found by --engine auto at {self.args.base_url}: {self.backend.dialect.describe}"
        else:
            how = f"--engine {self.args.engine}: {self.backend.dialect.describe}"
        print(f"{self.prefix} engine: {name} ({how})", flush=True)
        return name


def build_tools(names: tuple[str, ...], config_path: str | None) -> dict[str, Tool]:
    tools = load_tools_config(config_path) if config_path else {}
    for name in names:
        if name not in tools:
            tools[name] = build_tool(name)
    return {n: tools[n] for n in names}


def trajectory_failure(traj: Any) -> str | None:
    """Why a trajectory is an infrastructure failure rather than a result, or None.

    ``engine: ...`` when the generation failed (the model server answered an error), ``tool: ...`` when a tool
    call still failed for infrastructure reasons after the engine's retries (server down, 5xx, timeout, sandbox).
    """
    if traj.finish_reason == "error":
        return f"engine: {traj.error or 'generation failed'}"
    if traj.infra_failures:
        first = next(c for c in traj.tool_calls if c.infra)
        detail = " ".join(str(first.error or first.status).split())[:300]
        return f"tool: {traj.infra_failures} call(s) failed on infrastructure after retries ({first.name}: {detail})"
    return None


class InputError(ValueError):
    """A bad question file or prompt key, found before anything runs."""


async def infer(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``args.n`` trajectories per question of ``args.input`` into ``args.output`` (resumable); the caller
    holds the output's lock (:func:`writer_lock`; :func:`main` does)."""
    from afm.prompts import build_messages, get_prompt

    try:  # the user's inputs are checked before the model is loaded
        prompt = get_prompt(args.prompt)
        questions = read_questions(args.input, args.q_key, args.id_key)
    except KeyError as exc:
        raise InputError(str(exc.args[0]) if exc.args else str(exc)) from None
    except (ValueError, FileNotFoundError) as exc:
        raise InputError(str(exc)) from None
    tool_names = tuple(args.tools.split(",")) if args.tools else tuple(prompt.tools)
    backend, tok = build_backend(args)
    engine = EngineNote(backend, args, "[infer]")
    engine.check()
    tools = build_tools(tool_names, args.tools_config)
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                              seed=args.seed, presence_penalty=args.presence_penalty)
    config = AgentConfig(tools=tool_names, sampling=sampling, max_turns=args.max_turns,
                         max_tokens_per_turn=args.max_tokens_per_turn, max_response_tokens=args.max_response_tokens,
                         max_model_len=args.max_model_len, tool_timeout_s=args.tool_timeout,
                         tool_infra_retry_s=args.tool_infra_retry, trajectory_timeout_s=args.trajectory_timeout)
    runner = ToolRunner(tools, config)
    rows = {r["_id"]: r for r in questions}
    if args.limit:
        rows = dict(list(rows.items())[: args.limit])
    tasks = [RolloutTask(f"{qid}#{k}", str(row[args.q_key]), k) for qid, row in rows.items() for k in range(args.n)]
    store = JsonlStore(args.output)
    if store.repaired_bytes:
        print(f"[infer] cut a half-written last record ({store.repaired_bytes} bytes) from {args.output}")

    async def run_one(task: RolloutTask) -> dict[str, Any]:
        qid = task.key.rsplit("#", 1)[0]
        row = rows[qid]
        messages = build_messages(prompt, task.question, style=args.prompt_style)
        prompt_ids = tok.chat_prompt_ids(messages)
        s = sampling if args.seed is None else sampling.with_(seed=args.seed + task.sample)
        traj = await run_trajectory(backend, tok, runner, config, prompt_ids, question=task.question, sampling=s,
                                    meta={"prompt_key": prompt.key, "prompt_version": prompt.version})
        engine.check()
        failure = trajectory_failure(traj)
        record = {"key": task.key, "id": qid, "sample": task.sample, "question": task.question,
                  "gold": row.get(args.answer_key) if args.answer_key else None,
                  "status": FAILED if failure else "ok", "failure": failure, **traj.to_dict()}
        if not args.keep_ids:
            record.pop("prompt_ids", None)
        return record

    try:
        counts = await run_tasks(tasks, run_one, store, concurrency=args.concurrency, progress=not args.quiet)
    finally:
        await close_run(store, tools.values(), backend)
    summary = summarize(store.records())
    summary["engine"] = engine.name
    summary["run"] = counts
    return summary


# Rollout-limit flags -> (AgentConfig field, type, help). The defaults are read from the dataclass, never restated.
LIMIT_FLAGS: dict[str, tuple[str, type, str]] = {
    "--max-turns": ("max_turns", int, "generations per trajectory"),
    "--max-tokens-per-turn": ("max_tokens_per_turn", int, "tokens per generation"),
    "--max-response-tokens": ("max_response_tokens", int, "model + observation tokens after the prompt"),
    "--max-model-len": ("max_model_len", int, "prompt + response tokens"),
    "--tool-timeout": ("tool_timeout_s", float, "seconds per tool call"),
    "--tool-infra-retry": ("tool_infra_retry_s", float, "seconds a tool call that failed for infrastructure reasons "
                           "(server down, 5xx, timeout) is retried before the sample counts as failed; 0 = never"),
    "--trajectory-timeout": ("trajectory_timeout_s", float, "seconds per trajectory"),
}


def _add_limits(p: argparse.ArgumentParser, flags: tuple[str, ...]) -> None:
    for flag in flags:
        name, kind, text = LIMIT_FLAGS[flag]
        p.add_argument(flag, type=kind, default=AgentConfig.default(name), help=f"{text} (default: %(default)s)")


def add_backend_args(p: argparse.ArgumentParser) -> None:
    """Flags shared by ``afm infer`` and ``afm eval run``: model backend, tools config, limits, concurrency."""
    p.add_argument("--backend", choices=["openai", "hf"], default="openai")
    p.add_argument("--model", required=True, help="served model name (openai) or model folder (hf)")
    p.add_argument("--base-url", default="http://127.0.0.1:10000/v1",
                   help="the server's OpenAI API, as evaluation/serve_model.sh serves it (default: %(default)s)")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="the server's completion dialect (afm.agent.engines): vllm, sglang, llamacpp (llama-server's "
                        "native /completion), openai (any other; ids retokenized when it returns none); auto asks "
                        "the server (default: %(default)s)")
    p.add_argument("--api-key", default="EMPTY")
    p.add_argument("--tokenizer", default=None,
                   help="the served model's HF tokenizer folder (a GGUF's: the hf folder `afm model prepare` wrote); "
                        "default: the one evaluation/serve_model.sh recorded for --model (runs/serve/), else --model "
                        "when it is a folder here")
    p.add_argument("--prompt-style", choices=["user", "system"], default="user")
    p.add_argument("--tools-config", default=None, help="tools YAML (configs/tools/*.yaml)")
    p.add_argument("--seed", type=int, default=None, help="base seed (sample k uses seed + k)")
    _add_limits(p, ("--max-model-len", "--tool-timeout", "--tool-infra-retry", "--trajectory-timeout"))
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8, help="hf backend: sequences per generate call")
    p.add_argument("--request-timeout", type=float, default=600.0)
    p.add_argument("--quiet", action="store_true")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", required=True, help="questions: .json (list), .jsonl or .parquet")
    p.add_argument("--output", required=True, help="trajectories JSONL (appended; a rerun resumes; one run writes "
                   "it at a time: a second one exits 2 at once)")
    p.add_argument("--q-key", default="question")
    p.add_argument("--id-key", default="id", help="field with a stable question id (default: row index)")
    p.add_argument("--answer-key", default="answer", help="field copied as `gold` into each record")
    p.add_argument("--prompt", default="web_agent", help="system prompt key (afm.prompts)")
    p.add_argument("--tools", default=None, help="comma-separated tools (default: the prompt's)")
    p.add_argument("--n", type=int, default=1, help="samples per question")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--presence-penalty", type=float, default=0.0)
    _add_limits(p, ("--max-turns", "--max-tokens-per-turn", "--max-response-tokens"))
    p.add_argument("--limit", type=int, default=0, help="only the first N questions")
    p.add_argument("--keep-ids", action="store_true", help="also store prompt ids (segments always keep theirs)")
    add_backend_args(p)


def writer_lock(output: str | Path, argv: list[str] | None) -> RunLock:
    """The writer's lock of an ``--output`` file (not taken yet); ``argv`` is the command's, for the message of a
    refused second run."""
    return RunLock(output, folder=False, command=command_line("afm infer", argv), flag="--output", prog="afm infer")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="afm infer", description=__doc__.splitlines()[0])
    add_args(p)
    args = p.parse_args(argv)
    lock = writer_lock(args.output, argv)
    if (refused := take_or_say(lock)) is not None:  # another run writes the output: before any model is loaded
        return refused
    with lock:  # released on return (130/143 after SIGINT/SIGTERM) and on an exception
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """``afm infer`` once its output is locked."""
    try:  # a user's mistake (a bad question file or prompt key, a wrong model or tokenizer name) gets one line
        summary = asyncio.run(infer(args))
    except (InputError, BackendLoadError) as exc:
        print(f"afm infer: {exc}", file=sys.stderr)
        return 2
    except EngineRefused as exc:  # the engine refuses afm's request itself: every trajectory would fail alike
        print(f"afm infer: stopped at the first trajectory: {exc}", file=sys.stderr)
        return 2
    except StoreWriteError as exc:  # disk full: one line, not a traceback; what was stored stays
        print(f"afm infer: {stopped_line(exc, 'everything')}", file=sys.stderr)
        return 1
    print(format_summary(summary))
    run = summary["run"]
    print(json.dumps(run))
    if note := unfinished_line(run, "trajectories"):
        print(f"afm infer: {note}", file=sys.stderr)
    return run_exit_code(run)


if __name__ == "__main__":
    sys.exit(main())
