"""``afm eval report RUN_DIR [OTHER_RUN]``: ``report.md`` + PNG plots + ``summary.json`` for an eval run.

    afm eval report runs/eval/web-32b                        # one run
    afm eval report runs/eval/rl runs/eval/sft --out cmp/    # A vs B, paired over the questions both answered
    afm eval report runs/eval/web-32b --selector judge      # Bo-N with the LLM selector (GRM_* env)

Accuracies are percentages: value ± standard error [95% percentile-bootstrap CI over questions]. In a
comparison, a difference is *resolved* only when the CI of the paired difference excludes 0 (anchors §4.4: on
GAIA-103 one question is worth ~1 point and the SE is ~5 points). Plots use matplotlib's Agg backend and are
linked from the markdown with relative paths (``plots/*.png`` next to ``report.md``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from afm.eval.metrics import (
    CONFIDENCE,
    RESAMPLES,
    compare_groups,
    load_results,
    prepare_groups,
    summarize_groups,
)
from afm.eval.select import get_selector

PLOTS = "plots"
logger = logging.getLogger(__name__)


# -- formatting ------------------------------------------------------------------------------------------------
def _pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}"


def fmt_est(est: dict[str, Any] | None, ci: bool = True) -> str:
    """``55.3 ± 4.9 [45.6, 65.0]`` from an estimate dict (percent)."""
    if not est or est.get("value") is None:
        return "–"
    text = _pct(est["value"])
    if est.get("se") is not None:
        text += f" ± {_pct(est['se'])}"
    if ci and est.get("ci"):
        text += f" [{_pct(est['ci'][0])}, {_pct(est['ci'][1])}]"
    return text


def _num(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "–"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


# -- plots -----------------------------------------------------------------------------------------------------
def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)  # files only: never open a window, works without a display
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def _int_ticks() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:  # an empty run has nothing to label
        ax.legend(fontsize="small")


def _err(est: dict[str, Any]) -> tuple[float, float]:
    """Asymmetric error bar (percent) from the CI, else ± SE, else none."""
    v = est.get("value") or 0.0
    if est.get("ci"):
        return 100 * max(0.0, v - est["ci"][0]), 100 * max(0.0, est["ci"][1] - v)
    se = est.get("se") or 0.0
    return 100 * se, 100 * se


def plot_accuracy(summaries: Sequence[tuple[str, dict[str, Any]]], path: Path) -> Path:
    """Bars of avg@k per benchmark with CI error bars; one bar per run side by side when several runs."""
    plt = _plt()
    benches = list(dict.fromkeys(b for _, s in summaries for b in s["benchmarks"]))
    width = 0.8 / max(1, len(summaries))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(benches) * max(1, len(summaries)) + 1.5), 3.6))
    for i, (label, s) in enumerate(summaries):
        ests = [s["benchmarks"].get(b, {}).get("avg_at_k", {}) for b in benches]
        xs = [j + (i - (len(summaries) - 1) / 2) * width for j in range(len(benches))]
        # a benchmark missing from one run gets no bar (NaN), not a bar at 0 that reads as "all wrong"
        vals = [100 * e["value"] if e.get("value") is not None else float("nan") for e in ests]
        errs = list(zip(*[_err(e) for e in ests], strict=True)) if ests else [[], []]
        ax.bar(xs, vals, width=width, yerr=errs, capsize=4, label=label)
    ax.set_xticks(range(len(benches)), benches, rotation=20 if len(benches) > 4 else 0)
    ax.set_xlim(-0.6, len(benches) - 0.4)
    ax.set_ylabel("avg@k accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Accuracy per benchmark ({int(100 * CONFIDENCE)}% bootstrap CI)")
    if len(summaries) > 1:
        _legend(ax)
    return _save(fig, path)


def plot_pass_at_k(summary: dict[str, Any], path: Path) -> Path:
    """pass@k curves (k = 1..n) per benchmark, maj@k as dashed markers."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for bench, s in summary["benchmarks"].items():
        ks = [int(k) for k, e in s["pass_at_k"].items() if e["value"] is not None]
        line = ax.plot(ks, [100 * s["pass_at_k"][str(k)]["value"] for k in ks], marker="o", label=bench)[0]
        mk = [int(k) for k, e in s["maj_at_k"].items() if e["value"] is not None]
        if len(mk) > 1:
            ax.plot(mk, [100 * s["maj_at_k"][str(k)]["value"] for k in mk], linestyle="--", marker="x",
                    color=line.get_color(), alpha=0.7)
    ax.xaxis.set_major_locator(_int_ticks())
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("pass@k (%)  —  dashed: maj@k")
    ax.set_ylim(0, 100)
    ax.set_title("pass@k (unbiased estimator)")
    _legend(ax)
    return _save(fig, path)


