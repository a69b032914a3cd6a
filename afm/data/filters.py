"""``afm data filter``: the paper's SFT filters over a run log, with a per-filter report.

    afm data filter --input runs.jsonl --output kept.jsonl --report filter_report.json \\
        [--min-tool-calls 5] [--upsample-corrected 2] [--no-quality] [--no-reflection] [--no-dedup]

Filters, in the order they run (cheap ones first, so the judge only sees records that could still be kept;
upsampling last, so deduplication never removes its copies):

1. ``status``: failed runs (no answer through the protocol) are dropped;
2. ``complexity``: runs with fewer than ``--min-tool-calls`` tool calls are dropped (paper: 5);
3. ``reflection``: QA/web runs without a reflection step are dropped; math and code runs never are;
4. ``dedup``: exact duplicates of (question, trajectory), whitespace and case normalised, keep the first;
5. ``quality``: correctness through :mod:`afm.rewards` (judge for QA/web, Math-Verify, sandboxed tests); sets
   ``correct``; wrong or unscorable runs are dropped;
6. ``upsample``: correct self-corrected runs (a low double-check score, then an accepted answer) are written
   ``--upsample-corrected`` times in all (copies get ``run_id#upN`` and ``meta.upsampled_from``).

The output is RunRecord JSONL for ``afm data convert``; ``--scored-output`` also writes every record that reached
the quality filter with its ``correct`` set (wrong ones included), which is what ``afm data dpo`` pairs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from afm.data.records import RunRecord, read_records, write_records

REFLECTION_TASKS = ("qa", "web")
DEFAULT_MIN_TOOL_CALLS = 5
DEFAULT_UPSAMPLE = 2
MAX_EXAMPLES = 5
FILTER_ORDER = ("status", "complexity", "reflection", "dedup", "quality", "upsample")


@dataclass
class FilterStats:
    """Counts of one filter: records in and out, drops by reason with example run ids, copies added."""

    name: str
    enabled: bool = True
    n_in: int = 0
    n_out: int = 0
    added: int = 0
    reasons: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def drop(self, record: RunRecord, reason: str) -> None:
        self.reasons[reason] += 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < MAX_EXAMPLES:
            ex.append(record.run_id)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "enabled": self.enabled, "in": self.n_in, "out": self.n_out,
                "dropped": sum(self.reasons.values()), "added": self.added, "reasons": dict(self.reasons),
                "examples": self.examples}


@dataclass
class FilterConfig:
    """Which filters run and how; defaults follow the paper."""

    status: bool = True
    min_tool_calls: int = DEFAULT_MIN_TOOL_CALLS  # 0 switches the complexity filter off
    reflection: bool = True
    dedup: bool = True
    quality: bool = True
    upsample_corrected: int = DEFAULT_UPSAMPLE  # 1 switches upsampling off
    rescore: bool = False  # score records whose ``correct`` is already set again
    concurrency: int = 16
    qa_judge: bool = True
    scorer_sources: dict[str, str] = field(default_factory=dict)
    score_options: dict[str, Any] = field(default_factory=dict)
    progress: bool = True


@dataclass
class FilterResult:
    """Kept records (upsampled copies included), every record the quality step saw, and the stats per filter."""

    kept: list[RunRecord]
    scored: list[RunRecord]
    stats: list[FilterStats]
    quality_methods: Counter = field(default_factory=Counter)

    def report(self, **extra: Any) -> dict[str, Any]:
        first, last = self.stats[0], self.stats[-1]
        return {"records_in": first.n_in, "records_out": last.n_out, "order": list(FILTER_ORDER),
                "filters": [s.to_dict() for s in self.stats], "quality_methods": dict(self.quality_methods),
                **extra}


_WS = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Casefolded with whitespace collapsed: the form duplicates are compared in."""
    return _WS.sub(" ", str(text)).strip().casefold()


def _step(name: str, enabled: bool, records: list[RunRecord],
          reason: Callable[[RunRecord], str | None]) -> tuple[list[RunRecord], FilterStats]:
    stats = FilterStats(name, enabled, n_in=len(records))
    if not enabled:
        stats.n_out = len(records)
        return records, stats
    kept = []
    for rec in records:
        why = reason(rec)
        if why is None:
            kept.append(rec)
        else:
            stats.drop(rec, why)
    stats.n_out = len(kept)
    return kept, stats


def _status_reason(rec: RunRecord) -> str | None:
    return None if rec.status == "ok" else f"status_{rec.status}"


def _reflection_reason(rec: RunRecord) -> str | None:
    return "no_reflection" if rec.task in REFLECTION_TASKS and not rec.has_reflection else None


