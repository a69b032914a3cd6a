"""An ``afm eval run`` folder (``results.jsonl`` + ``config.json``) -> a page source.

Each result line is one row. With ``--keep-trajectories`` the row also has its trajectory; without, the page has
the table and the scores only. Resumed runs are read as the report reads them (:class:`KeepFirstSuccess`): the
first successful record of a key counts, a failed one until its retry. The scores are the report's own
(:func:`afm.eval.metrics.summarize_records` on the same records, trajectories left out), so the page and
``report.md`` give the same figures.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from afm.common.table_io import iter_objects
from afm.eval.metrics import CONFIG, RESULTS, RunResults, summarize_records
from afm.eval.report import fmt_est
from afm.view.records import reward_of, trajectory_detail
from afm.view.samples import KeepFirstSuccess, Sample, Source, failure_kind, number, short


def is_eval_run(path: Path) -> bool:
    """A folder holding ``results.jsonl``, or a ``results.jsonl`` file whose first record has benchmark and qid."""
    if path.is_dir():
        return (path / RESULTS).is_file()
    return path.name == RESULTS and _first_record_has(path, ("benchmark", "qid"))


def _first_record_has(path: Path, keys: tuple[str, ...]) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.strip():
                    rec = json.loads(line)
                    return isinstance(rec, dict) and all(k in rec for k in keys)
    except (OSError, ValueError):
        return False
    return False


def run_tokenizer(config: dict[str, Any], base: Path) -> str | None:
    """A local tokenizer folder named by the run's config (``--tokenizer``, else an hf ``--model`` folder)."""
    argv = [str(a) for a in config.get("argv") or []]
    candidates = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--tokenizer"]
    candidates.append(str(config.get("model") or ""))
    for c in candidates:
        for p in (Path(c), base / c):
            if c and (p / "tokenizer_config.json").is_file():
                return str(p.resolve())
    return None


def eval_sample(rec: dict[str, Any]) -> Sample:
    """One result line as a page sample."""
    traj = rec.get("trajectory") if isinstance(rec.get("trajectory"), dict) else None
    bench, qid, k = str(rec.get("benchmark")), str(rec.get("qid")), rec.get("sample", 0)
    row: dict[str, Any] = {
        "bench": bench, "qid": qid, "k": k, "q": short(rec.get("question")), "gold": short(rec.get("gold")),
        "pred": short(rec.get("pred")), "acc": number(rec.get("acc")), "score": number(rec.get("score")),
        "st": rec.get("status") or "ok", "fail": failure_kind(rec.get("failure")), "fin": rec.get("finish_reason"),
        "meth": rec.get("method"), "turns": rec.get("turns"), "calls": rec.get("tool_calls"),
        "tok": (rec.get("model_tokens") or 0) + (rec.get("observation_tokens") or 0), "wall": number(rec.get("wall_s")),
        "ts": None, "idsrc": rec.get("ids_source"), "lvl": rec.get("level")}
    ids = lps = None
    if traj is not None:
        detail, ids, lps, counted = trajectory_detail(traj)
        row["ts"] = counted["ts"]
    else:
        detail = {"text": None}
    detail.update({"question": str(rec.get("question") or ""), "gold": _gold_text(rec.get("gold")),
                   "pred": rec.get("pred"), "reward": reward_of(rec), "failure": rec.get("failure"),
                   "record_error": rec.get("error"), "tool_counts": rec.get("tool_counts") or {}})
    return Sample(row=row, detail=detail, ids=ids, logprobs=lps, key=rec.get("key") or f"{bench}/{qid}#{k}")


def _gold_text(gold: Any) -> str:
    if isinstance(gold, str):
        return gold
    return json.dumps(gold, ensure_ascii=False, default=str)


