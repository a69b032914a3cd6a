"""``afm infer`` output (JSONL of trajectory records with key, question and gold) -> a page source.

``afm infer`` does not score, so its rows have no accuracy; the page shows the answers next to the gold. A retried
failed key is read as ``afm infer`` resumes it: the retry replaces the failed line.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from afm.common.table_io import iter_objects
from afm.view.records import trajectory_detail
from afm.view.samples import KeepFirstSuccess, Sample, Source, failure_kind, short


def is_infer_output(path: Path) -> bool:
    """A JSONL file whose first record is an ``afm infer`` line (key, question, segments)."""
    if not (path.is_file() and path.suffix == ".jsonl"):
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.strip():
                    rec = json.loads(line)
                    return isinstance(rec, dict) and {"key", "question", "segments"} <= set(rec)
    except (OSError, ValueError):
        return False
    return False


def infer_sample(rec: dict[str, Any]) -> Sample:
    """One ``afm infer`` line as a page sample."""
    detail, ids, lps, counted = trajectory_detail(rec)
    key = str(rec.get("key") or f"{rec.get('id')}#{rec.get('sample', 0)}")
    row = {"bench": str((rec.get("meta") or {}).get("prompt_key") or "infer"), "qid": str(rec.get("id", key)),
           "k": rec.get("sample", 0), "q": short(rec.get("question")), "gold": short(rec.get("gold")),
           "pred": short(rec.get("answer")), "acc": None, "score": None, "st": rec.get("status") or "ok",
           "fail": failure_kind(rec.get("failure")), "meth": None, **counted,
           "_tools": Counter(str(c.get("name", "?")) for c in rec.get("tool_calls") or [])}
    detail.update({"question": str(rec.get("question") or ""), "gold": short(rec.get("gold"), 100_000),
                   "pred": rec.get("answer"), "reward": {}, "failure": rec.get("failure"),
                   "record_error": rec.get("error")})
    return Sample(row=row, detail=detail, ids=ids, logprobs=lps, key=key)


def load_infer(path: Path, label: str, tokenizer: str | None = None) -> Source:
    """The source of an ``afm infer`` output file."""
    keep = KeepFirstSuccess()
    bad = [0]

    def samples() -> Iterator[Sample]:
        for rec in iter_objects(path, bad, ("segments",)):
            sample = infer_sample(rec)
            if keep.offer(sample.key, sample.row["st"] != "failed") != "skip":
                yield sample

    def overview(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        tools: Counter[str] = Counter()
        for r in rows:
            tools.update(r.get("_tools") or {})
        lines = [f"samples: {len(rows)} (unparsable lines {bad[0]}, duplicate keys {keep.duplicates}); with an "
                 f"<answer>: {sum(1 for r in rows if r.get('pred'))}",
                 "afm infer does not score: compare the answers with the gold in the table"]
        table = [["calls per tool", ", ".join(f"{k}: {v}" for k, v in tools.most_common()) or "none"]]
        return [{"title": "Inference", "lines": lines},
                {"title": "Tool use", "table": {"head": ["what", "counts"], "rows": table}}]

    return Source("infer", label, str(path), samples(), overview, tokenizer=tokenizer)
