"""``afm eval run``: benchmarks -> trajectories (afm.agent) -> scores (afm.rewards) -> results.jsonl + report.

    afm eval run --benchmarks gaia,browsecomp --run-dir runs/eval/web-32b --n 3 \\
        --backend openai --base-url http://127.0.0.1:10000/v1 --model AFM-WebAgent --tokenizer /models/AFM-WebAgent

Each benchmark brings its prompt, tools, data_source and the paper's sampling settings (``afm.eval.datasets``);
flags override them. Results are append-only, keyed by (benchmark, question id, sample): a killed run restarts
where it stopped, without duplicates. At the end the run is summarised (avg@k, pass@k, maj@k, CIs, efficiency)
and ``report.md`` + plots are written into the run folder.

Infrastructure failures are not wrong answers: a sample whose generation ended in an engine error, whose tool
call still failed for infrastructure reasons after the engine's retries (a tool server down, 5xx or timing out, the
code tool's sandbox failing; ``--tool-infra-retry``), whose code was graded into a ``sandbox_error`` or whose
configured judge gave no verdict is stored with ``"status": "failed"`` and its ``failure`` (kind ``engine``,
``tool``, ``sandbox``, ``judge``); it is left out of every score, counted apart in the report, and run again when
the same command is run again (resume). The run warns at its start when scores will be weaker than they look: no
judge configured or reachable for judge-scored benchmarks (EM/F1 fallback), or LiveCodeBench without its private
tests.

Exit status: 0 when every sample has a result, 1 when some failed (or a result could not be written: disk full),
130/143 when interrupted by SIGINT/SIGTERM (the report is then not written; ``afm eval report`` on the folder says
how many samples are not run yet), 2 for bad input, and 2 at once, with one line naming the running one, when
another run writes the run folder: a run holds the folder's lock (``afm.common.run_lock``) from before it loads
the model until it ends; a lock left by a killed run is taken over.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from afm.agent.backend import EngineRefused, SamplingParams
from afm.agent.infer import BackendLoadError, EngineNote, build_backend, build_tools, trajectory_failure
from afm.agent.loop import AgentConfig, ToolRunner, run_trajectory
from afm.agent.runner import (
    FAILED,
    JsonlStore,
    RolloutTask,
    StoreWriteError,
    close_run,
    exit_code,
    run_tasks,
    stopped_line,
    unfinished_line,
)
from afm.common.run_lock import RunLock, command_line, take_or_say

logger = logging.getLogger("afm.eval")
RESULTS = "results.jsonl"
CONFIG = "config.json"
PINNED = ("model", "backend", "prompt_style")  # a resumed run must not silently mix models


def _sampling(spec_sampling: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    out = dict(spec_sampling)
    for key in ("temperature", "top_p", "top_k", "max_turns", "max_tokens_per_turn", "max_response_tokens", "n"):
        value = getattr(args, key, None)
        if value is not None:
            out[key] = value
    out.setdefault("n", 1)
    return out


def _check_config(run_dir: Path, config: dict[str, Any], force: bool) -> None:
    path = run_dir / CONFIG
    if path.exists():
        old = json.loads(path.read_text())
        clash = {k: (old.get(k), config.get(k)) for k in PINNED if old.get(k) != config.get(k)}
        if clash and not force:
            raise SystemExit(f"{path} was written by a run with different settings {clash}; use another --run-dir "
                             "or --force to mix them")
        config = {**old, **config, "benchmarks": sorted(set(old.get("benchmarks", [])) | set(config["benchmarks"])),
                  "expected_samples": {**old.get("expected_samples", {}), **config.get("expected_samples", {})}}
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=1))


def record_engine(run_dir: Path, engine: EngineNote) -> None:
    """Once the engine that serves the run is known, say it and write it as config.json's ``engine`` (the
    report's line), so that even a run killed later records what it was talking to."""
    name = engine.check()
    if name is None:
        return
    path = run_dir / CONFIG
    tmp = path.with_name(CONFIG + ".partial")
    try:
        config = {**json.loads(path.read_text()), "engine": name}
        tmp.write_text(json.dumps(config, indent=1))
        tmp.replace(path)  # a kill mid-write leaves the old config, never half of one
    except OSError as exc:  # a full disk: the results' own store says so, once, and stops the run; this is a note
        tmp.unlink(missing_ok=True)
        logger.debug("afm eval run: could not record the engine in %s: %s", path, exc)