def plot_tool_calls(summary: dict[str, Any], path: Path) -> Path:
    """Share of samples by number of tool calls, one bar group per benchmark."""
    plt = _plt()
    benches = summary["benchmarks"]
    counts = sorted({int(c) for s in benches.values() for c in s["tools"]["calls_histogram"]}) or [0]
    width = 0.8 / max(1, len(benches))
    fig, ax = plt.subplots(figsize=(max(4.5, 0.5 * len(counts) * max(1, len(benches)) + 2), 3.4))
    for i, (bench, s) in enumerate(benches.items()):
        hist = s["tools"]["calls_histogram"]
        total = sum(hist.values()) or 1
        xs = [c + (i - (len(benches) - 1) / 2) * width for c in counts]
        ax.bar(xs, [100 * hist.get(str(c), 0) / total for c in counts], width=width, label=bench)
    ax.xaxis.set_major_locator(_int_ticks())
    ax.set_xlabel("tool calls per sample")
    ax.set_ylabel("samples (%)")
    ax.set_title("Tool calls per trajectory")
    _legend(ax)
    return _save(fig, path)


# -- markdown sections -----------------------------------------------------------------------------------------
def _caveat_lines(summary: dict[str, Any]) -> list[str]:
    """The headline warnings: scores graded by a weaker method than the benchmark's, and samples in no score."""
    c = summary["overall"].get("caveats") or {}
    lines = []

    def share(items: dict[str, list[int]]) -> str:
        return ", ".join(f"{b} {n}/{total} samples" for b, (n, total) in items.items())

    if c.get("judge_fallback"):
        lines.append(f"> **Scored by EM/F1 fallback, not the judge** ({share(c['judge_fallback'])}): no judge was "
                     "configured or reachable (GRM_BASE_URL, GRM_API_KEY, GRM_MODEL_NAME).")
    if c.get("lcb_public_only"):
        lines.append(f"> **LiveCodeBench graded without private tests** ({share(c['lcb_public_only'])} on public "
                     "tests only): scores are too high. Set LIVECODEBENCH_TESTCASES_DIR "
                     "(`python -m afm.eval.lcb_testcases`).")
    if c.get("ids_retokenized"):
        lines.append(f"> **Token ids retokenized from text** ({share(c['ids_retokenized'])}): the engine returned no "
                     "sampled ids, so these trajectories are not token-in-token-out (serve with vLLM, SGLang or "
                     "llama-server; `--engine`).")
    infra = c.get("infra_failures") or {}
    if infra.get("total"):
        kinds = ", ".join(f"{k}: {n}" for k, n in infra["by_kind"].items())
        benches = ", ".join(f"{b}: {n}" for b, n in infra["by_benchmark"].items())
        lines.append(f"> **{infra['total']} samples failed on infrastructure** ({kinds}; {benches}) and are in no "
                     "score; run the same `afm eval run` command again to retry them.")
    not_run = c.get("not_run") or {}
    if not_run.get("total"):
        benches = ", ".join(f"{b}: {n}" for b, n in not_run["by_benchmark"].items())
        lines.append(f"> **Incomplete run: {not_run['total']} samples not run yet** ({benches}); the scores are "
                     "over the samples run so far. Run the same `afm eval run` command again to finish them.")
    return [*lines, ""] if lines else []


