"""An SFT set written by ``afm data convert`` (alpaca or sharegpt JSON, ``dataset_info.json``) -> a page source;
``afm-sft mask-report --json`` files -> the totals shown beside it.

What SFT trains on is the assistant message, minus every observation and the whitespace the environment put
around it (``ignore_observation``; :func:`afm.trajectory.find_observations`, the spans the masker uses). The page
shows each record with those spans marked; the token totals come from the mask report, which ran the real
tokenizer and LLaMA-Factory pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from afm.trajectory import tool_calls
from afm.view.samples import Sample, Source, answer_of, coa_parts, observation_mask, short, utf16_index

DATASET_INFO = "dataset_info.json"
MASK_FIELDS = ("samples_seen", "samples_kept", "samples_dropped", "tokens_total", "tokens_target", "tokens_trained",
               "tokens_masked", "tokens_mixed", "observations")


def sft_files(path: Path) -> list[tuple[str, Path]]:
    """``(dataset name, file)`` of an SFT folder (its ``dataset_info.json`` entries whose file is there) or of one
    dataset file; a ``<name>_sharegpt`` twin of an alpaca dataset in the same folder is left out (same records)."""
    if path.is_file():
        return [(path.stem, path)]
    info = json.loads((path / DATASET_INFO).read_text(encoding="utf-8"))
    found = [(name, path / str(entry.get("file_name"))) for name, entry in info.items()
             if isinstance(entry, dict) and (path / str(entry.get("file_name"))).is_file()]
    names = {n for n, _ in found}
    return [(n, f) for n, f in found if not (n.endswith("_sharegpt") and n.removesuffix("_sharegpt") in names)]


def is_sft_set(path: Path) -> bool:
    """A folder with ``dataset_info.json``, or a JSON list of alpaca/sharegpt records."""
    if path.is_dir():
        return (path / DATASET_INFO).is_file()
    if path.suffix != ".json" or not path.is_file():
        return False
    with open(path, encoding="utf-8", errors="replace") as fh:
        head = fh.read(4096).lstrip()
    return head.startswith("[") and ('"output"' in head or '"conversations"' in head)


def is_mask_report(path: Path) -> bool:
    """A JSON object from ``afm-sft mask-report --json`` ({dataset: totals}) or one report's totals."""
    if path.suffix != ".json" or not path.is_file() or path.stat().st_size > 1_000_000:
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return False
    return bool(mask_reports(data))


def mask_reports(data: Any) -> dict[str, dict[str, Any]]:
    """``{dataset: totals}`` of a mask report file's content ("" names a report of one unnamed dataset)."""
    if not isinstance(data, dict):
        return {}
    if "tokens_masked" in data:
        return {"": data}
    return {str(k): v for k, v in data.items() if isinstance(v, dict) and "tokens_masked" in v}


def _messages(rec: dict[str, Any]) -> tuple[str, str, str]:
    """``(system, user, assistant)`` of an alpaca or sharegpt record."""
    if "conversations" in rec:
        turns = rec.get("conversations") or []
        user = next((str(t.get("value", "")) for t in turns if t.get("from") in ("human", "user")), "")
        gpt = [str(t.get("value", "")) for t in turns if t.get("from") in ("gpt", "assistant")]
        return str(rec.get("system") or ""), user, gpt[-1] if gpt else ""
    user = str(rec.get("instruction") or "")
    if rec.get("input"):
        user += "\n" + str(rec["input"])
    return str(rec.get("system") or ""), user, str(rec.get("output") or "")


def question_of(user: str) -> str:
    """The question of a user message built by :func:`afm.prompts.build_messages` (after its last ``Question:``)."""
    at = user.rfind("Question:")
    return user[at + len("Question:"):].strip() if at >= 0 else user.strip()


