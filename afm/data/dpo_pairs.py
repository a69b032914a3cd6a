"""``afm data dpo``: correct vs incorrect trajectories of the same question -> LLaMA-Factory ranking pairs.

    afm data dpo --input scored.jsonl --output data/afm_dpo.json [--format alpaca|sharegpt] \\
        [--pairs-per-question 1] [--score] [--dataset-name afm_dpo]

Records (RunRecords, e.g. ``afm data filter --scored-output``, or ``afm infer`` lines) are grouped by
``question_id``; each pair takes a correct trajectory as ``chosen`` and an incorrect one as ``rejected``. ``correct``
comes from the quality filter, or from scoring here with ``--score`` (same scorers as ``afm data filter``). Failed
runs are left out unless ``--include-failed`` (their cut-off trajectories would often be dropped by masking).

The system prompt is ``afm.prompts.get_prompt(record.prompt_key)`` laid out as ``afm infer`` does
(``--prompt-style system``: a ``system`` column and the question as instruction; ``user``: both in the
instruction). Train with ``stage: dpo``, ``ignore_observation: true`` and the dataset name written to
``dataset_info.json`` next to the output: observations are masked in chosen and rejected alike.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from afm.data.records import RunRecord

FORMATS = ("alpaca", "sharegpt")


def dataset_info_entry(file_name: str, fmt: str = "alpaca") -> dict[str, Any]:
    """The ``dataset_info.json`` entry of a pairs file in ``fmt``."""
    if fmt == "alpaca":
        return {"file_name": file_name, "formatting": "alpaca", "ranking": True,
                "columns": {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected",
                            "system": "system"}}
    if fmt == "sharegpt":
        return {"file_name": file_name, "formatting": "sharegpt", "ranking": True,
                "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected",
                            "system": "system"}}
    raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")


@dataclass
class PairReport:
    """What pairing did: question counts by what they had, pairs written, records and questions skipped."""

    questions: int = 0
    with_both: int = 0
    only_correct: int = 0
    only_incorrect: int = 0
    pairs: int = 0
    records: int = 0
    skipped_records: Counter = field(default_factory=Counter)
    skipped_pairs: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {"records": self.records, "questions": self.questions, "with_both": self.with_both,
                "only_correct": self.only_correct, "only_incorrect": self.only_incorrect, "pairs": self.pairs,
                "skipped_records": dict(self.skipped_records), "skipped_pairs": dict(self.skipped_pairs)}


def _prompt_parts(record: RunRecord, style: str, prompt_key: str | None) -> tuple[str, str]:
    """``(system, instruction)`` for a record's question, laid out like ``afm infer``'s messages."""
    from afm.prompts import build_messages, get_prompt

    prompt = get_prompt(prompt_key or record.prompt_key)
    messages = build_messages(prompt, record.question, style=style)
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    user = next(m["content"] for m in messages if m["role"] == "user")
    return system, user


def _example(system: str, instruction: str, chosen: str, rejected: str, fmt: str) -> dict[str, Any]:
    if fmt == "alpaca":
        return {"instruction": instruction, "input": "", "chosen": chosen, "rejected": rejected, "system": system}
    return {"conversations": [{"from": "human", "value": instruction}], "system": system,
            "chosen": {"from": "gpt", "value": chosen}, "rejected": {"from": "gpt", "value": rejected}}


def _choose(good: list[RunRecord], bad: list[RunRecord], k: int) -> list[tuple[RunRecord, RunRecord]]:
    """Up to ``k`` distinct (chosen, rejected) pairs, each trajectory used once before any is reused."""
    first = [(good[i % len(good)], bad[i % len(bad)]) for i in range(max(len(good), len(bad)))]
    seen = {(id(a), id(b)) for a, b in first}
    rest = [(a, b) for a in good for b in bad if (id(a), id(b)) not in seen]
    return (first + rest)[:k]


def make_pairs(records: Sequence[RunRecord], *, fmt: str = "alpaca", pairs_per_question: int = 1,
               include_failed: bool = False, prompt_style: str = "system", prompt_key: str | None = None,
               seed: int = 0) -> tuple[list[dict[str, Any]], PairReport]:
    """Ranking examples from scored records (``correct`` set); see the module docstring."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if pairs_per_question < 1:
        raise ValueError(f"pairs_per_question must be >= 1, got {pairs_per_question}")
    report = PairReport(records=len(records))
    groups: dict[str, list[RunRecord]] = {}
    for rec in records:
        groups.setdefault(rec.question_id, []).append(rec)
    report.questions = len(groups)
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for recs in groups.values():
        good, bad = [], []
        for rec in recs:
            if rec.status != "ok" and not include_failed:
                report.skipped_records["failed_run"] += 1
            elif rec.correct is None:
                report.skipped_records["unscored"] += 1
            elif not rec.trajectory.strip():
                report.skipped_records["empty_trajectory"] += 1
            else:
                (good if rec.correct else bad).append(rec)
        if good and bad:
            report.with_both += 1
        elif good:
            report.only_correct += 1
            continue
        elif bad:
            report.only_incorrect += 1
            continue
        else:
            continue
        rng.shuffle(good)  # which samples pair first should not depend on sample order
        rng.shuffle(bad)
        system, instruction = _prompt_parts(good[0], prompt_style, prompt_key)
        for chosen, rejected in _choose(good, bad, pairs_per_question):
            if chosen.trajectory.strip() == rejected.trajectory.strip():
                report.skipped_pairs["identical_trajectories"] += 1
                continue
            out.append(_example(system, instruction, chosen.trajectory, rejected.trajectory, fmt))
            report.pairs += 1
    return out, report


