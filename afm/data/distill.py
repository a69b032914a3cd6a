"""``afm data distill``: run the multi-agent teacher on questions -> an append-only, resumable run log.

Each line of the output is a :class:`afm.data.records.RunRecord` (plus ``key`` = ``run_id`` =
``"<question_id>#<k>"``); ok runs carry their CoA trajectory, failed runs their ``error``. A killed run restarts
where it stopped: finished run ids are skipped, a half-written last line is cut off, nothing is written twice.
Runs that failed because the teacher endpoint was unreachable are not written, so the next invocation retries
them. At the end a summary (tokens per role and model, calls, tool calls by name, statuses) is printed and
written to ``<output stem>.summary.json``. One run writes an output at a time: it holds ``<output>.lock``
(``afm.common.run_lock``) until it ends, and a second one exits 2 at once with one line naming the running one (a
lock left by a killed run is taken over).

    afm data distill --input questions.jsonl --output runs.jsonl --config configs/data/teacher.yaml \\
        --tools-config configs/tools/code_executor.yaml --runs-per-question 2 --concurrency 16
    # one of 4 nodes (or processes): questions 1, 5, 9, ...; then cat runs.*.jsonl > runs.jsonl
    afm data distill --input questions.jsonl --output runs.1.jsonl --shard 1/4 ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from afm.agent.infer import read_questions
from afm.agent.runner import JsonlStore, RolloutTask, StoreWriteError, exit_code, run_tasks
from afm.common.run_lock import RunLock, command_line, take_or_say
from afm.data.records import TASKS, RunRecord
from afm.data.teacher import ChatClient, Teacher, TeacherConfig, TeacherTask, load_teacher_config
from afm.data.teacher.controller import resolve_protocol
from afm.tools import Tool, build_tool, load_tools_config

ENDPOINT_ERROR = "teacher endpoint:"


class EndpointFailure(RuntimeError):
    """The teacher endpoint failed for good: the run is not written, so a later invocation retries it."""


def _as_tools(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(t.strip() for t in value.replace("|", ",").split(",") if t.strip())
    return tuple(str(t) for t in list(value))


def load_tasks(args: argparse.Namespace) -> list[TeacherTask]:
    """Questions of ``--input`` as teacher tasks (per-row ``task``/``tools``/``prompt_key`` override the flags)."""
    rows = read_questions(args.input, args.q_key, args.id_key)
    tasks = []
    for row in rows:
        task = str(row.get("task") or args.task)
        if task not in TASKS:
            raise ValueError(f"question {row['_id']}: task {task!r} is not one of {', '.join(TASKS)}")
        question = row[args.q_key]
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"question {row['_id']}: {args.q_key!r} is empty or not text")
        extra = row.get("prompt_extra") or {}
        tasks.append(TeacherTask(
            question_id=row["_id"], question=question.strip(), gold=row.get(args.a_key) if args.a_key else None,
            task=task, data_source=str(row.get("data_source") or args.data_source or task),
            tools=_as_tools(row.get("tools")) or _as_tools(args.tools),
            prompt_key=row.get("prompt_key") or args.prompt_key, prompt_extra=dict(extra),
            meta={"tools_kwargs": dict(row.get("tools_kwargs") or {})} if row.get("tools_kwargs") else {},
        ))
    if args.limit is not None:
        tasks = tasks[: args.limit]
    if getattr(args, "shard", None):
        index, count = parse_shard(args.shard)
        tasks = tasks[index::count]
    return tasks


def parse_shard(value: str) -> tuple[int, int]:
    """``--shard K/N`` -> (K, N): this invocation takes questions K, K+N, K+2N, ... (0-based, after ``--limit``)."""
    try:
        index, count = (int(x) for x in value.split("/"))
    except ValueError:
        raise ValueError(f"--shard {value!r}: expected K/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {value!r}: K must be in 0..N-1 and N >= 1")
    return index, count


def build_tools(names: set[str], configs: list[str]) -> dict[str, Tool]:
    """The tools the tasks need, from the tools config files (later files win), defaults for the rest."""
    tools: dict[str, Tool] = {}
    for path in configs:
        if not Path(path).exists():
            raise FileNotFoundError(f"tools config {path} does not exist")
        tools.update(load_tools_config(path))
    for name in names:
        if name not in tools:
            tools[name] = build_tool(name)
    return {n: t for n, t in tools.items() if n in names}


def summarize(records: list[Mapping[str, Any]], prices: Mapping[str, tuple[float, float]] | None = None
              ) -> dict[str, Any]:
    """Cost and outcome accounting over run records (see the module docstring)."""
    recs = [RunRecord.from_dict(r) for r in records]
    by_role: dict[str, dict[str, Any]] = {}
    by_model: dict[str, dict[str, int]] = {}
    for r in recs:
        for role, u in r.usage.items():
            key = f"{role}@{u.get('model')}"
            agg = by_role.setdefault(key, {"role": role, "model": u.get("model"), "prompt_tokens": 0,
                                           "completion_tokens": 0, "calls": 0})
            m = by_model.setdefault(str(u.get("model")), {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0})
            for k in ("prompt_tokens", "completion_tokens", "calls"):
                agg[k] += int(u.get(k, 0))
                m[k] += int(u.get(k, 0))
    prompt_t = sum(m["prompt_tokens"] for m in by_model.values())
    completion_t = sum(m["completion_tokens"] for m in by_model.values())
    out: dict[str, Any] = {
        "runs": len(recs), "status": dict(Counter(r.status for r in recs)),
        "questions": len({r.question_id for r in recs}),
        "errors": dict(Counter((r.error or "").split(":")[0] for r in recs if r.status != "ok")),
        "tokens": {"prompt": prompt_t, "completion": completion_t, "total": prompt_t + completion_t},
        "calls": sum(m["calls"] for m in by_model.values()),
        "usage_by_role": {k: by_role[k] for k in sorted(by_role)}, "usage_by_model": by_model,
        "tool_calls": sum(r.n_tool_calls for r in recs),
        "tool_calls_by_name": dict(Counter(c.get("name") for r in recs for c in r.tool_calls)),
        "tool_call_status": dict(Counter(c.get("status") for r in recs for c in r.tool_calls)),
        "double_check_scores": dict(Counter(str(d.get("score")) for r in recs for d in r.double_checks)),
        "reflection_ratings": dict(Counter(x.get("rating") for r in recs for x in r.reflections)),
        "self_corrected": sum(r.self_corrected for r in recs if r.status == "ok"),
        "ok_with_reflection": sum(r.has_reflection for r in recs if r.status == "ok"),
        "mean_tool_calls_ok": round(sum(r.n_tool_calls for r in recs if r.status == "ok")
                                    / max(1, sum(r.status == "ok" for r in recs)), 2),
    }
    if prices:
        cost = {model: round(m["prompt_tokens"] / 1e6 * prices[model][0]
                             + m["completion_tokens"] / 1e6 * prices[model][1], 6)
                for model, m in by_model.items() if model in prices}
        out["cost_usd"] = {"by_model": cost, "total": round(sum(cost.values()), 6)}
    return out


def format_summary(s: Mapping[str, Any]) -> str:
    lines = [f"[afm data distill] {s['runs']} runs over {s['questions']} questions: "
             + ", ".join(f"{k}={v}" for k, v in s["status"].items()),
             f"  tokens: prompt {s['tokens']['prompt']}, completion {s['tokens']['completion']}, total "
             f"{s['tokens']['total']} in {s['calls']} calls"]
    for u in s["usage_by_role"].values():
        lines.append(f"    {u['role']:<20} {u['model']:<24} calls {u['calls']:>6}  prompt {u['prompt_tokens']:>10}"
                     f"  completion {u['completion_tokens']:>9}")
    lines.append("  tool calls: " + (", ".join(f"{k}={v}" for k, v in s["tool_calls_by_name"].items()) or "none"))
    if s["errors"]:
        lines.append("  failures: " + ", ".join(f"{k}={v}" for k, v in s["errors"].items()))
    lines.append(f"  double-check scores: {s['double_check_scores']}; self-corrected runs: {s['self_corrected']}")
    if "cost_usd" in s:
        lines.append(f"  cost: ${s['cost_usd']['total']}")
    return "\n".join(lines)


def summary_path(output: str | Path) -> Path:
    """``runs.jsonl`` -> ``runs.summary.json``."""
    p = Path(output)
    return p.with_name(p.name.removesuffix(".jsonl") + ".summary.json")


async def distill(args: argparse.Namespace, config: TeacherConfig) -> dict[str, Any]:
    """Run every (question, k) not yet in ``--output``; returns this session's counts. The caller holds the
    output's lock (:func:`writer_lock`; :func:`main` does)."""
    tasks = load_tasks(args)
    needed: set[str] = set()
    for t in tasks:  # check every question's prompt/tools before spending a token
        needed.update(resolve_protocol(t, config)[1])
    tools = build_tools(needed, [*config.tools_config, *args.tools_config])
    store = JsonlStore(args.output)
    if store.repaired_bytes:
        print(f"[afm data distill] cut {store.repaired_bytes} bytes of a half-written last line", file=sys.stderr)
    jobs = [RolloutTask(key=f"{t.question_id}#{k}", question=t.question, sample=k, meta={"task": t})
            for t in tasks for k in range(args.runs_per_question)]
    try:
        async with ChatClient() as chat:
            teacher = Teacher(config, tools, chat)

            async def run_one(job: RolloutTask) -> dict[str, Any]:
                rec = await teacher.run(job.meta["task"], job.key)
                if rec.status != "ok" and (rec.error or "").startswith(ENDPOINT_ERROR) and not args.keep_endpoint_failures:
                    raise EndpointFailure(rec.error)
                return {"key": rec.run_id, **rec.to_dict()}

            counts = await run_tasks(jobs, run_one, store, concurrency=args.concurrency, progress=not args.no_progress,
                                     desc="teacher runs")
    finally:
        store.close()
        for tool in tools.values():
            await tool.aclose()
    return counts