def sft_sample(name: str, index: int, rec: dict[str, Any]) -> Sample:
    """One SFT record as a page sample: the trajectory with its observation (not trained) spans."""
    system, user, text = _messages(rec)
    mask = observation_mask(text)
    masked = sum(mask[i + 1] - mask[i] for i in range(0, len(mask), 2))
    u = utf16_index(text)
    calls = [{"name": c.name, "arg": c.argument, "status": "", "latency": None, "truncated": False, "infra": False,
              "retries": 0, "error": None, "obs_chars": None, "obs_tokens": None, "turn": i}
             for i, c in enumerate(tool_calls(text))]
    answer = answer_of(text)
    row = {"bench": name, "qid": str(index), "k": 0, "q": short(question_of(user)), "gold": "", "pred": short(answer),
           "acc": None, "score": None, "st": "ok", "fail": "", "fin": "answer" if answer else "", "meth": None,
           "turns": len(calls) + 1, "calls": len(calls), "tok": None, "wall": None, "ts": None, "idsrc": None,
           "_obs": len(mask) // 2, "_chars": u(len(text)), "_masked": masked}
    detail = {"prompt": (system + "\n\n" if system else "") + user, "text": text, "parts": coa_parts(text),
              "mask": mask, "segs": [], "calls": calls, "question": question_of(user), "gold": "", "pred": answer,
              "reward": {}, "chars": {"trained": u(len(text)) - masked, "masked": masked}}
    return Sample(row=row, detail=detail)


def load_sft(path: Path, reports: dict[str, dict[str, Any]] | None = None) -> list[Source]:
    """One source per dataset of an SFT folder (or file), named by the dataset; ``reports`` are mask-report totals
    by dataset name."""
    return [_dataset_source(name, file, name, _report_for(name, reports or {})) for name, file in sft_files(path)]


def _report_for(name: str, reports: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The report of dataset ``name``: one keyed by it, else the only one (mask-report keys its totals by split,
    ``train``, which covers every dataset of the run)."""
    if name in reports:
        return name, reports[name]
    return next(iter(reports.items())) if len(reports) == 1 else None


def _dataset_source(name: str, file: Path, label: str, found: tuple[str, dict[str, Any]] | None) -> Source:
    def samples() -> Iterator[Sample]:
        try:
            records = json.loads(file.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{file}: not a JSON list of SFT records ({exc})") from None
        if not isinstance(records, list):
            raise ValueError(f"{file}: expected a JSON list of SFT records")
        for i, rec in enumerate(records):
            if isinstance(rec, dict):
                yield sft_sample(name, i, rec)

    def overview(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        chars = sum(r["_chars"] for r in rows)
        masked = sum(r["_masked"] for r in rows)
        lines = [f"dataset {name}: {len(rows)} records, {sum(r['_obs'] for r in rows)} observations, "
                 f"{sum(r['calls'] for r in rows)} tool calls",
                 f"assistant characters: {chars:,}; trained {chars - masked:,} ({_pct(chars - masked, chars)}), "
                 f"masked as observation {masked:,} ({_pct(masked, chars)})"]
        blocks: list[dict[str, Any]] = [{"title": "SFT set", "lines": lines}]
        if found is not None:
            key, report = found
            rows_t = [[f, report.get(f, "–")] for f in MASK_FIELDS]
            target = report.get("tokens_target") or 0
            trained = report.get("tokens_trained", target - (report.get("tokens_masked") or 0))
            rows_t.append(["trained share of target tokens", _pct(trained, target)])
            rows_t += [[f"dropped: {reason}", n] for reason, n in (report.get("drops") or {}).items()]
            blocks.append({"title": f"Mask report of {key or 'the run'} (afm-sft mask-report: the training run's "
                                    "tokenizer and pipeline)",
                           "table": {"head": ["total", "value"], "rows": rows_t}})
        return blocks

    return Source("sft", label, str(file), samples(), overview)


def _pct(a: float, b: float) -> str:
    return f"{100 * a / b:.1f}%" if b else "–"