def _dedup(records: list[RunRecord], enabled: bool) -> tuple[list[RunRecord], FilterStats]:
    seen: set[tuple[str, str]] = set()

    def reason(rec: RunRecord) -> str | None:
        key = (normalize_text(rec.question), normalize_text(rec.trajectory))
        if key in seen:
            return "duplicate"
        seen.add(key)
        return None

    return _step("dedup", enabled, records, reason)


def _quality(records: list[RunRecord], cfg: FilterConfig) -> tuple[list[RunRecord], FilterStats, Counter]:
    from afm.data.quality import score_records_sync

    stats = FilterStats("quality", cfg.quality, n_in=len(records))
    methods: Counter = Counter()
    if not cfg.quality:
        stats.n_out = len(records)
        return records, stats, methods
    todo = [r for r in records if cfg.rescore or r.correct is None]
    results = score_records_sync(todo, concurrency=cfg.concurrency, qa_judge=cfg.qa_judge,
                                 overrides=cfg.scorer_sources, options=cfg.score_options, progress=cfg.progress,
                                 desc="quality")
    for rec, res in zip(todo, results, strict=True):
        rec.correct = res.correct
        rec.meta["quality"] = {"source": res.source, "method": res.method, "error": res.error}
        methods[res.method or "unscored"] += 1
    methods["already_scored"] += len(records) - len(todo)
    if not methods["already_scored"]:
        del methods["already_scored"]
    kept = []
    for rec in records:
        if rec.correct is True:
            kept.append(rec)
        elif rec.correct is False:
            stats.drop(rec, "incorrect")
        else:
            stats.drop(rec, "unscored")
    stats.n_out = len(kept)
    return kept, stats, methods


def _upsample(records: list[RunRecord], times: int) -> tuple[list[RunRecord], FilterStats]:
    stats = FilterStats("upsample", times > 1, n_in=len(records))
    out = []
    for rec in records:
        out.append(rec)
        # With the quality filter off ``correct`` is None: only a known-wrong run is kept from upsampling.
        if times > 1 and rec.self_corrected and rec.correct is not False:
            for k in range(1, times):
                out.append(replace(rec, run_id=f"{rec.run_id}#up{k}",
                                   meta={**rec.meta, "upsampled_from": rec.run_id}))
                stats.added += 1
    stats.n_out = len(out)
    return out, stats


def apply_filters(records: Sequence[RunRecord], config: FilterConfig | None = None) -> FilterResult:
    """Run the filters (module docstring) on ``records``; the records' ``correct`` and ``meta`` are updated."""
    cfg = config or FilterConfig()
    if cfg.min_tool_calls < 0:
        raise ValueError(f"min_tool_calls must be >= 0, got {cfg.min_tool_calls}")
    if cfg.upsample_corrected < 1:
        raise ValueError(f"upsample_corrected must be >= 1 (1 = off), got {cfg.upsample_corrected}")
    stats: list[FilterStats] = []
    recs = list(records)
    recs, s = _step("status", cfg.status, recs, _status_reason)
    stats.append(s)
    recs, s = _step("complexity", cfg.min_tool_calls > 0, recs,
                    lambda r: f"fewer_than_{cfg.min_tool_calls}_tool_calls" if r.n_tool_calls < cfg.min_tool_calls
                    else None)
    stats.append(s)
    recs, s = _step("reflection", cfg.reflection, recs, _reflection_reason)
    stats.append(s)
    recs, s = _dedup(recs, cfg.dedup)
    stats.append(s)
    scored = list(recs) if cfg.quality else []
    recs, s, methods = _quality(recs, cfg)
    stats.append(s)
    recs, s = _upsample(recs, cfg.upsample_corrected)
    stats.append(s)
    return FilterResult(recs, scored, stats, methods)


def format_report(report: dict[str, Any]) -> str:
    """The report as a short table for the terminal."""
    lines = [f"{'filter':<11} {'on':<3} {'in':>7} {'out':>7}  dropped (reasons)"]
    for f in report["filters"]:
        reasons = ", ".join(f"{k}={v}" for k, v in f["reasons"].items())
        extra = f" +{f['added']} copies" if f["added"] else ""
        lines.append(f"{f['name']:<11} {'yes' if f['enabled'] else 'no':<3} {f['in']:>7} {f['out']:>7}  "
                     f"{f['dropped']}{f' ({reasons})' if reasons else ''}{extra}")
    if report.get("quality_methods"):
        lines.append("quality methods: " + ", ".join(f"{k}={v}" for k, v in report["quality_methods"].items()))
    return "\n".join(lines)