def _prices(values: list[str]) -> dict[str, tuple[float, float]]:
    out = {}
    for v in values:
        model, sep, nums = v.rpartition("=")
        parts = nums.split(",")
        if not sep or len(parts) != 2:
            raise ValueError(f"--price expects MODEL=PROMPT_USD,COMPLETION_USD per 1M tokens, got {v!r}")
        out[model] = (float(parts[0]), float(parts[1]))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="afm data distill", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="questions: .jsonl, .json (list) or .parquet")
    p.add_argument("--output", required=True, help="run log (JSONL, append-only, resumable; one run writes it at a "
                                                   "time: a second one exits 2 at once)")
    p.add_argument("--config", default=None, help="teacher config YAML (default: built-in defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set roles.verifier.model=big --set budgets.max_tool_calls=12")
    p.add_argument("--tools-config", action="append", default=[], help="tools YAML (repeatable; after the "
                                                                       "config's tools_config)")
    p.add_argument("--tools", default=None, help="tools for questions that name none, e.g. web_search,crawl_page")
    p.add_argument("--prompt-key", default=None, help="student prompt whose protocol runs follow (default: "
                                                      "controller.prompt_key, auto = by task and tools)")
    p.add_argument("--runs-per-question", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--limit", type=int, default=None, help="only the first N questions")
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="only questions K, K+N, K+2N, ... (0-based; after --limit): N invocations, each with its own "
                        "--output, split the questions between them (nodes, or processes of one machine); "
                        "concatenate their outputs")
    p.add_argument("--q-key", default="question")
    p.add_argument("--a-key", default="answer", help="gold answer field ('' = none)")
    p.add_argument("--id-key", default="id", help="question id field (missing = row index)")
    p.add_argument("--task", default="qa", choices=TASKS, help="task kind of questions that name none")
    p.add_argument("--data-source", default=None, help="data_source of the records (default: the task)")
    p.add_argument("--price", action="append", default=[], metavar="MODEL=IN,OUT",
                   help="USD per 1M prompt/completion tokens, for the cost line of the summary")
    p.add_argument("--keep-endpoint-failures", action="store_true",
                   help="write runs whose teacher endpoint failed (default: leave them for the next invocation)")
    p.add_argument("--no-progress", action="store_true")
    return p


