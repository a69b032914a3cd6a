"""``afm data convert``: teacher runs -> CoA SFT records (alpaca and/or sharegpt) + ``dataset_info.json``.

Every ``ok`` run with a trajectory becomes one sample whose assistant message is the whole CoA text (observations
inline, framed exactly as the rollout engine frames them). Before that the text is checked with
:func:`afm.trajectory.validate` restricted to the prompt's tags and with the prompt's order rules
(:func:`afm.prompts.sequence_problems`); a run that fails a check is skipped and counted under its first
problem's code. Failed runs are counted and never converted. The user message is built by
:func:`afm.prompts.build_messages` with the run's prompt key, so training sees what ``afm infer`` sends.

    afm data convert --input kept.jsonl --output-dir data/distill --name afm_distill_sft --format both
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from afm.data.records import RunRecord, read_records
from afm.prompts import Prompt, build_messages, get_prompt, sequence_problems
from afm.trajectory import validate

FORMATS = ("alpaca", "sharegpt")


def trajectory_problems(text: str, prompt: Prompt, final_answer: str | None = None) -> list[str]:
    """Format problems of ``text`` under ``prompt`` as ``code: message`` strings, earliest first (empty = fine)."""
    found = validate(text, prompt.tags, registry=prompt.tag_registry) + sequence_problems(prompt, text)
    # the earliest located problem first: it is usually the cause of the later ones (and the reported reason)
    found.sort(key=lambda p: (p.position < 0, p.position))
    problems = [f"{p.code}: {p.message}" for p in found]
    if not problems and final_answer is not None:
        from afm.trajectory import last_answer

        if (last_answer(text, prompt.tag_registry) or "") != final_answer.strip():
            problems.append("answer_mismatch: the last <answer> differs from the run's final_answer")
    return problems


def sample_messages(rec: RunRecord, prompt: Prompt, style: str) -> tuple[str, str]:
    """``(system, user)`` texts of the sample (system is empty for the ``user`` style)."""
    extra = (rec.meta or {}).get("prompt_extra") or None
    messages = build_messages(prompt, rec.question, style=style, extra=extra)
    if style == "system":
        return messages[0]["content"], messages[1]["content"]
    return "", messages[0]["content"]


def to_alpaca(rec: RunRecord, prompt: Prompt, style: str = "user") -> dict[str, Any]:
    """An alpaca record: instruction = user message, input empty, output = trajectory, system."""
    system, user = sample_messages(rec, prompt, style)
    return {"instruction": user, "input": "", "output": rec.trajectory, "system": system}


def to_sharegpt(rec: RunRecord, prompt: Prompt, style: str = "user") -> dict[str, Any]:
    """A sharegpt record: one human turn and one gpt turn holding the whole trajectory (observations inline)."""
    system, user = sample_messages(rec, prompt, style)
    return {"conversations": [{"from": "human", "value": user}, {"from": "gpt", "value": rec.trajectory}],
            "system": system}


def dataset_info_entry(file_name: str, fmt: str) -> dict[str, Any]:
    """The LLaMA-Factory ``dataset_info.json`` entry for a file written by this module."""
    if fmt == "alpaca":
        return {"file_name": file_name, "columns": {"prompt": "instruction", "query": "input", "response": "output",
                                                    "system": "system"}}
    return {"file_name": file_name, "formatting": "sharegpt",
            "columns": {"messages": "conversations", "system": "system"}}


def convert_records(records: Iterable[RunRecord], style: str = "user"
                    ) -> tuple[list[tuple[RunRecord, Prompt]], dict[str, Any]]:
    """Select the convertible runs; returns ``(kept, report)`` with counts by outcome and invalid reason."""
    kept: list[tuple[RunRecord, Prompt]] = []
    invalid: Counter[str] = Counter()
    examples: dict[str, dict[str, str]] = {}
    failed: Counter[str] = Counter()
    seen = duplicates = total = 0
    ids: set[str] = set()
    for rec in records:
        total += 1
        if rec.run_id in ids:
            duplicates += 1
            continue
        ids.add(rec.run_id)
        if rec.status != "ok":
            failed[(rec.error or "unknown").split(":")[0]] += 1
            continue
        seen += 1
        try:
            prompt = get_prompt(rec.prompt_key)
        except KeyError as exc:
            reason, detail = "unknown_prompt", str(exc)
        else:
            problems = ["empty_trajectory: the run has no trajectory"] if not rec.trajectory.strip() else \
                trajectory_problems(rec.trajectory, prompt, rec.final_answer)
            if not problems:
                kept.append((rec, prompt))
                continue
            reason, _, detail = problems[0].partition(": ")
        invalid[reason] += 1
        examples.setdefault(reason, {"run_id": rec.run_id, "detail": detail[:300]})
    report = {"records": total, "ok_runs": seen, "converted": len(kept), "invalid": sum(invalid.values()),
              "invalid_by_reason": dict(invalid), "invalid_examples": examples,
              "failed_runs_skipped": sum(failed.values()), "failed_by_reason": dict(failed),
              "duplicate_run_ids": duplicates, "prompt_style": style,
              "by_prompt": dict(Counter(p.key for _, p in kept))}
    return kept, report


def write_dataset(out_dir: str | Path, name: str, kept: list[tuple[RunRecord, Prompt]], formats: Iterable[str],
                  style: str = "user") -> dict[str, str]:
    """Write ``<name>.json`` (alpaca) / ``<name>_sharegpt.json`` and merge their ``dataset_info.json`` entries.

    Returns dataset name -> file path. Existing entries of other datasets are kept.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    info_path = out / "dataset_info.json"
    info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
    for fmt in formats:
        ds_name = name if fmt == "alpaca" else f"{name}_sharegpt"
        build = to_alpaca if fmt == "alpaca" else to_sharegpt
        rows = [build(rec, prompt, style) for rec, prompt in kept]
        path = out / f"{ds_name}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
        tmp.replace(path)  # never leave a half-written dataset behind
        info[ds_name] = dataset_info_entry(path.name, fmt)
        written[ds_name] = str(path)
    info_path.write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return written