def _engine_line(cfg: dict[str, Any]) -> list[str]:
    """The engine that served the run, as afm eval run found it; an ``engine`` of ``auto`` (runs from before the
    found one was recorded) is the flag, which names no engine."""
    engine = cfg.get("engine")
    if engine is None or engine == "auto":
        return []
    how = " (found by `--engine auto`)" if cfg.get("engine_flag") == "auto" else ""
    return [f"- engine: `{engine}`{how}"]


def _header(summary: dict[str, Any], title: str) -> list[str]:
    cfg = summary.get("config") or {}
    lines = [f"# {title}", "", *_caveat_lines(summary), f"- run: `{summary.get('run_dir')}`"]
    for key in ("model", "backend", "engine", "prompt_style", "started_at", "seed"):
        if key == "engine":
            lines += _engine_line(cfg)
        elif cfg.get(key) is not None:
            lines.append(f"- {key}: `{cfg[key]}`")
    if cfg.get("settings"):
        lines.append(f"- sampling: `{json.dumps(cfg['settings'], sort_keys=True)}`")
    lines.append(f"- records: {summary['records']} (unparsable lines skipped: {summary['bad_lines']}, "
                 f"duplicate keys skipped: {summary['duplicates']})")
    b = summary["bootstrap"]
    lines += [f"- uncertainty: value ± SE over questions [{int(100 * b['confidence'])}% percentile bootstrap CI, "
              f"{b['resamples']} resamples, seed {b['seed']}]; a sample counts as solved when acc ≥ "
              f"{summary['solved_threshold']}", ""]
    return lines


def _accuracy_section(summary: dict[str, Any]) -> list[str]:
    rows = []
    for bench, s in summary["benchmarks"].items():
        n = str(s["n_max"]) if s["n_min"] == s["n_max"] else f"{s['n_min']}–{s['n_max']}"
        top = s["pass_at_k"].get(str(s["n_max"]))
        rows.append([bench, s["questions"], s["samples"], n, fmt_est(s["avg_at_k"]),
                     f"pass@{s['n_max']}: {fmt_est(top, ci=False)}", fmt_est(s["maj_at_n"], ci=False),
                     fmt_est(s.get("best_of_n"), ci=False) if s.get("best_of_n") else "–"])
    macro = summary["overall"]["avg_at_k_macro"]
    if macro["benchmarks"] > 1:
        rows.append(["**macro average**", summary["overall"]["questions"], summary["overall"]["samples"], "",
                     fmt_est(macro), "", "", ""])
    lines = ["## Accuracy", "", "avg@k = pass@1 averaged over each question's k samples (its own n when a run is "
             "incomplete).", ""]
    lines += _table(["benchmark", "questions", "samples", "n/question", "avg@k ± SE [95% CI]", "pass@n",
                     "maj@n", "Bo-N"], rows)
    incomplete = {b: s["incomplete_questions"] for b, s in summary["benchmarks"].items() if s["incomplete_questions"]}
    if incomplete:
        lines += [f"Questions with fewer samples than the most complete one: {incomplete}.", ""]
    return lines


def _pass_section(summary: dict[str, Any]) -> list[str]:
    lines = ["## pass@k and maj@k", "", "Unbiased pass@k (Chen et al. 2021) over the questions with at least k "
             "samples; maj@k votes over the first k samples' normalised answers.", ""]
    for bench, s in summary["benchmarks"].items():
        rows = [[f"pass@{k}", fmt_est(e), e["questions"]] for k, e in s["pass_at_k"].items()]
        rows += [[f"maj@{k}", fmt_est(e), e["questions"]] for k, e in s["maj_at_k"].items()]
        lines += [f"### {bench}", "", *_table(["metric", "% ± SE [95% CI]", "questions"], rows)]
    return lines


