"""The record every data step reads and writes: one teacher run (or one sampled trajectory) per JSONL line.

A :class:`RunRecord` is what the distillation controller writes for each run, what conversion turns into SFT
records, what the filters keep or drop, and what DPO pairing groups by ``question_id``. ``afm infer`` output lines
become records through :func:`from_infer_record`, so the filters and pairing work on sampled trajectories too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TASKS = ("qa", "web", "math", "code")


@dataclass
class RunRecord:
    """One run on one question.

    ``trajectory`` is the whole CoA assistant output (observations included verbatim); ``status`` is ``ok`` for a
    run that reached an answer through the protocol and ``failed`` otherwise (``error`` says why): failed runs are
    kept in the log for accounting but never become SFT data. ``double_checks`` lists each verification in order
    (``score`` 1-4), ``reflections`` each reflector rating (good | average | poor). ``correct`` is filled by the
    quality filter (None = not judged yet). ``usage`` maps a role to ``{model, prompt_tokens, completion_tokens,
    calls}``.
    """

    run_id: str
    question_id: str
    question: str
    gold: Any = None
    task: str = "qa"
    data_source: str = "qa"
    prompt_key: str = "afm_all_tools"
    trajectory: str = ""
    final_answer: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {name, argument, status}
    double_checks: list[dict[str, Any]] = field(default_factory=list)  # {score, answer}
    reflections: list[dict[str, Any]] = field(default_factory=list)  # {rating, text}
    status: str = "ok"
    error: str | None = None
    correct: bool | None = None
    source: str = "teacher"  # teacher | infer
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_tool_calls(self) -> int:
        return len(self.tool_calls)

    @property
    def has_reflection(self) -> bool:
        """A reflection step took place (a reflector rating, or a ``<reflection>`` block in the text)."""
        return bool(self.reflections) or "<reflection>" in self.trajectory

    @property
    def self_corrected(self) -> bool:
        """A double-check first scored low (< 3) and a later one accepted (>= 3) the final answer."""
        scores = [int(d.get("score", 0)) for d in self.double_checks]
        return any(s < 3 for s in scores[:-1]) and bool(scores) and scores[-1] >= 3

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunRecord:
        known = {f for f in cls.__dataclass_fields__}
        missing = [k for k in ("run_id", "question_id", "question") if k not in d]
        if missing:
            raise ValueError(f"run record without {', '.join(missing)}: {str(dict(d))[:200]}")
        return cls(**{k: v for k, v in d.items() if k in known})


def from_infer_record(rec: Mapping[str, Any], *, task: str = "qa", data_source: str | None = None) -> RunRecord:
    """An ``afm infer`` / ``afm eval run`` output line as a :class:`RunRecord` (source ``infer``)."""
    meta = dict(rec.get("meta") or {})
    # a row stored as failed (engine error, tool infrastructure failure) is no trajectory of the model, even when
    # its finish reason reads "answer"
    ok = rec.get("finish_reason") == "answer" and rec.get("status", "ok") != "failed"
    return RunRecord(
        run_id=str(rec["key"]), question_id=str(rec["id"]), question=str(rec.get("question", "")),
        gold=rec.get("gold"), task=task, data_source=data_source or task,
        prompt_key=str(meta.get("prompt_key", "afm_all_tools")), trajectory=str(rec.get("response", "")),
        final_answer=rec.get("answer"),
        tool_calls=[{"name": c.get("name"), "argument": c.get("argument"), "status": c.get("status")}
                    for c in rec.get("tool_calls", [])],
        status="ok" if ok else "failed",
        error=None if ok else (str(rec.get("failure") or "") or f"finish_reason={rec.get('finish_reason')}"),
        source="infer", meta={"finish_reason": rec.get("finish_reason"), **meta},
    )


def read_records(path: str | Path) -> Iterator[RunRecord]:
    """Records of a JSONL file (``afm infer`` lines are converted); a bad line raises with its line number.

    ``afm infer`` appends a new line when it retries a failed key, so for its lines the last one of a key wins (at
    the place of the first)."""
    infer: dict[str, RunRecord] = {}
    order: list[RunRecord | str] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                if "run_id" not in d and "key" in d:
                    rec = from_infer_record(d)
                    if rec.run_id not in infer:
                        order.append(rec.run_id)
                    infer[rec.run_id] = rec
                else:
                    order.append(RunRecord.from_dict(d))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: {exc}") from exc
    for item in order:
        yield infer[item] if isinstance(item, str) else item


def write_records(path: str | Path, records: Iterable[RunRecord]) -> int:
    """Write records as JSONL (replacing the file); returns how many."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(r.to_json() + "\n")
            n += 1
    return n