def format_report(report: dict[str, Any]) -> str:
    lines = [f"[afm data convert] {report['records']} records: {report['converted']} converted, "
             f"{report['invalid']} invalid, {report['failed_runs_skipped']} failed runs skipped"
             + (f", {report['duplicate_run_ids']} duplicate run ids" if report["duplicate_run_ids"] else "")]
    for reason, n in sorted(report["invalid_by_reason"].items(), key=lambda kv: -kv[1]):
        ex = report["invalid_examples"][reason]
        lines.append(f"  invalid {n:>5}  {reason}  e.g. {ex['run_id']}: {ex['detail']}")
    for reason, n in sorted(report["failed_by_reason"].items(), key=lambda kv: -kv[1]):
        lines.append(f"  failed  {n:>5}  {reason}")
    for ds, path in report.get("files", {}).items():
        lines.append(f"  wrote {ds} -> {path}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="afm data convert", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="run log (JSONL of RunRecord lines, e.g. kept.jsonl)")
    p.add_argument("--output-dir", required=True, help="folder for the json file(s) and dataset_info.json")
    p.add_argument("--name", default="afm_distill_sft", help="dataset name (file <name>.json; sharegpt: "
                                                              "<name>_sharegpt.json)")
    p.add_argument("--format", choices=[*FORMATS, "both"], default="alpaca")
    p.add_argument("--prompt-style", choices=["user", "system"], default="user",
                   help="user: prompt + 'Question: ...' in the user message (afm infer's default); system: the "
                        "prompt in the system field")
    p.add_argument("--report", default=None, help="report json (default <output-dir>/<name>.report.json)")
    p.add_argument("--no-copy-log", action="store_true", help="do not copy the run log beside the dataset")
    p.add_argument("--allow-empty", action="store_true", help="exit 0 even when nothing was converted")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``afm data convert``."""
    args = build_parser().parse_args(argv)
    src = Path(args.input)
    if not src.exists():
        print(f"afm data convert: {src} does not exist", file=sys.stderr)
        return 2
    try:
        kept, report = convert_records(read_records(src), args.prompt_style)
    except ValueError as exc:
        print(f"afm data convert: {exc}", file=sys.stderr)
        return 2
    formats = FORMATS if args.format == "both" else (args.format,)
    out = Path(args.output_dir)
    report["files"] = write_dataset(out, args.name, kept, formats, args.prompt_style)
    report["input"] = str(src)
    if not args.no_copy_log:
        log_copy = out / f"{args.name}.runs.jsonl"
        if src.resolve() != log_copy.resolve():
            shutil.copyfile(src, log_copy)
        report["run_log"] = str(log_copy)
    report_path = Path(args.report) if args.report else out / f"{args.name}.report.json"
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(format_report(report))
    print(f"  report -> {report_path}")
    if not kept and not args.allow_empty:
        print("afm data convert: no run could be converted (see the report)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