def writer_lock(output: str | Path, argv: list[str] | None) -> RunLock:
    """The writer's lock of an ``--output`` run log (not taken yet); ``argv`` is the command's, for the message of a
    refused second run."""
    return RunLock(output, folder=False, command=command_line("afm data distill", argv), flag="--output",
                   prog="afm data distill")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``afm data distill``."""
    args = build_parser().parse_args(argv)
    if args.runs_per_question < 1 or args.concurrency < 1:
        print("afm data distill: --runs-per-question and --concurrency must be >= 1", file=sys.stderr)
        return 2
    if args.shard is not None:
        try:
            parse_shard(args.shard)
        except ValueError as exc:
            print(f"afm data distill: {exc}", file=sys.stderr)
            return 2
    lock = writer_lock(args.output, argv)
    if (refused := take_or_say(lock)) is not None:  # another run writes the output: before any call is made
        return refused
    with lock:  # released on return (130/143 after SIGINT/SIGTERM) and on an exception; held over the summary too
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """``afm data distill`` once its output is locked."""
    try:
        prices = _prices(args.price)
        config = load_teacher_config(args.config, args.overrides)
        if not Path(args.input).exists():
            raise FileNotFoundError(f"--input {args.input} does not exist")
        counts = asyncio.run(distill(args, config))
    except StoreWriteError as exc:  # disk full: one line, not a traceback; what was stored stays
        print(f"afm data distill: stopped: {exc}; everything written before is kept: free space and run the same "
              "command again to resume", file=sys.stderr)
        return 1
    except (ValueError, KeyError, FileNotFoundError) as exc:
        print(f"afm data distill: {exc}", file=sys.stderr)
        return 2
    store = JsonlStore(args.output)
    records = store.records()
    store.close()
    summary = {**summarize(records, prices), "session": counts, "output": str(args.output)}
    path = summary_path(args.output)
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(format_summary(summary))
    print(f"  this session: {counts}; summary -> {path}")
    # interrupted: 128 + the signal (130 Ctrl-C, 143 SIGTERM), as afm eval run and afm infer exit
    return exit_code(counts) if counts.get("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
