"""Run many trajectories with bounded concurrency, a progress bar, graceful cancel and resumable output.

Results go to an append-only JSONL file, one record per (question id, sample) key. A run killed at any point
restarts where it stopped: finished keys are skipped, a half-written last line is cut off, nothing is written
twice. A record with ``"status": "failed"`` (an infrastructure failure: engine, tool, sandbox or judge) is kept on
disk for the record but does not finish its key, so the next run retries it and appends the new record after it.

A write that fails (disk full, file too large, I/O error) stops the run at once: the partial line is cut off, the
tasks still running are cancelled, and :func:`run_tasks` raises :class:`StoreWriteError` with one clear message;
everything stored before is intact, so the same command resumes once space is freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from afm.agent.backend import EngineRefused

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


class StoreWriteError(OSError):
    """A result could not be written (disk full, file too large, I/O error): the run stopped at that write."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(exc.errno, f"cannot write {path}: {exc.strerror or exc}")
        self.path = path

    def __str__(self) -> str:
        return str(self.strerror)


class JsonlStore:
    """Append-only JSONL results keyed by ``record["key"]``; safe to reopen after a crash.

    Only records that are not :func:`is_failed` finish their key; a failed key can be appended again. Each record
    is written with one unbuffered write; when that fails the file is cut back to its last whole line and
    :class:`StoreWriteError` is raised (the store then refuses further writes).
    """

    def __init__(self, path: str | os.PathLike, fsync_every: int = 16) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync_every = fsync_every
        self.keys: set[str] = set()
        self.repaired_bytes = 0
        self.broken: StoreWriteError | None = None
        self._repair_and_load()
        self._f = open(self.path, "ab", buffering=0)  # noqa: SIM115 - open for the store's lifetime
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
        """Write one record (a key already finished is skipped); :class:`StoreWriteError` when it cannot be."""
        if record["key"] in self.keys:
            return
        if self.broken is not None:
            raise self.broken
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        fd = self._f.fileno()
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:  # a short write (a full disk) returns less than asked: the rest raises on the next try
                view = view[os.write(fd, view):]
            self._pending += 1
            if self._pending >= self.fsync_every:
                os.fsync(fd)
                self._pending = 0
        except OSError as exc:
            with contextlib.suppress(OSError):  # a half line would be cut on reopen anyway; cut it now
                os.ftruncate(fd, start)
            self.broken = StoreWriteError(self.path, exc)
            raise self.broken from exc
        if not is_failed(record):
            self.keys.add(record["key"])

    def close(self) -> None:
        """Flush to disk and close; :class:`StoreWriteError` when the final sync fails (never after one did)."""
        if self._f.closed:
            return
        try:
            if self.broken is None:
                os.fsync(self._f.fileno())
        except OSError as exc:
            self.broken = StoreWriteError(self.path, exc)
            raise self.broken from exc
        finally:
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
    """Run every task not yet in ``store``; returns counts (done, skipped, failed, cancelled, interrupted, signal).

    ``run_one`` returns the record to store (it must contain ``key``); an exception it raises, or a record that
    :func:`is_failed` (stored, with its ``failure`` reason), counts the task as failed, reported with the task's
    key above the bar or, without one, as a log warning. SIGINT/SIGTERM stop the launch of new tasks and cancel
    running ones; everything finished before that is already on disk, and ``signal`` names the signal (the
    CLIs exit with 128 + its number). ``done + failed + cancelled`` equals the tasks not skipped. A failed write
    stops the run the same way and raises :class:`StoreWriteError` once the running tasks are cancelled; so does
    an engine that refuses afm's request itself (:class:`afm.agent.backend.EngineRefused`, an HTTP 4xx: every task
    would fail alike), which is raised once the running tasks are cancelled.
    """
    all_tasks = list(tasks)
    todo = [t for t in all_tasks if t.key not in store]
    skipped = len(all_tasks) - len(todo)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[tuple[signal.Signals, Any]] = []
    got: list[signal.Signals] = []
    write_error: list[StoreWriteError] = []
    refused: list[EngineRefused] = []

    def on_signal(sig: signal.Signals) -> None:
        got.append(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous = signal.getsignal(sig)
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append((sig, previous))
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
            except EngineRefused as exc:  # every task would be refused alike: stop the run, say it once, below
                counts["cancelled"] += 1
                if not refused:
                    refused.append(exc)
                stop.set()
                return
            except Exception as exc:  # a cancelled task is counted once, below, by task.cancelled()
                counts["failed"] += 1
                report(f"[{task.key}] failed: {type(exc).__name__}: {exc}")
                return
            try:
                store.append(record)
            except StoreWriteError as exc:  # nothing more can be stored: stop everything, say it once, below
                counts["cancelled"] += 1
                if not write_error:
                    write_error.append(exc)
                stop.set()
                return
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
            for t in done - {waiter}:  # a bug in storing a record surfaces here, never as an unretrieved task
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
            if waiter in done:
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                counts["cancelled"] += len([t for t in pending if t.cancelled()])
                break
    finally:
        waiter.cancel()
        leftovers = [t for t in running if not t.done()]
        for t in leftovers:
            t.cancel()
        if leftovers:
            await asyncio.gather(*leftovers, return_exceptions=True)
        for sig, previous in installed:
            # asyncio's removal leaves SIGTERM at SIG_DFL: the caller's handler (afm quickstart's, which stops the
            # demo servers and the SFT run it started) comes back instead
            loop.remove_signal_handler(sig)
            if previous is not None:
                signal.signal(sig, previous)
        if bar is not None:
            bar.close()
    if write_error:
        raise write_error[0]
    if refused:
        raise refused[0]
    return {"done": counts["done"], "skipped": skipped, "failed": counts["failed"], "cancelled": counts["cancelled"],
            "interrupted": bool(got), "signal": got[0].name if got else None}


def exit_code(counts: dict[str, Any]) -> int:
    """The exit status of a run with these counts: 128 + the signal's number when interrupted (130 for SIGINT,
    143 for SIGTERM), 1 when tasks failed, else 0."""
    if counts.get("interrupted"):
        return 128 + int(getattr(signal, counts.get("signal") or "SIGINT"))
    return 1 if counts.get("failed") else 0


def missing(counts: dict[str, Any]) -> int:
    """Tasks of the run that have no finished result (failed, or never run because it was stopped)."""
    return int(counts.get("failed", 0)) + int(counts.get("cancelled", 0))


def stopped_line(exc: StoreWriteError, kept: str) -> str:
    """What a command says when its run stopped because its store cannot be written: ``kept`` (``"everything"``,
    ``"every result"``) stays, and the same command resumes."""
    return f"stopped: {exc}; {kept} written before is kept: free space and run the same command again to resume"


def unfinished_line(counts: dict[str, Any], what: str) -> str | None:
    """What a command says about a run that left ``what`` (``"trajectories"``, ``"samples"``) without a result
    (interrupted, or tasks failed); None when every task has one."""
    if not (counts.get("interrupted") or counts.get("failed")):
        return None
    why = f"interrupted by {counts['signal']}" if counts.get("interrupted") else "incomplete"
    total = missing(counts) + counts["done"] + counts["skipped"]
    return (f"{why}: {missing(counts)} of {total} {what} have no result ({counts['failed']} failed, "
            f"{counts['cancelled']} not run); run the same command again to finish them")


async def close_run(store: JsonlStore, tools: Iterable[Any], backend: Any) -> None:
    """End a run: close the store (its final sync may raise :class:`StoreWriteError`), then every tool and the
    model backend, whatever the store did."""
    try:
        store.close()
    finally:
        for tool in tools:
            await tool.aclose()
        await backend.aclose()


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Finish reasons, tool-call histogram, per-tool counts and token means over trajectory records.

    Failed records (see :func:`is_failed`) are no result: they are left out, and the keys still failed (not
    finished by a later record) are counted as ``failed``."""
    finished = {r.get("key") for r in records if not is_failed(r)}
    failed = {r.get("key") for r in records if is_failed(r)} - finished
    records = [r for r in records if not is_failed(r)]
    n = len(records)
    finish = Counter(r.get("finish_reason") for r in records)
    calls_hist = Counter(len(r.get("tool_calls", [])) for r in records)
    per_tool = Counter(c["name"] for r in records for c in r.get("tool_calls", []))
    status = Counter(c["status"] for r in records for c in r.get("tool_calls", []))

    def mean(key: str) -> float:
        return sum(r.get("counts", {}).get(key, 0) for r in records) / n if n else 0.0

    return {"trajectories": n, "finish_reasons": dict(finish), "tool_calls_histogram": dict(sorted(calls_hist.items())),
            "tool_calls_per_tool": dict(per_tool), "tool_call_status": dict(status), "failed": len(failed),
            "with_answer": sum(r.get("answer") is not None for r in records),
            "ids_retokenized": sum(r.get("ids_source") == "retokenized" for r in records),
            "mean_model_tokens": round(mean("model_tokens"), 1),
            "mean_observation_tokens": round(mean("observation_tokens"), 1), "mean_turns": round(mean("turns"), 2)}


def format_summary(s: dict[str, Any]) -> str:
    failed = f"; failed, retried by a rerun: {s['failed']}" if s.get("failed") else ""
    lines = [f"trajectories: {s['trajectories']} (with an answer: {s['with_answer']}{failed})",
             "finish reasons: " + ", ".join(f"{k}={v}" for k, v in s["finish_reasons"].items()),
             "tool calls per trajectory: " + ", ".join(f"{k}:{v}" for k, v in s["tool_calls_histogram"].items()),
             "calls per tool: " + (", ".join(f"{k}={v}" for k, v in s["tool_calls_per_tool"].items()) or "none"),
             "call status: " + (", ".join(f"{k}={v}" for k, v in s["tool_call_status"].items()) or "none"),
             f"mean tokens: model {s['mean_model_tokens']}, observation {s['mean_observation_tokens']}; "
             f"mean turns {s['mean_turns']}"]
    if s.get("engine"):
        lines.insert(0, f"engine: {s['engine']}")
    if s.get("ids_retokenized"):
        lines.insert(0, f"WARNING token ids retokenized from text in {s['ids_retokenized']} of {s['trajectories']} "
                        "trajectories: the engine returned no sampled ids, so they are not token-in-token-out "
                        "(serve with vLLM, SGLang or llama-server; afm infer --engine)")
    return "\n".join(lines)
