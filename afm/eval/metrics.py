"""Metrics over an eval run's ``results.jsonl``: avg@k, unbiased pass@k, maj@k, best-of-N, CIs, efficiency.

Every number is a mean over *questions* of a per-question value, so its uncertainty comes from the questions:
each :class:`Estimate` carries the analytic standard error (sample standard deviation over questions / sqrt(Q))
and a seeded percentile-bootstrap confidence interval (resampling questions with replacement).

- **avg@k**: the mean over a question's samples of ``acc``, averaged over questions (pass@1 averaged over the
  k samples; the paper's avg@16). Each question uses its own sample count, so a run still in progress works.
- **pass@k**: the unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)`` per question (c =
  solved samples), averaged over the questions with at least k samples (the count is reported).
- **maj@k**: majority vote over the normalised answers of a question's first k samples (by sample index,
  :func:`afm.eval.select.select_majority`: ties go to the answer seen first); the score is the ``acc`` of the
  first sample that gave the winning answer.
- **best-of-N**: a selector picks one of the N samples; the score is that sample's ``acc``.

Records stored with ``"status": "failed"`` (infrastructure failures: engine, tool, sandbox, judge; see
:mod:`afm.eval.run`) are no result: they are left out of every metric and counted apart (``infra_failures``),
and a later record of the same key (the retry) replaces them.

A sample counts as *solved* when ``acc >= SOLVED`` (0.5), which is exactly the 0/1 ``acc`` of binary scorers and
a majority of tokens for F1-like ones; pass@k and the efficiency-per-solved-task numbers use it.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from afm.common.table_io import iter_objects
from afm.eval.select import Selection, select_majority

RESULTS = "results.jsonl"
CONFIG = "config.json"
SOLVED = 0.5
RESAMPLES = 2000
CONFIDENCE = 0.95
_CHUNK = 1_000_000  # resampled values held in memory at once by the bootstrap


# -- loading ---------------------------------------------------------------------------------------------------
@dataclass
class RunResults:
    """What :func:`load_results` read: the records (first copy of each key, file order) and what it skipped."""

    records: list[dict[str, Any]]
    bad_lines: int = 0  # unparsable lines (a half-written last line) or lines without benchmark/qid
    duplicates: int = 0  # later copies of a key already seen (the first one is kept)
    config: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    failed: list[dict[str, Any]] = field(default_factory=list)  # infrastructure failures not retried with success


def _results_path(run_dir: str | os.PathLike) -> Path:
    p = Path(run_dir)
    return p if p.is_file() else p / RESULTS


def load_results(run_dir: str | os.PathLike) -> RunResults:
    """Read ``RUN_DIR/results.jsonl`` (or a results file given directly) and ``config.json`` when present.

    Lines that are not JSON objects with ``benchmark`` and ``qid`` are counted in ``bad_lines``, never fatal.
    Raises FileNotFoundError when there is no results file.
    """
    path = _results_path(run_dir)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results file (expected {RESULTS} in the run folder)")
    records, seen, bad, dup = [], set(), [0], 0
    failed: dict[str, dict[str, Any]] = {}  # key -> latest failed record
    for rec in iter_objects(path, bad, ("benchmark", "qid")):
        key = rec.get("key") or f"{rec['benchmark']}/{rec['qid']}#{rec.get('sample', 0)}"
        if rec.get("status") == "failed":
            failed[key] = rec
            continue
        if key in seen:
            dup += 1
            continue
        seen.add(key)
        records.append(rec)
    config: dict[str, Any] = {}
    cfg_path = path.parent / CONFIG
    if cfg_path.is_file():
        try:
            config = json.loads(cfg_path.read_text(encoding="utf-8"))
        except ValueError:
            config = {"error": f"{cfg_path}: not valid JSON"}
    return RunResults(records, bad[0], dup, config, path, [r for k, r in failed.items() if k not in seen])


# -- estimators ------------------------------------------------------------------------------------------------
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one question with ``n`` samples of which ``c`` are correct (Chen et al., 2021).

    ``1 - C(n-c, k) / C(n, k)`` computed as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``, which never forms the large
    binomials. Raises ValueError unless ``0 <= c <= n`` and ``1 <= k <= n``.

    >>> pass_at_k(4, 1, 2)
    0.5
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def standard_error(values: Sequence[float]) -> float | None:
    """Sample standard deviation / sqrt(len); None for fewer than two values."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2:
        return None
    return float(arr.std(ddof=1) / math.sqrt(arr.size))