def _judge_options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for name in ("base_url", "model", "concurrency", "k"):
        value = getattr(args, f"judge_{name}")
        if value is not None:
            opts[f"judge_{name}"] = value
    if args.code_tests_dir:
        opts["code_tests_dir"] = args.code_tests_dir
    return opts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="afm data filter", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--input", required=True, help="run log JSONL (RunRecords or `afm infer` lines)")
    p.add_argument("--output", required=True, help="kept records, RunRecord JSONL")
    p.add_argument("--report", default=None, help="report JSON (default: OUTPUT with .report.json)")
    p.add_argument("--scored-output", default=None,
                   help="also write every record the quality filter scored, wrong ones included (for afm data dpo)")
    p.add_argument("--task", default=None, choices=["qa", "web", "math", "code"],
                   help="task of `afm infer` lines (RunRecords keep their own)")
    p.add_argument("--data-source", default=None, help="data_source of `afm infer` lines (default: the task)")
    p.add_argument("--no-status", action="store_true", help="keep failed runs")
    p.add_argument("--min-tool-calls", type=int, default=DEFAULT_MIN_TOOL_CALLS,
                   help="complexity filter: fewest tool calls kept (default 5, the paper's; 0 = off)")
    p.add_argument("--no-reflection", action="store_true", help="keep QA/web runs without reflection")
    p.add_argument("--no-dedup", action="store_true", help="keep exact duplicates")
    p.add_argument("--no-quality", action="store_true", help="skip correctness scoring")
    p.add_argument("--rescore", action="store_true", help="score records whose `correct` is already set again")
    p.add_argument("--upsample-corrected", type=int, default=DEFAULT_UPSAMPLE,
                   help="copies in all of each correct self-corrected run (default 2; 1 = off)")
    p.add_argument("--concurrency", type=int, default=16, help="records scored at once")
    p.add_argument("--qa-scorer", choices=["judge", "data-source"], default="judge",
                   help="QA/web runs: the LLM judge (paper; EM fallback without one) or their data source's scorer")
    p.add_argument("--scorer-source", action="append", default=[], metavar="TASK=SOURCE",
                   help="grade TASK with a registered data source's scorer (repeatable), e.g. code=lcb_v5")
    p.add_argument("--judge-base-url", default=None, help="judge endpoint (default $GRM_BASE_URL)")
    p.add_argument("--judge-model", default=None, help="judge model (default $GRM_MODEL_NAME)")
    p.add_argument("--judge-concurrency", type=int, default=None, help="judge requests in flight")
    p.add_argument("--judge-k", type=int, default=None, help="judge votes per verdict")
    p.add_argument("--code-tests-dir", default=None, help="processed LiveCodeBench test cases (private tests)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def load_records(path: str, task: str | None = None, data_source: str | None = None) -> list[RunRecord]:
    """Records of ``path``; ``afm infer`` lines take ``task``/``data_source``; clear errors for bad input."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"input file not found: {path}")
    records = list(read_records(path))
    for rec in records:
        if rec.source == "infer" and task:
            rec.task = task
            rec.data_source = data_source or task
        elif rec.source == "infer" and data_source:
            rec.data_source = data_source
    return records


def main(argv: list[str] | None = None) -> int:
    """``afm data filter``; returns 0, or 2 for bad input."""
    args = build_parser().parse_args(argv)
    try:
        from afm.data.quality import parse_source_overrides

        sources = parse_source_overrides(args.scorer_source)
        records = load_records(args.input, args.task, args.data_source)
        cfg = FilterConfig(status=not args.no_status, min_tool_calls=args.min_tool_calls,
                           reflection=not args.no_reflection, dedup=not args.no_dedup, quality=not args.no_quality,
                           upsample_corrected=args.upsample_corrected, rescore=args.rescore,
                           concurrency=args.concurrency, qa_judge=args.qa_scorer == "judge",
                           scorer_sources=sources,
                           score_options=_judge_options(args), progress=not args.quiet)
        result = apply_filters(records, cfg)
    except (OSError, ValueError) as exc:
        print(f"afm data filter: error: {exc}", file=sys.stderr)
        return 2
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    write_records(args.output, result.kept)
    if args.scored_output:
        write_records(args.scored_output, result.scored)
    report = result.report(input=args.input, output=args.output, settings={
        "min_tool_calls": cfg.min_tool_calls, "upsample_corrected": cfg.upsample_corrected,
        "qa_scorer": args.qa_scorer, "scorer_sources": cfg.scorer_sources, "rescore": cfg.rescore})
    report_path = Path(args.report or str(Path(args.output).with_suffix("")) + ".report.json")
    report_path.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    print(format_report(report))
    print(f"[filter] kept {len(result.kept)} of {len(records)} records -> {args.output}; report {report_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