def load_eval(path: Path, label: str) -> Source:
    """The source of an eval run folder (or its ``results.jsonl``)."""
    results = path / RESULTS if path.is_dir() else path
    folder = results.parent
    config: dict[str, Any] = {}
    if (folder / CONFIG).is_file():
        try:
            config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
        except ValueError:
            config = {}
    state: dict[str, Any] = {"ok": {}, "failed": {}, "bad": [0], "keep": KeepFirstSuccess()}

    def samples() -> Iterator[Sample]:
        for rec in iter_objects(results, state["bad"], ("benchmark", "qid")):
            sample = eval_sample(rec)
            failed = rec.get("status") == "failed"
            if state["keep"].offer(sample.key, not failed) == "skip":
                continue
            slim = {k: v for k, v in rec.items() if k != "trajectory"}
            state["failed" if failed else "ok"][sample.key] = slim
            if not failed:
                state["failed"].pop(sample.key, None)
            yield sample

    def overview(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        run = RunResults(list(state["ok"].values()), state["bad"][0], state["keep"].duplicates, config, results,
                         list(state["failed"].values()))
        return eval_overview(summarize_records(run), config)

    return Source("eval", label, str(path), samples(), overview, tokenizer=run_tokenizer(config, folder))


def eval_overview(summary: dict[str, Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's figures as page blocks: accuracy with CIs, caveats, finish reasons and methods, tool use."""
    facts = [f"{k}: {config[k]}" for k in ("model", "backend", "engine", "started_at") if config.get(k)]
    facts.append(f"records: {summary['records']} (unparsable lines {summary['bad_lines']}, duplicate keys "
                 f"{summary['duplicates']})")
    blocks: list[dict[str, Any]] = [{"title": "Run", "lines": facts + caveat_lines(summary)}]
    rows = []
    for bench, s in summary["benchmarks"].items():
        top = s["pass_at_k"].get(str(s["n_max"]))
        rows.append([bench, s["questions"], s["samples"], s["n_max"], fmt_est(s["avg_at_k"]),
                     fmt_est(top, ci=False), fmt_est(s["maj_at_n"], ci=False)])
    macro = summary["overall"]["avg_at_k_macro"]
    if macro.get("benchmarks", 0) > 1:
        rows.append(["macro average", summary["overall"]["questions"], summary["overall"]["samples"], "",
                     fmt_est(macro), "", ""])
    blocks.append({"title": "Accuracy (%; ± SE [95% bootstrap CI over questions], as in report.md)",
                   "table": {"head": ["benchmark", "questions", "samples", "n", "avg@k", "pass@n", "maj@n"],
                             "rows": rows}})
    over = summary["overall"]
    blocks.append({"title": "Finish reasons and scoring methods",
                   "table": {"head": ["what", "counts"],
                             "rows": [["finish reason", _counts(over["finish_reasons"])],
                                      ["scoring method", _counts(over["scoring_methods"])],
                                      ["samples with an error", over["errors"]]]}})
    tools = over["tools"]
    blocks.append({"title": "Tool use",
                   "table": {"head": ["what", "counts"],
                             "rows": [["calls per tool", _counts(tools["per_tool"]) or "none"],
                                      ["samples by number of calls", _counts(tools["calls_histogram"])]]}})
    return blocks


def caveat_lines(summary: dict[str, Any]) -> list[str]:
    """The report's headline warnings, one short line each."""
    c = summary["overall"].get("caveats") or {}
    lines = []
    for key, what in (("judge_fallback", "scored by EM/F1 fallback, not the judge"),
                      ("lcb_public_only", "LiveCodeBench graded on public tests only"),
                      ("ids_retokenized", "token ids retokenized from text")):
        for bench, (n, total) in (c.get(key) or {}).items():
            lines.append(f"warning: {bench}: {n}/{total} samples {what}")
    infra = c.get("infra_failures") or {}
    if infra.get("total"):
        lines.append(f"warning: {infra['total']} samples failed on infrastructure ({_counts(infra['by_kind'])}), "
                     "in no score")
    not_run = c.get("not_run") or {}
    if not_run.get("total"):
        lines.append(f"warning: incomplete run, {not_run['total']} samples not run yet")
    return lines


def _counts(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in d.items())