def _bo_section(summary: dict[str, Any]) -> list[str]:
    rows = []
    for bench, s in summary["benchmarks"].items():
        bo = s.get("best_of_n")
        if bo:
            methods = ", ".join(f"{m}: {c}" for m, c in bo["methods"].items())
            rows.append([bench, fmt_est(bo), methods, bo["cached"], bo["errors"]])
    if not rows:
        return []
    return ["## Best-of-N", "", f"Selector: `{summary['selector']}` (judge = the selector model chose; trivial = all "
            "answers agreed; majority_fallback = the model failed and the majority vote decided).", "",
            *_table(["benchmark", "Bo-N % ± SE [95% CI]", "selections", "cached", "errors"], rows)]


def _level_section(summary: dict[str, Any]) -> list[str]:
    rows = []
    for bench, s in summary["benchmarks"].items():
        for level, m in (s.get("levels") or {}).items():
            top = m["pass_at_k"].get(str(m["n_max"]))
            rows.append([bench, level, m["questions"], fmt_est(m["avg_at_k"]),
                         f"pass@{m['n_max']}: {fmt_est(top, ci=False)}", fmt_est(m["maj_at_n"], ci=False),
                         fmt_est(m.get("best_of_n"), ci=False) if m.get("best_of_n") else "–"])
    if not rows:
        return []
    return ["## Per level", "", *_table(["benchmark", "level", "questions", "avg@k ± SE [95% CI]", "pass@n",
                                         "maj@n", "Bo-N"], rows)]


def _efficiency_section(summary: dict[str, Any]) -> list[str]:
    rows = []
    items = list(summary["benchmarks"].items())
    if len(items) > 1:
        items.append(("**all**", {"efficiency": summary["overall"]["efficiency"]}))
    for bench, s in items:
        e = s["efficiency"]
        sol, al, per = e["solved"], e["all"], e["per_success"]
        rows.append([bench, f"{e['solved_samples']}/{e['samples']}", _num(sol["total_tokens"]),
                     _num(sol["model_tokens"]), _num(sol["tool_calls"]), _num(sol["wall_s"]),
                     _num(al["total_tokens"]), _num(al["tool_calls"]), _num(al["wall_s"]),
                     _num(per["total_tokens"]), _num(per["tool_calls"])])
    return ["## Efficiency", "", "Mean cost of a solved sample (the paper's \"per successful task\", anchors §1.5), "
            "of any sample, and total cost divided by the samples solved (failed attempts included). Tokens = model "
            "+ observation tokens.", "",
            *_table(["benchmark", "solved/samples", "tokens/solved", "model tokens/solved", "tool calls/solved",
                     "wall s/solved", "tokens/sample", "tool calls/sample", "wall s/sample", "tokens per success",
                     "tool calls per success"], rows)]


def _counts_section(summary: dict[str, Any]) -> list[str]:
    benches = summary["benchmarks"]
    reasons = list(dict.fromkeys(r for s in benches.values() for r in s["finish_reasons"]))
    methods = list(dict.fromkeys(m for s in benches.values() for m in s["scoring_methods"]))
    lines = ["## Finish reasons and scoring", ""]
    lines += _table(["benchmark", *reasons, "errors"],
                    [[b, *(s["finish_reasons"].get(r, 0) for r in reasons), s["errors"]] for b, s in benches.items()])
    lines += _table(["benchmark", *(f"scored by {m}" for m in methods)],
                    [[b, *(s["scoring_methods"].get(m, 0) for m in methods)] for b, s in benches.items()])
    lines += ["## Tool calls", ""]
    lines += _table(["benchmark", "calls per tool", "samples by number of calls"],
                    [[b, ", ".join(f"{t}: {c}" for t, c in s["tools"]["per_tool"].items()) or "–",
                      ", ".join(f"{k}: {c}" for k, c in s["tools"]["calls_histogram"].items())]
                     for b, s in benches.items()])
    return lines


