"""Correctness of run records through :mod:`afm.rewards`: the quality filter's and DPO pairing's scorer.

Which reward source grades a record (:func:`scoring_source`):

- ``qa`` / ``web`` tasks: the LLM judge (``search``, judge kind), as the paper grades QA/search trajectories with an
  LLM; without a configured judge the rewards module falls back to normalised EM (method ``em_f1_fallback``);
- ``math``: Math-Verify on the last ``<answer>``; ``code``: the answer's program against its tests in the sandbox.

A record whose own ``data_source`` is registered with a math, code or judge scorer keeps it (``aime24``,
``livecodebench_v5``, ``gaia``); a registered EM-only QA source (``nq``, ``hotpotqa``) is graded by the judge unless
``qa_judge=False``. Unregistered sources (``qa`` from ``afm infer`` records) use the task's default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from afm.data.records import RunRecord
from afm.rewards import compute_score_async, get_scorer
from afm.trajectory import last_answer

TASK_SOURCES = {"qa": "search", "web": "search", "math": "math", "code": "livecodebench"}
JUDGE_SOURCE = "search"


@dataclass
class QualityResult:
    """One record's verdict: ``correct`` is None when it could not be scored (``error`` says why)."""

    correct: bool | None
    source: str
    method: str = ""
    error: str = ""


def scoring_source(record: RunRecord, *, qa_judge: bool = True, overrides: Mapping[str, str] | None = None) -> str:
    """The registered data source whose scorer grades ``record`` (see the module docstring)."""
    if overrides and record.task in overrides:
        return overrides[record.task]
    try:
        kind = get_scorer(record.data_source).kind
    except ValueError:
        kind = None
    if kind is not None and not (kind == "qa" and qa_judge and record.task in ("qa", "web")):
        return record.data_source
    if record.task not in TASK_SOURCES:
        raise ValueError(f"run {record.run_id}: unknown task {record.task!r} and unregistered data_source "
                         f"{record.data_source!r}; expected a task in {sorted(TASK_SOURCES)}")
    return TASK_SOURCES[record.task]


def solution_text(record: RunRecord) -> str:
    """What is scored: the trajectory; a trajectory without ``<answer>`` gets the recorded final answer appended."""
    text = record.trajectory or ""
    if not last_answer(text) and record.final_answer:
        text = f"{text}\n<answer>{record.final_answer}</answer>"
    return text


async def score_record(record: RunRecord, *, qa_judge: bool = True, overrides: Mapping[str, str] | None = None,
                       options: Mapping[str, Any] | None = None) -> QualityResult:
    """Score one record with the rewards module; bad ground truths and scorer failures become ``error``."""
    try:
        source = scoring_source(record, qa_judge=qa_judge, overrides=overrides)
    except ValueError as exc:
        return QualityResult(None, "", error=str(exc))
    if record.gold is None or record.gold == "" or record.gold == []:
        return QualityResult(None, source, error="no gold answer")
    info = {"question": record.question, "index": record.run_id}
    try:
        res = await compute_score_async(source, solution_text(record), record.gold, info, **dict(options or {}))
    except (ValueError, TypeError, ImportError) as exc:
        return QualityResult(None, source, error=f"{type(exc).__name__}: {exc}")
    return QualityResult(bool(res["acc"] >= 1.0), source, str(res["method"]), str(res["error"]))


async def score_records(records: Sequence[RunRecord], *, concurrency: int = 16, qa_judge: bool = True,
                        overrides: Mapping[str, str] | None = None, options: Mapping[str, Any] | None = None,
                        progress: bool = True, desc: str = "scoring") -> list[QualityResult]:
    """Score ``records`` with at most ``concurrency`` in flight; results in input order."""
    from tqdm import tqdm

    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    sem = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(records), desc=desc, disable=not progress, unit="run")

    async def one(rec: RunRecord) -> QualityResult:
        async with sem:
            result = await score_record(rec, qa_judge=qa_judge, overrides=overrides, options=options)
        bar.update(1)
        return result

    try:
        return list(await asyncio.gather(*(one(r) for r in records)))
    finally:
        bar.close()


def score_records_sync(records: Sequence[RunRecord], **kwargs: Any) -> list[QualityResult]:
    """Blocking form of :func:`score_records` (for command-line entry points)."""
    return asyncio.run(score_records(records, **kwargs))


def parse_source_overrides(values: Sequence[str] | None) -> dict[str, str]:
    """``["qa=nq", "code=lcb_v5"]`` -> ``{"qa": "nq", "code": "lcb_v5"}``; checks the sources are registered."""
    out: dict[str, str] = {}
    for value in values or ():
        task, sep, source = value.partition("=")
        if not sep or not task.strip() or not source.strip():
            raise ValueError(f"--scorer-source expects TASK=DATA_SOURCE (e.g. qa=nq), got {value!r}")
        get_scorer(source.strip())  # raises listing the known names
        out[task.strip()] = source.strip()
    return out
