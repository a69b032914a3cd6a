"""Run many trajectories with bounded concurrency, a progress bar, graceful cancel and resumable output.

Results go to an append-only JSONL file, one record per (question id, sample) key. A run killed at any point
restarts where it stopped: finished keys are skipped, a half-written last line is cut off, nothing is written
twice. A record with ``"status": "failed"`` (an infrastructure failure: engine, sandbox or judge) is kept on disk
for the record but does not finish its key, so the next run retries it and appends the new record after it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class RolloutTask:
    """One trajectory to run: ``key`` is unique in the output file (e.g. ``"<id>#<sample>"``)."""

    key: str
    question: str
    sample: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


FAILED = "failed"


def is_failed(record: dict[str, Any]) -> bool:
    """Whether a stored record is an infrastructure failure (retried on resume, never a score)."""
    return record.get("status") == FAILED


class JsonlStore:
    """Append-only JSONL results keyed by ``record["key"]``; safe to reopen after a crash.

    Only records that are not :func:`is_failed` finish their key; a failed key can be appended again.
    """

    def __init__(self, path: str | os.PathLike, fsync_every: int = 16) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync_every = fsync_every
        self.keys: set[str] = set()
        self.repaired_bytes = 0
        self._repair_and_load()
        self._f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the store's lifetime
        self._pending = 0

    def _repair_and_load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1  # everything after the last newline is a half-written record
        if end < len(data):
            self.repaired_bytes = len(data) - end
            with open(self.path, "r+b") as f:
                f.truncate(end)
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
                if not is_failed(record):
                    self.keys.add(record["key"])
            except (ValueError, KeyError, TypeError, AttributeError):
                continue

    def __contains__(self, key: str) -> bool:
        return key in self.keys

    def append(self, record: dict[str, Any]) -> None:
        if record["key"] in self.keys:
            return
        self._f.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._f.flush()
        if not is_failed(record):
            self.keys.add(record["key"])
        self._pending += 1
        if self._pending >= self.fsync_every:
            os.fsync(self._f.fileno())
            self._pending = 0

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()

    def records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


async def run_tasks(tasks: Iterable[RolloutTask], run_one: Callable[[RolloutTask], Awaitable[dict[str, Any]]],
                    store: JsonlStore, *, concurrency: int = 64, progress: bool = True,
                    desc: str = "trajectories") -> dict[str, Any]:
    """Run every task not yet in ``store``; returns counts (done, skipped, failed, cancelled).

    ``run_one`` returns the record to store (it must contain ``key``); an exception it raises, or a record that
    :func:`is_failed` (stored, with its ``failure`` reason), counts the task as failed, reported with the task's
    key above the bar or, without one, as a log warning. SIGINT/SIGTERM stop the launch of new tasks and cancel
    running ones; everything finished before that is already on disk. ``done + failed + cancelled`` equals the
    tasks not skipped.
    """
    all_tasks = list(tasks)
    todo = [t for t in all_tasks if t.key not in store]
    skipped = len(all_tasks) - len(todo)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or no signals here: Ctrl-C then just raises
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=desc, dynamic_ncols=True)
    sem = asyncio.Semaphore(concurrency)
    counts = Counter()

    def report(message: str) -> None:
        if bar is not None:
            bar.write(message)
        else:  # --quiet hides the bar, never the reason a task failed
            logger.warning(message)

    async def guarded(task: RolloutTask) -> None:
        async with sem:
            if stop.is_set():
                counts["cancelled"] += 1
                return
            try:
                record = await run_one(task)
            except Exception as exc:  # a cancelled task is counted once, below, by task.cancelled()
                counts["failed"] += 1
                report(f"[{task.key}] failed: {type(exc).__name__}: {exc}")
                return
            store.append(record)
            if is_failed(record):  # stored for the record, retried on resume
                counts["failed"] += 1
                report(f"[{task.key}] failed: {record.get('failure') or 'no reason given'}")
            else:
                counts["done"] += 1
            if bar is not None:
                bar.update(1)

    running = [asyncio.ensure_future(guarded(t)) for t in todo]
    waiter = asyncio.ensure_future(stop.wait())
    try:
        pending = set(running)
        while pending:
            done, pending = await asyncio.wait(pending | {waiter}, return_when=asyncio.FIRST_COMPLETED)
            pending.discard(waiter)
            if waiter in done:
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                counts["cancelled"] += len([t for t in pending if t.cancelled()])
                break
    finally:
        waiter.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
        if bar is not None:
            bar.close()
    return {"done": counts["done"], "skipped": skipped,
            "failed": counts["failed"], "cancelled": counts["cancelled"], "interrupted": stop.is_set()}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Finish reasons, tool-call histogram, per-tool counts and token means over trajectory records."""
    n = len(records)
    finish = Counter(r.get("finish_reason") for r in records)
    calls_hist = Counter(len(r.get("tool_calls", [])) for r in records)
    per_tool = Counter(c["name"] for r in records for c in r.get("tool_calls", []))
    status = Counter(c["status"] for r in records for c in r.get("tool_calls", []))

    def mean(key: str) -> float:
        return sum(r.get("counts", {}).get(key, 0) for r in records) / n if n else 0.0

    return {"trajectories": n, "finish_reasons": dict(finish), "tool_calls_histogram": dict(sorted(calls_hist.items())),
            "tool_calls_per_tool": dict(per_tool), "tool_call_status": dict(status),
            "with_answer": sum(r.get("answer") is not None for r in records),
            "mean_model_tokens": round(mean("model_tokens"), 1),
            "mean_observation_tokens": round(mean("observation_tokens"), 1), "mean_turns": round(mean("turns"), 2)}


def format_summary(s: dict[str, Any]) -> str:
    lines = [f"trajectories: {s['trajectories']} (with an answer: {s['with_answer']})",
             "finish reasons: " + ", ".join(f"{k}={v}" for k, v in s["finish_reasons"].items()),
             "tool calls per trajectory: " + ", ".join(f"{k}:{v}" for k, v in s["tool_calls_histogram"].items()),
             "calls per tool: " + (", ".join(f"{k}={v}" for k, v in s["tool_calls_per_tool"].items()) or "none"),
             "call status: " + (", ".join(f"{k}={v}" for k, v in s["tool_call_status"].items()) or "none"),
             f"mean tokens: model {s['mean_model_tokens']}, observation {s['mean_observation_tokens']}; "
             f"mean turns {s['mean_turns']}"]
    return "\n".join(lines)