def judge_status(env: dict[str, str] | None = None, timeout: float = 5.0) -> str | None:
    """Why judge-scored benchmarks will fall back to EM/F1 (no judge configured, or not reachable); None if fine."""
    import httpx

    from afm.rewards.judge import JudgeConfig

    config = JudgeConfig.from_env(env)
    if not config.configured:
        return "no judge configured (GRM_BASE_URL is not set)"
    url = str(config.endpoint.base_url).rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {config.endpoint.api_key}"} if config.endpoint.api_key else {}
    try:
        httpx.get(url, headers=headers, timeout=timeout)  # any HTTP answer means the server is there
    except httpx.HTTPError as exc:
        return f"the judge at {config.endpoint.base_url} is not reachable ({type(exc).__name__}: {exc})"
    return None


def start_warnings(specs: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    """What a run of these benchmarks should say before it starts: scores that will be weaker than they look."""
    from afm.rewards.code import TESTS_DIR_ENV, is_livecodebench
    from afm.rewards.registry import get_scorer

    env = dict(os.environ if env is None else env)
    out = []
    judged = [b for b, spec in specs.items() if get_scorer(spec.data_source).kind == "judge"]
    if judged:
        why = judge_status(env)
        if why:
            out.append(f"{why}: {', '.join(judged)} will be scored by EM/F1 fallback, not the judge "
                       "(set GRM_BASE_URL, GRM_API_KEY, GRM_MODEL_NAME)")
    lcb = [b for b, spec in specs.items() if is_livecodebench(spec.data_source)]
    if lcb and not env.get(TESTS_DIR_ENV):
        out.append(f"{TESTS_DIR_ENV} is not set: {', '.join(lcb)} will be graded on the public tests in the rows "
                   "only, without LiveCodeBench's private tests (see python -m afm.eval.lcb_testcases)")
    return out


def _failure(traj: Any, reward: dict[str, Any]) -> str | None:
    """Why a sample is an infrastructure failure (engine, tool, sandbox or judge), or None for a real result."""
    failure = trajectory_failure(traj)
    if failure:
        return failure
    if reward.get("infra_error"):
        kind = "sandbox" if reward.get("method") == "code_tests" else "judge"
        return f"{kind}: {reward.get('error') or 'no detail'}"
    return None


def load_inputs(args: argparse.Namespace) -> tuple[list[str], dict[str, Any], dict[str, list[Any]]]:
    """``(names, specs, items)`` of ``--benchmarks``, with ``--file``/``--data-root``/``--limit`` applied.

    Names are the benchmarks' own (an alias such as ``hle_test`` becomes ``hle``, so results and resumes use one
    key). Raises KeyError (unknown benchmark), FileNotFoundError (no data file) or ValueError (bad file or flag)
    with a message meant for the user.
    """
    from afm.eval.datasets import get_benchmark, load_benchmark

    names = list(dict.fromkeys(get_benchmark(b).name for b in args.benchmarks.split(",") if b.strip()))
    if not names:
        raise ValueError("--benchmarks names no benchmark")
    files: dict[str, str] = {}
    for kv in args.file or []:
        bench, sep, path = kv.partition("=")
        if not sep or not path:
            raise ValueError(f"--file takes BENCH=PATH, got {kv!r}")
        files[get_benchmark(bench).name] = path
    stray = sorted(set(files) - set(names))
    if stray:
        raise ValueError(f"--file names benchmarks not in --benchmarks: {', '.join(stray)}")
    specs = {b: get_benchmark(b) for b in names}
    items = {b: load_benchmark(b, files.get(b), data_root=args.data_root, limit=args.limit) for b in names}
    return names, specs, items


async def evaluate(args: argparse.Namespace,
                   inputs: tuple[list[str], dict[str, Any], dict[str, list[Any]]] | None = None) -> dict[str, Any]:
    """Run every (question, sample) of the benchmarks not yet in the run folder; returns the run's counts.

    The caller holds the run folder's lock (:func:`writer_lock`; :func:`main` does), so that no other run writes it.
    """
    from afm.prompts import build_messages, get_prompt
    from afm.rewards import compute_score_async

    run_dir = Path(args.run_dir)
    names, specs, items = inputs if inputs is not None else load_inputs(args)
    settings = {b: _sampling(dict(specs[b].sampling), args) for b in names}
    # "engine" is what served the run, written by record_engine once known (--engine auto: after the first
    # request); "engine_flag" is what was asked for
    config = {"model": args.model, "backend": args.backend, "base_url": args.base_url if args.backend == "openai"
              else None, "engine_flag": args.engine if args.backend == "openai" else None,
              "prompt_style": args.prompt_style, "benchmarks": names, "seed": args.seed,
              "settings": settings, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "argv": sys.argv[1:],
              # what a complete run holds, so that a report of an unfinished one says so
              "expected_samples": {b: len(items[b]) * settings[b]["n"] for b in names}}
    # before the run folder is written: a wrong tokenizer name leaves none
    backend, tok = build_backend(args, prefix="[eval]")
    engine = EngineNote(backend, args, "[eval]")
    try:
        _check_config(run_dir, config, args.force)
        record_engine(run_dir, engine)
    except BaseException:
        await backend.aclose()
        raise
    warnings = start_warnings(specs)
    for warning in warnings:
        logger.warning("afm eval run: %s", warning)
    if any("private tests" in w for w in warnings):
        from afm.rewards.code import mark_public_only_warned

        mark_public_only_warned()  # said once, here, not again by the first graded sample
    if any("EM/F1 fallback" in w for w in warnings):
        from afm.rewards.judge import mark_no_judge_warned

        mark_no_judge_warned()
    all_tools = sorted({t for b in names for t in specs[b].tools})
    tools = build_tools(tuple(all_tools), args.tools_config)
    agents: dict[str, tuple[AgentConfig, ToolRunner, Any]] = {}
    for b in names:
        s = settings[b]
        cfg = AgentConfig(tools=tuple(specs[b].tools),
                          sampling=SamplingParams(temperature=s.get("temperature", 1.0), top_p=s.get("top_p", 1.0),
                                                  top_k=s.get("top_k", -1), seed=args.seed),
                          max_turns=s.get("max_turns", 25), max_tokens_per_turn=s.get("max_tokens_per_turn", 4096),
                          max_response_tokens=s.get("max_response_tokens", 30720),
                          max_model_len=args.max_model_len, tool_timeout_s=args.tool_timeout,
                          tool_infra_retry_s=args.tool_infra_retry, trajectory_timeout_s=args.trajectory_timeout)
        agents[b] = (cfg, ToolRunner({t: tools[t] for t in specs[b].tools}, cfg), get_prompt(specs[b].prompt))
    by_key = {}
    tasks = []
    for b in names:
        for item in items[b]:
            for k in range(settings[b]["n"]):
                key = f"{b}/{item.qid}#{k}"
                by_key[key] = item
                tasks.append(RolloutTask(key, item.question, k))
    store = JsonlStore(run_dir / RESULTS)

    async def run_one(task: RolloutTask) -> dict[str, Any]:
        item = by_key[task.key]
        cfg, runner, prompt = agents[item.benchmark]
        messages = build_messages(prompt, item.question, style=args.prompt_style, extra=item.prompt_extra or None)
        prompt_ids = tok.chat_prompt_ids(messages)
        sampling = cfg.sampling if args.seed is None else cfg.sampling.with_(seed=args.seed + task.sample)
        traj = await run_trajectory(backend, tok, runner, cfg, prompt_ids, question=item.question, sampling=sampling,
                                    meta={"prompt_key": prompt.key, "prompt_version": prompt.version})
        record_engine(run_dir, engine)
        solution = traj.response_text()
        error = traj.error
        if trajectory_failure(traj):  # the engine or a tool server failed: nothing to score
            reward: dict[str, Any] = {"score": 0.0, "acc": 0.0, "method": "not_scored", "pred": None}
        else:
            try:
                # infra_fail_limit=0: here a failed sample is stored as failed and retried, not fatal.
                reward = await compute_score_async(item.data_source, solution, item.gold,
                                                   {**item.extra_info, "question": item.question},
                                                   response_length=traj.n_response_tokens, infra_fail_limit=0)
            except ValueError as exc:  # a bad ground truth is the dataset's fault: record it, keep the run going
                reward = {"score": 0.0, "acc": 0.0, "method": "bad_ground_truth", "pred": traj.final_answer()}
                error = f"reward: {exc}"
        failure = _failure(traj, reward)
        try:
            details = json.loads(reward.get("details") or "{}")
        except (TypeError, ValueError):
            details = {}
        traj_dict = traj.to_dict()
        traj_dict.pop("prompt_ids", None)
        return {"key": task.key, "benchmark": item.benchmark, "qid": item.qid, "sample": task.sample,
                "status": FAILED if failure else "ok", "failure": failure,
                "question": item.question, "gold": item.gold, "level": item.level, "data_source": item.data_source,
                "score": float(reward.get("score", 0.0)), "acc": float(reward.get("acc", 0.0)),
                "method": reward.get("method"), "pred": reward.get("pred"), "reward_error": reward.get("error") or None,
                "tests_from": details.get("tests_from"),
                "finish_reason": traj.finish_reason, "tool_calls": len(traj.tool_calls),
                "tool_counts": traj.tool_counts(), "model_tokens": traj.n_model_tokens,
                "observation_tokens": traj.n_observation_tokens, "turns": traj.turns, "wall_s": round(traj.wall_s, 3),
                "ids_source": traj.ids_source,
                "error": error, "trajectory": traj_dict if args.keep_trajectories else None}

    try:
        counts = await run_tasks(tasks, run_one, store, concurrency=args.concurrency, progress=not args.quiet,
                                 desc="eval")
    finally:
        await close_run(store, tools.values(), backend)
    return counts


def add_args(p: argparse.ArgumentParser) -> None:
    from afm.agent.infer import add_backend_args
    from afm.eval.demo_sets import DEMO_SET_NAMES

    add_backend_args(p)
    p.add_argument("--benchmarks", required=True,
                   help="comma-separated benchmark names (afm.eval.benchmark_specs: gaia, hle, math500, ...; their "
                        f"files under --data-root); demo sets that need no file: {','.join(DEMO_SET_NAMES)}")
    p.add_argument("--run-dir", required=True, help="results.jsonl, config.json and the report go here; one run "
                   "writes a folder at a time (a second one exits 2 at once), and the same command resumes it")
    p.add_argument("--file", action="append", metavar="BENCH=PATH", help="data file of a benchmark (repeatable)")
    p.add_argument("--data-root", default=None, help="folder of benchmark files (default $AFM_EVAL_DATA or data/eval)")
    p.add_argument("--limit", type=int, default=None, help="only the first N questions of each benchmark")
    p.add_argument("--n", type=int, default=None, help="samples per question (default: the benchmark's)")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--max-turns", type=int, default=None)
    p.add_argument("--max-tokens-per-turn", type=int, default=None)
    p.add_argument("--max-response-tokens", type=int, default=None)
    p.add_argument("--keep-trajectories", action="store_true", help="store whole trajectories in results.jsonl")
    p.add_argument("--no-report", action="store_true")
    p.add_argument("--force", action="store_true", help="resume into a run folder written with other settings")


def writer_lock(run_dir: str | Path, argv: list[str] | None) -> RunLock:
    """The writer's lock of a run folder (not taken yet); ``argv`` is the command's, for the message of a refused
    second run."""
    return RunLock(run_dir, folder=True, command=command_line("afm eval run", argv), flag="--run-dir",
                   prog="afm eval run")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="afm eval run", description=__doc__.splitlines()[0])
    add_args(p)
    args = p.parse_args(argv)
    try:  # a user's mistake (a misspelt benchmark, a missing file) gets one line, not a traceback
        inputs = load_inputs(args)
    except (KeyError, FileNotFoundError, ValueError) as exc:
        print(f"afm eval run: {exc}", file=sys.stderr)
        return 2
    lock = writer_lock(args.run_dir, argv)
    if (refused := take_or_say(lock)) is not None:  # another run writes the folder: before any model is loaded
        return refused
    # released on return (SIGINT/SIGTERM during the run return 130/143) and on an exception; the kernel drops the
    # lock of a process killed otherwise, and the next run takes its lock file over
    with lock:
        return _run(args, inputs)