_METRIC_NAMES = {"avg_at_k": "avg@k (%)", "maj_at_n": "maj@n (%)", "best_of_n": "Bo-N (%)",
                 "total_tokens": "tokens/sample", "tool_calls": "tool calls/sample", "wall_s": "wall s/sample"}


def _comparison_section(comparison: dict[str, Any], label_a: str, label_b: str) -> list[str]:
    lines = ["## Comparison", "", f"A = `{label_a}`, B = `{label_b}`. Paired over the questions both runs "
             "answered: A − B ± SE [95% paired-bootstrap CI]; *resolved* = the CI excludes 0.", ""]
    if not comparison:
        return [*lines, "No benchmark with questions in both runs.", ""]
    rows = []
    for bench, c in comparison.items():
        for metric, d in c["metrics"].items():
            name = _METRIC_NAMES.get(metric, metric.replace("pass_at_", "pass@") + " (%)")
            if metric in ("total_tokens", "tool_calls", "wall_s"):
                diff = "–" if d["value"] is None else f"{_num(d['value'])} ± {_num(d['se'])}" + (
                    f" [{_num(d['ci'][0])}, {_num(d['ci'][1])}]" if d["ci"] else "")
                a, b = _num(d["a"]), _num(d["b"])
            else:
                diff, a, b = fmt_est(d), _pct(d["a"]), _pct(d["b"])
            rows.append([bench, name, c["shared_questions"], a, b, diff, "yes" if d["excludes_zero"] else "no"])
    lines += _table(["benchmark", "metric", "shared questions", "A", "B", "A − B", "resolved"], rows)
    only = {b: (c["only_a"], c["only_b"]) for b, c in comparison.items() if c["only_a"] or c["only_b"]}
    if only:
        lines += [f"Questions in only one run (A, B), left out of the pairing: {only}.", ""]
    return lines


# -- entry points ----------------------------------------------------------------------------------------------
VIEW = "view.html"


def _write_viewer(viewer: Callable[[list[Path], Path], Any], runs: list[Path], path: Path) -> bool:
    """Run ``viewer``; False (and a warning) when it fails: the report never fails for its viewer."""
    try:
        viewer(runs, path)
    except Exception as exc:  # any failure of the page is the page's, not the report's
        logger.warning("afm eval report: the trajectory viewer was not written (%s: %s)", type(exc).__name__, exc)
        return False
    return True