def write_dataset_info(path: str | Path, name: str, entry: dict[str, Any]) -> Path:
    """Add or replace ``name`` in the ``dataset_info.json`` at ``path`` (created when missing)."""
    p = Path(path)
    info = json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}
    if not isinstance(info, dict):
        raise ValueError(f"{p}: dataset_info.json must hold a JSON object")
    info[name] = entry
    p.write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="afm data dpo", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--input", required=True, nargs="+", help="scored RunRecords or `afm infer` JSONL (one or more)")
    p.add_argument("--output", required=True, help="pairs file (JSON list), e.g. data/afm_dpo.json")
    p.add_argument("--format", choices=FORMATS, default="alpaca")
    p.add_argument("--pairs-per-question", type=int, default=1, help="most pairs per question (default 1)")
    p.add_argument("--score", action="store_true", help="score records whose `correct` is not set (afm.rewards)")
    p.add_argument("--rescore", action="store_true", help="with --score: score every record again")
    p.add_argument("--task", default=None, choices=["qa", "web", "math", "code"], help="task of `afm infer` lines")
    p.add_argument("--data-source", default=None, help="data_source of `afm infer` lines (default: the task)")
    p.add_argument("--concurrency", type=int, default=16, help="records scored at once")
    p.add_argument("--include-failed", action="store_true", help="use failed runs as rejected trajectories")
    p.add_argument("--prompt-style", choices=["system", "user"], default="system",
                   help="system prompt as a system column (default) or inside the instruction, as `afm infer`")
    p.add_argument("--prompt-key", default=None, help="system prompt key for every record (default: the record's)")
    p.add_argument("--dataset-name", default="afm_dpo", help="name of the dataset_info.json entry")
    p.add_argument("--dataset-info", default=None, help="dataset_info.json to update (default: next to --output)")
    p.add_argument("--report", default=None, help="report JSON (default: OUTPUT with .report.json)")
    p.add_argument("--seed", type=int, default=0, help="order in which a question's samples are paired")
    p.add_argument("--quiet", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    """``afm data dpo``; returns 0, 1 when no pair could be made, 2 for bad input."""
    from afm.data.filters import load_records

    args = build_parser().parse_args(argv)
    try:
        records = [r for path in args.input for r in load_records(path, args.task, args.data_source)]
        if args.score:
            from afm.data.quality import score_records_sync

            todo = [r for r in records if args.rescore or r.correct is None]
            for rec, res in zip(todo, score_records_sync(todo, concurrency=args.concurrency,
                                                         progress=not args.quiet, desc="dpo scoring"), strict=True):
                rec.correct = res.correct
        pairs, report = make_pairs(records, fmt=args.format, pairs_per_question=args.pairs_per_question,
                                   include_failed=args.include_failed, prompt_style=args.prompt_style,
                                   prompt_key=args.prompt_key, seed=args.seed)
    except (OSError, ValueError, KeyError) as exc:
        print(f"afm data dpo: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(pairs, indent=1, ensure_ascii=False), encoding="utf-8")
    info_path = Path(args.dataset_info) if args.dataset_info else out.parent / "dataset_info.json"
    entry = dataset_info_entry(out.resolve().relative_to(info_path.parent.resolve()).as_posix()
                               if out.resolve().is_relative_to(info_path.parent.resolve()) else str(out.resolve()),
                               args.format)
    write_dataset_info(info_path, args.dataset_name, entry)
    report_path = Path(args.report or str(out.with_suffix("")) + ".report.json")
    summary = {**report.to_dict(), "output": str(out), "format": args.format, "dataset_name": args.dataset_name,
               "dataset_info": str(info_path)}
    report_path.write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    print(f"[dpo] {report.pairs} pairs from {report.with_both} of {report.questions} questions "
          f"(only correct {report.only_correct}, only incorrect {report.only_incorrect}; skipped records "
          f"{dict(report.skipped_records)}) -> {out}; dataset {args.dataset_name!r} in {info_path}")
    return 0 if pairs else 1


if __name__ == "__main__":
    sys.exit(main())