def bootstrap_means(values: Sequence[float], resamples: int = RESAMPLES, seed: int | Sequence[int] = 0) -> np.ndarray:
    """Means of ``resamples`` resamples (with replacement) of ``values``; the same seed gives the same draws."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return np.full(resamples, np.nan)
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    step = max(1, _CHUNK // arr.size)  # bound memory: PopQA has 14k questions
    for start in range(0, resamples, step):
        b = min(step, resamples - start)
        out[start:start + b] = arr[rng.integers(0, arr.size, size=(b, arr.size))].mean(axis=1)
    return out


def percentile_ci(draws: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The percentile interval of bootstrap draws (None when there are none)."""
    draws = draws[~np.isnan(draws)]
    if draws.size == 0:
        return None
    tail = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(draws, [tail, 100 - tail])
    return float(lo), float(hi)


def bootstrap_ci(values: Sequence[float], resamples: int = RESAMPLES, seed: int | Sequence[int] = 0,
                 confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Percentile bootstrap CI of the mean of ``values`` (resampling the values); None when empty."""
    return percentile_ci(bootstrap_means(values, resamples, seed), confidence)


@dataclass(frozen=True)
class Estimate:
    """A mean over questions with its standard error and bootstrap CI (``n`` = questions counted)."""

    value: float | None
    se: float | None
    ci: tuple[float, float] | None
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "se": self.se, "ci": list(self.ci) if self.ci else None, "questions": self.n}


def estimate(values: Sequence[float], resamples: int = RESAMPLES, seed: int | Sequence[int] = 0,
             confidence: float = CONFIDENCE) -> Estimate:
    """Mean, analytic SE and percentile-bootstrap CI of per-question ``values``."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return Estimate(None, None, None, 0)
    return Estimate(float(arr.mean()), standard_error(arr), bootstrap_ci(arr, resamples, seed, confidence),
                    int(arr.size))


# -- per-question rows -----------------------------------------------------------------------------------------
@dataclass
class Question:
    """A question's samples (sorted by sample index) and the values the metrics are built from."""

    benchmark: str
    qid: str
    level: str | None
    samples: list[dict[str, Any]]
    bo: Selection | None = None  # the best-of-N choice, when a selector ran

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def accs(self) -> list[float]:
        return [_acc(r) for r in self.samples]

    @property
    def c(self) -> int:
        return sum(a >= SOLVED for a in self.accs)

    @property
    def mean_acc(self) -> float:
        return float(np.mean(self.accs))

    @property
    def question(self) -> str:
        return str(self.samples[0].get("question") or "")

    def pass_at(self, k: int) -> float | None:
        return pass_at_k(self.n, self.c, k) if k <= self.n else None

    def maj_at(self, k: int | None = None) -> float | None:
        """maj@k over the first ``k`` samples (all when None); None when there are fewer than k."""
        k = self.n if k is None else k
        if k > self.n:
            return None
        head = self.samples[:k]
        return _acc(head[select_majority([r.get("pred") for r in head])])


def _acc(rec: dict[str, Any]) -> float:
    try:
        value = float(rec.get("acc") if rec.get("acc") is not None else rec.get("score") or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0


def group_questions(records: Iterable[dict[str, Any]]) -> dict[str, list[Question]]:
    """Records grouped by benchmark, then question (first-seen order), samples sorted by sample index."""
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for rec in records:
        grouped.setdefault(str(rec["benchmark"]), {}).setdefault(str(rec["qid"]), []).append(rec)
    out: dict[str, list[Question]] = {}
    for bench, by_qid in grouped.items():
        rows = []
        for qid, recs in by_qid.items():
            recs.sort(key=lambda r: int(r.get("sample") or 0))
            level = next((r.get("level") for r in recs if r.get("level") not in (None, "")), None)
            rows.append(Question(bench, qid, None if level is None else str(level), recs))
        out[bench] = rows
    return out


# -- best-of-N -------------------------------------------------------------------------------------------------
def best_of_n(questions: Sequence[Question], selector: Any, n: int | None = None) -> list[Selection]:
    """Let ``selector`` choose among each question's first ``n`` samples (all when None); sets ``q.bo``.

    ``selector`` is an object with ``select_batch([(question, candidates), ...]) -> [Selection]`` (the
    selectors of :mod:`afm.eval.select`, which batch and cache) or a plain ``(question, candidates) -> index``.
    """
    items = [(q.question, [r.get("pred") for r in q.samples[:n]]) for q in questions]
    if hasattr(selector, "select_batch"):
        chosen = list(selector.select_batch(items))
    else:
        chosen = [Selection(int(selector(question, cands)), getattr(selector, "name", "custom"))
                  for question, cands in items]
    for q, sel, (_, cands) in zip(questions, chosen, items, strict=True):
        if not 0 <= sel.index < len(cands):
            raise ValueError(f"selector chose index {sel.index} for {q.benchmark}/{q.qid} "
                             f"with {len(cands)} candidates")
        q.bo = sel
    return chosen


# -- aggregation -----------------------------------------------------------------------------------------------
def _est(values: Iterable[float | None], opts: dict[str, Any]) -> dict[str, Any]:
    return estimate([v for v in values if v is not None], **opts).to_dict()


def accuracy_metrics(questions: Sequence[Question], ks: Sequence[int], *, resamples: int = RESAMPLES,
                     seed: int = 0, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """avg@k, pass@k (k = 1..max n), maj@k (``ks`` and all samples) and Bo-N (when chosen) over ``questions``."""
    opts = {"resamples": resamples, "seed": seed, "confidence": confidence}
    ns = [q.n for q in questions]
    n_max = max(ns, default=0)
    out: dict[str, Any] = {
        "questions": len(questions), "samples": int(sum(ns)), "n_min": min(ns, default=0), "n_max": n_max,
        "avg_at_k": _est((q.mean_acc for q in questions), opts),
        "pass_at_k": {str(k): _est((q.pass_at(k) for q in questions), opts) for k in range(1, n_max + 1)},
        "maj_at_k": {str(k): _est((q.maj_at(k) for q in questions), opts) for k in ks if 1 <= k <= n_max},
        "maj_at_n": _est((q.maj_at() for q in questions), opts),
    }
    chosen = [q for q in questions if q.bo is not None]
    if chosen:
        bo = _est((_acc(q.samples[q.bo.index]) for q in chosen), opts)
        bo["methods"] = dict(Counter(q.bo.method for q in chosen))
        bo["cached"] = sum(q.bo.cached for q in chosen)
        errors = [q.bo.error for q in chosen if q.bo.error]
        bo["errors"] = len(errors)
        if errors:
            bo["first_error"] = errors[0][:300]
        out["best_of_n"] = bo
    return out


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _num(rec: dict[str, Any], key: str) -> float:
    try:
        value = float(rec.get(key) or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) else 0.0


EFFICIENCY_FIELDS = ("model_tokens", "observation_tokens", "total_tokens", "tool_calls", "turns", "wall_s")


def _cost(rec: dict[str, Any], key: str) -> float:
    if key == "total_tokens":
        return _num(rec, "model_tokens") + _num(rec, "observation_tokens")
    return _num(rec, key)


def efficiency(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean cost per sample over solved samples and over all samples, and total cost per solved sample.

    The paper's efficiency claim (tokens and tool calls per successful task) is ``solved``; ``per_success``
    also charges the failed attempts (total spent / samples solved), which is what a user pays per answer.
    """
    solved = [r for r in records if _acc(r) >= SOLVED]
    out: dict[str, Any] = {"samples": len(records), "solved_samples": len(solved), "solved": {}, "all": {},
                           "per_success": {}, "solved_se": {}}
    for key in EFFICIENCY_FIELDS:
        costs_solved = [_cost(r, key) for r in solved]
        costs_all = [_cost(r, key) for r in records]
        out["solved"][key] = _mean(costs_solved)
        out["solved_se"][key] = standard_error(costs_solved)
        out["all"][key] = _mean(costs_all)
        out["per_success"][key] = float(sum(costs_all) / len(solved)) if solved else None
    return out


def tool_stats(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Histogram of tool calls per sample and calls per tool."""
    hist = Counter(int(_num(r, "tool_calls")) for r in records)
    per_tool: Counter[str] = Counter()
    for r in records:
        for name, count in (r.get("tool_counts") or {}).items():
            per_tool[str(name)] += int(count or 0)
    return {"calls_histogram": {str(k): hist[k] for k in sorted(hist)}, "per_tool": dict(per_tool.most_common())}


def benchmark_summary(questions: Sequence[Question], ks: Sequence[int], *, resamples: int = RESAMPLES,
                      seed: int = 0, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Everything :func:`summarize_run` reports for one benchmark."""
    opts = {"resamples": resamples, "seed": seed, "confidence": confidence}
    records = [r for q in questions for r in q.samples]
    out = accuracy_metrics(questions, ks, **opts)
    out["incomplete_questions"] = sum(q.n < out["n_max"] for q in questions)
    levels = sorted({q.level for q in questions if q.level is not None}, key=lambda s: (len(s), s))
    if levels:
        out["levels"] = {lv: accuracy_metrics([q for q in questions if q.level == lv], ks, **opts) for lv in levels}
    out["efficiency"] = efficiency(records)
    out["finish_reasons"] = dict(Counter(str(r.get("finish_reason")) for r in records).most_common())
    out["scoring_methods"] = dict(Counter(str(r.get("method")) for r in records).most_common())
    out["errors"] = sum(bool(r.get("error")) for r in records)
    out["tools"] = tool_stats(records)
    return out


def _is_lcb(rec: dict[str, Any]) -> bool:
    name = f"{rec.get('data_source') or ''} {rec.get('benchmark') or ''}".lower()
    return "livecodebench" in name or "lcb" in name


def caveats(records: Sequence[dict[str, Any]], failed: Sequence[dict[str, Any]],
            expected: dict[str, int] | None = None) -> dict[str, Any]:
    """What makes a run's scores weaker than they look, per benchmark (the report puts it in its headline).

    ``judge_fallback``: samples scored by EM/F1 because no judge was configured or reachable;
    ``lcb_public_only``: LiveCodeBench samples graded without private tests; ``infra_failures``: samples that
    failed on infrastructure and are in no score, by kind (engine, tool, sandbox, judge); ``not_run``: samples the
    run should hold (``expected``, per benchmark: config.json's ``expected_samples``) that have no record at all,
    because the run was interrupted or is still going; ``ids_retokenized``: samples whose token ids the engine did
    not return (rebuilt from the text, so not token-in-token-out).
    """
    def per_bench(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
        return dict(Counter(str(r["benchmark"]) for r in rows))

    totals = per_bench(records)
    fallback = per_bench(r for r in records if r.get("method") == "em_f1_fallback")
    public = per_bench(r for r in records if _is_lcb(r) and r.get("tests_from") in ("inline", "file_public_only"))
    retokenized = per_bench(r for r in records if r.get("ids_source") == "retokenized")
    kinds = Counter(str(r.get("failure") or "unknown").split(":", 1)[0] for r in failed)
    failed_per_bench = per_bench(failed)
    not_run = {b: n - totals.get(b, 0) - failed_per_bench.get(b, 0) for b, n in (expected or {}).items()}
    not_run = {b: n for b, n in not_run.items() if n > 0}
    return {"judge_fallback": {b: [n, totals[b]] for b, n in fallback.items()},
            "lcb_public_only": {b: [n, totals[b]] for b, n in public.items()},
            "ids_retokenized": {b: [n, totals[b]] for b, n in retokenized.items()},
            "infra_failures": {"total": len(failed), "by_benchmark": failed_per_bench, "by_kind": dict(kinds)},
            "not_run": {"total": sum(not_run.values()), "by_benchmark": not_run}}


def _macro(per_bench: dict[str, dict[str, Any]], resamples: int, seed: int, confidence: float,
           groups: dict[str, list[Question]]) -> dict[str, Any]:
    """Unweighted mean of the benchmarks' avg@k (the paper's "Avg" columns) with a stratified bootstrap."""
    names = [b for b in per_bench if per_bench[b]["avg_at_k"]["value"] is not None]
    if not names:
        return {"value": None, "se": None, "ci": None, "benchmarks": 0}
    value = float(np.mean([per_bench[b]["avg_at_k"]["value"] for b in names]))
    ses = [per_bench[b]["avg_at_k"]["se"] for b in names]
    se = None if any(s is None for s in ses) else math.sqrt(sum(s * s for s in ses)) / len(names)
    # Questions are resampled within each benchmark (independent streams), then the means are averaged.
    draws = np.mean([bootstrap_means([q.mean_acc for q in groups[b]], resamples, (seed, i))
                     for i, b in enumerate(names)], axis=0)
    return {"value": value, "se": se, "ci": list(percentile_ci(draws, confidence) or ()) or None,
            "benchmarks": len(names)}


def default_ks(n_max: int) -> list[int]:
    """Every k up to 8 samples; powers of two plus n beyond that."""
    if n_max <= 8:
        return list(range(1, n_max + 1))
    return sorted({*(2 ** i for i in range(int(math.log2(n_max)) + 1)), n_max})


def summarize_run(run_dir: str | os.PathLike, ks: Sequence[int] | None = None, selector: Any = None, *,
                  bo_n: int | None = None, resamples: int = RESAMPLES, seed: int = 0,
                  confidence: float = CONFIDENCE) -> dict[str, Any]:
    """A JSON-able summary of a run: per benchmark (see :func:`benchmark_summary`) and overall.

    ``ks``: the k values of maj@k (default :func:`default_ks`; pass@k is always given for every k up to the
    largest sample count). ``selector``: best-of-N selector (see :func:`best_of_n`), over the first ``bo_n``
    samples (all when None); no Bo-N without one, or when questions have a single sample.
    """
    results = load_results(run_dir)
    return summarize_records(results, ks, selector, bo_n=bo_n, resamples=resamples, seed=seed,
                             confidence=confidence)


def prepare_groups(results: RunResults, selector: Any = None, bo_n: int | None = None) -> dict[str, list[Question]]:
    """Questions per benchmark, with best-of-N chosen by ``selector`` where a question has several samples."""
    groups = group_questions(results.records)
    if selector is not None:
        for qs in groups.values():
            multi = [q for q in qs if min(q.n, bo_n or q.n) > 1]
            if multi:
                best_of_n(multi, selector, bo_n)
    return groups


def summarize_records(results: RunResults, ks: Sequence[int] | None = None, selector: Any = None, *,
                      bo_n: int | None = None, resamples: int = RESAMPLES, seed: int = 0,
                      confidence: float = CONFIDENCE) -> dict[str, Any]:
    """:func:`summarize_run` on records already loaded."""
    groups = prepare_groups(results, selector, bo_n)
    return summarize_groups(results, groups, ks, selector_name=_selector_name(selector), resamples=resamples,
                            seed=seed, confidence=confidence)


def _expected(config: dict[str, Any]) -> dict[str, int]:
    """Samples per benchmark a complete run holds, from config.json (older runs did not record it: none)."""
    raw = config.get("expected_samples")
    if not isinstance(raw, dict):
        return {}
    return {str(b): int(n) for b, n in raw.items() if isinstance(n, int) and not isinstance(n, bool)}


def _selector_name(selector: Any) -> str | None:
    return None if selector is None else getattr(selector, "name", type(selector).__name__)


def summarize_groups(results: RunResults, groups: dict[str, list[Question]], ks: Sequence[int] | None = None, *,
                     selector_name: str | None = None, resamples: int = RESAMPLES, seed: int = 0,
                     confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The summary of :func:`summarize_run` from :func:`prepare_groups` output."""
    n_max = max((q.n for qs in groups.values() for q in qs), default=0)
    ks = sorted({int(k) for k in ks}) if ks else default_ks(n_max)
    opts = {"resamples": resamples, "seed": seed, "confidence": confidence}
    per_bench = {b: benchmark_summary(qs, ks, **opts) for b, qs in groups.items()}
    all_records = results.records
    overall = {"benchmarks": len(per_bench), "questions": sum(s["questions"] for s in per_bench.values()),
               "samples": len(all_records), "avg_at_k_macro": _macro(per_bench, resamples, seed, confidence, groups),
               "efficiency": efficiency(all_records),
               "finish_reasons": dict(Counter(str(r.get("finish_reason")) for r in all_records).most_common()),
               "scoring_methods": dict(Counter(str(r.get("method")) for r in all_records).most_common()),
               "errors": sum(bool(r.get("error")) for r in all_records), "tools": tool_stats(all_records),
               "caveats": caveats(all_records, results.failed, _expected(results.config))}
    return {"run_dir": str(results.path.parent) if results.path else None, "config": results.config,
            "records": len(all_records), "bad_lines": results.bad_lines, "duplicates": results.duplicates,
            "ks": ks, "solved_threshold": SOLVED, "selector": selector_name,
            "bootstrap": {"resamples": resamples, "seed": seed, "confidence": confidence},
            "benchmarks": per_bench, "overall": overall}


# -- paired comparison of two runs -----------------------------------------------------------------------------
def paired_difference(a: Sequence[float], b: Sequence[float], *, resamples: int = RESAMPLES, seed: int = 0,
                      confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Mean of ``a - b`` over paired questions, its SE and paired-bootstrap CI, and whether the CI excludes 0."""
    if len(a) != len(b):
        raise ValueError(f"paired_difference needs equal lengths; got {len(a)} and {len(b)}")
    diff = estimate(np.asarray(a, float) - np.asarray(b, float), resamples, seed, confidence)
    out = diff.to_dict()
    out["a"] = float(np.mean(a)) if len(a) else None
    out["b"] = float(np.mean(b)) if len(b) else None
    out["excludes_zero"] = bool(diff.ci is not None and (diff.ci[0] > 0 or diff.ci[1] < 0))
    return out


def _per_question(q: Question, metric: str) -> float | None:
    if metric == "avg_at_k":
        return q.mean_acc
    if metric == "maj_at_n":
        return q.maj_at()
    if metric == "best_of_n":
        return _acc(q.samples[q.bo.index]) if q.bo is not None else None
    if metric.startswith("pass_at_"):
        return q.pass_at(int(metric.rsplit("_", 1)[1]))
    if metric in EFFICIENCY_FIELDS:  # cost per sample, averaged over the question's samples
        return float(np.mean([_cost(r, metric) for r in q.samples]))
    raise ValueError(f"unknown metric {metric!r}")


def compare_groups(groups_a: dict[str, list[Question]], groups_b: dict[str, list[Question]], *,
                   resamples: int = RESAMPLES, seed: int = 0, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Run A minus run B per benchmark over the questions both answered (paired bootstrap over questions).

    Metrics: avg@k, pass@k for k up to the smaller run's sample count, maj@n, Bo-N when both have it, and the
    cost per sample (total tokens, tool calls, wall time) on the same questions (the efficiency claim).
    """
    out: dict[str, Any] = {}
    for bench in [b for b in groups_a if b in groups_b]:
        qa = {q.qid: q for q in groups_a[bench]}
        qb = {q.qid: q for q in groups_b[bench]}
        shared = [qid for qid in qa if qid in qb]
        if not shared:
            continue
        k_common = min(min(qa[i].n for i in shared), min(qb[i].n for i in shared))
        metrics = ["avg_at_k", *(f"pass_at_{k}" for k in range(2, k_common + 1)), "maj_at_n"]
        if all(qa[i].bo is not None and qb[i].bo is not None for i in shared):
            metrics.append("best_of_n")
        metrics += ["total_tokens", "tool_calls", "wall_s"]
        rows = {}
        for metric in metrics:
            pairs = [(_per_question(qa[i], metric), _per_question(qb[i], metric)) for i in shared]
            pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
            rows[metric] = paired_difference([x for x, _ in pairs], [y for _, y in pairs], resamples=resamples,
                                             seed=seed, confidence=confidence)
        out[bench] = {"shared_questions": len(shared), "only_a": len(qa) - len(shared),
                      "only_b": len(qb) - len(shared), "metrics": rows}
    return out


def compare_runs(run_a: str | os.PathLike, run_b: str | os.PathLike, selector: Any = None, *,
                 bo_n: int | None = None, resamples: int = RESAMPLES, seed: int = 0,
                 confidence: float = CONFIDENCE) -> dict[str, Any]:
    """:func:`compare_groups` on two run folders (Bo-N compared when a selector is given)."""
    groups = [prepare_groups(load_results(run), selector, bo_n) for run in (run_a, run_b)]
    return compare_groups(groups[0], groups[1], resamples=resamples, seed=seed, confidence=confidence)