def _run(args: argparse.Namespace, inputs: tuple[list[str], dict[str, Any], dict[str, list[Any]]]) -> int:
    """``afm eval run`` once its inputs are read and the run folder is locked: evaluate, then report."""
    try:
        counts = asyncio.run(evaluate(args, inputs))
    except BackendLoadError as exc:  # a wrong model or tokenizer name
        print(f"afm eval run: {exc}", file=sys.stderr)
        return 2
    except EngineRefused as exc:  # the engine refuses afm's request itself: every sample would fail alike
        print(f"afm eval run: stopped at the first sample: {exc}", file=sys.stderr)
        return 2
    except StoreWriteError as exc:  # disk full: one line, not a traceback; what was stored stays
        print(f"afm eval run: {stopped_line(exc, 'every result')}", file=sys.stderr)
        return 1
    except OSError as exc:  # the run folder cannot be written at all (config.json on a full disk, no permission)
        print(f"afm eval run: stopped: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"run": counts}))
    if note := unfinished_line(counts, "samples"):
        print(f"afm eval run: {note}", file=sys.stderr)
    if not args.no_report and not counts["interrupted"]:  # stopped on request: stop now, report later
        from afm.eval.report import write_report

        path = write_report(args.run_dir)
        print(f"report: {path}")
    return exit_code(counts)


if __name__ == "__main__":
    sys.exit(main())