def _write_text(path: Path, text: str) -> None:
    """Write then rename, so a killed report never leaves a half-written file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def write_report(run_dir: str | os.PathLike, other_run: str | os.PathLike | None = None,
                 out_dir: str | os.PathLike | None = None, *, ks: Sequence[int] | None = None, selector: Any = None,
                 bo_n: int | None = None, resamples: int = RESAMPLES, seed: int = 0,
                 viewer: Callable[[list[Path], Path], Any] | None = None) -> Path:
    """Write ``report.md``, ``summary.json`` and ``plots/*.png`` into ``out_dir`` (default ``run_dir``).

    ``selector``: None, ``"majority"``, ``"judge"`` or a selector object (see :func:`afm.eval.metrics.best_of_n`).
    With ``other_run`` the report adds a paired comparison (this run = A, the other = B). ``viewer(runs, path)``
    writes the trajectory viewer page (``afm view``; the CLI passes it in, as afm.eval may not import the viewer)
    to ``view.html`` beside the report, which links it; a viewer that fails is a logged warning, never a failed
    report. Returns the path of ``report.md``.
    """
    if isinstance(selector, str):
        selector = get_selector(selector)
    out = Path(out_dir) if out_dir is not None else Path(run_dir)
    opts = {"resamples": resamples, "seed": seed}
    sel_name = None if selector is None else getattr(selector, "name", type(selector).__name__)
    runs = [run_dir] + ([other_run] if other_run is not None else [])
    analysed = []
    for run in runs:
        results = load_results(run)
        groups = prepare_groups(results, selector, bo_n)
        analysed.append((groups, summarize_groups(results, groups, ks, selector_name=sel_name, **opts)))
    summary = analysed[0][1]
    labels = [str(Path(r)) for r in runs]
    comparison = compare_groups(analysed[0][0], analysed[1][0], **opts) if other_run is not None else None

    out.mkdir(parents=True, exist_ok=True)  # only now: a mistyped run folder must not be created
    plots = out / PLOTS
    figures = [("Accuracy", plot_accuracy([(labels[0], summary)], plots / "accuracy.png"))]
    if any(s["n_max"] > 1 for s in summary["benchmarks"].values()):
        figures.append(("pass@k", plot_pass_at_k(summary, plots / "pass_at_k.png")))
    figures.append(("Tool calls", plot_tool_calls(summary, plots / "tool_calls.png")))
    if comparison is not None:
        figures.append(("A vs B", plot_accuracy([("A", summary), ("B", analysed[1][1])], plots / "comparison.png")))

    lines = _header(summary, f"Eval report: {Path(run_dir).name}")
    if viewer is not None and _write_viewer(viewer, [Path(r) for r in runs], out / VIEW):
        lines += [f"Every sample and trajectory, filterable, in [the trajectory viewer ({VIEW})]({VIEW}) "
                  "(one self-contained HTML file: open it in any browser).", ""]
    if not summary["benchmarks"]:
        lines += ["No results yet.", ""]
    else:
        lines += _accuracy_section(summary) + _pass_section(summary) + _bo_section(summary)
        lines += _level_section(summary) + _efficiency_section(summary) + _counts_section(summary)
    if comparison is not None:
        lines += _comparison_section(comparison, labels[0], labels[1])
    lines += ["## Plots", ""]
    lines += [f"![{title}]({path.relative_to(out).as_posix()})" for title, path in figures] + [""]

    _write_text(out / "summary.json", json.dumps({"run": summary, "other": analysed[1][1] if comparison is not None
                                                  else None, "comparison": comparison}, indent=1, default=str))
    report = out / "report.md"
    _write_text(report, "\n".join(lines))
    return report


def main(argv: list[str] | None = None, viewer: Callable[[list[Path], Path], Any] | None = None) -> int:
    """``afm eval report RUN_DIR [OTHER_RUN] [--out DIR] [--ks 1,2,4] [--selector none|majority|judge]``;
    ``viewer``: see :func:`write_report`."""
    p = argparse.ArgumentParser(prog="afm eval report", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="run folder with results.jsonl (A)")
    p.add_argument("other_run", nargs="?", default=None, help="second run folder to compare with (B)")
    p.add_argument("--out", default=None, help="output folder (default: RUN_DIR)")
    p.add_argument("--ks", default=None, help="comma-separated k values for maj@k (default: 1..n, or powers of 2)")
    p.add_argument("--selector", choices=("none", "majority", "judge"), default="none",
                   help="best-of-N selector (judge: an LLM via GRM_BASE_URL/GRM_API_KEY/GRM_MODEL_NAME)")
    p.add_argument("--bo-n", type=int, default=None, help="best-of-N over the first N samples (default: all)")
    p.add_argument("--bootstrap", type=int, default=RESAMPLES, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    args = p.parse_args(argv)
    try:
        ks = [int(k) for k in args.ks.split(",") if k.strip()] if args.ks else None
    except ValueError:
        p.error(f"--ks must be comma-separated integers, got {args.ks!r}")
    if ks and min(ks) < 1:
        p.error("--ks values must be >= 1")
    try:
        path = write_report(args.run_dir, args.other_run, args.out, ks=ks, selector=args.selector, bo_n=args.bo_n,
                            resamples=args.bootstrap, seed=args.seed, viewer=viewer)
    except FileNotFoundError as exc:
        print(f"afm eval report: {exc}", file=sys.stderr)
        return 2
    summary = json.loads((path.parent / "summary.json").read_text())["run"]
    for line in _caveat_lines(summary):  # the headline's warnings, on the console too
        if line:
            print("warning: " + line.lstrip("> ").replace("**", ""), file=sys.stderr)
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
