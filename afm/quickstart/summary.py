"""The quickstart's verdict: accuracy per stage (untrained, SFT, RL) and task family, with CIs, costs and a plot.

Each stage is an ``afm eval run`` folder over the same held-out questions (one benchmark per task family). The
summary is computed with the evaluator's own statistics (:mod:`afm.eval.metrics`: avg@k with a percentile
bootstrap CI per family, the macro mean with a stratified bootstrap, paired differences between stages), so the
quickstart reports exactly what ``afm eval report`` would.

``summary.json``::

    {"stages": {"<stage>": {"<family>": acc, ..., "macro": acc}},
     "ci": {"<stage>": {"<family>": [lo, hi], ..., "macro": [lo, hi]}},
     "questions": {"<family>": n},
     "tool_calls": {"<stage>": {"<family>": mean tool calls per sample}},
     "tokens_per_solved": {"<stage>": {"<family>": mean model+observation tokens of a solved sample}},
     "comparisons": {"<A>_vs_<B>": {"<family>": {"diff", "ci", "excludes_zero"}, ...}},
     "rl_reward": [[step, DAPO reward], ...], "rl_target": {"family", "why"}, ...}

``rl_reward`` and ``rl_target`` are written by the quickstart when it ran (or meant to run) DAPO.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from afm.eval.metrics import compare_runs, summarize_run


def _ci(est: Mapping[str, Any]) -> list[float] | None:
    return list(est["ci"]) if est.get("ci") else None


def stage_summary(runs: Mapping[str, str | Path], compare: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """The summary (module docstring) of eval runs given as ``{stage: run_dir}``, stages in order.

    ``compare``: (A, B) stage pairs for paired differences A - B per family (questions both answered).
    """
    out: dict[str, Any] = {"stages": {}, "ci": {}, "questions": {}, "tool_calls": {}, "tokens_per_solved": {},
                           "samples_per_question": {}, "comparisons": {}}
    for stage, run_dir in runs.items():
        s = summarize_run(run_dir, ks=[1], resamples=1000)
        acc, ci, calls, tokens = {}, {}, {}, {}
        for family, b in sorted(s["benchmarks"].items()):
            acc[family] = b["avg_at_k"]["value"]
            ci[family] = _ci(b["avg_at_k"])
            calls[family] = b["efficiency"]["all"]["tool_calls"]
            tokens[family] = b["efficiency"]["solved"]["total_tokens"]
            out["questions"][family] = b["questions"]
        macro = s["overall"]["avg_at_k_macro"]
        acc["macro"], ci["macro"] = macro["value"], _ci(macro)
        calls["macro"] = s["overall"]["efficiency"]["all"]["tool_calls"]
        tokens["macro"] = s["overall"]["efficiency"]["solved"]["total_tokens"]
        out["stages"][stage], out["ci"][stage] = acc, ci
        out["tool_calls"][stage], out["tokens_per_solved"][stage] = calls, tokens
        out["samples_per_question"][stage] = s["ks"][-1] if s["ks"] else 0
    for a, b in compare:
        if a in runs and b in runs:
            cmp = compare_runs(runs[a], runs[b], resamples=1000)
            out["comparisons"][f"{a}_vs_{b}"] = {
                fam: {"diff": row["metrics"]["avg_at_k"]["value"], "ci": row["metrics"]["avg_at_k"]["ci"],
                      "excludes_zero": row["metrics"]["avg_at_k"]["excludes_zero"],
                      "questions": row["shared_questions"]}
                for fam, row in sorted(cmp.items())}
    return out


def rename_families(summary: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``summary`` with ``prefix`` dropped from every family name (``world_arith`` -> ``arith``), in place."""
    def strip(d: Any) -> Any:
        return {k.removeprefix(prefix): v for k, v in d.items()} if isinstance(d, dict) else d

    for key in ("stages", "ci", "tool_calls", "tokens_per_solved", "comparisons"):
        summary[key] = {stage: strip(v) for stage, v in summary.get(key, {}).items()}
    summary["questions"] = strip(summary.get("questions", {}))
    return summary


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _pct_ci(x: float | None, ci: Sequence[float] | None) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.0f}% [{100 * ci[0]:.0f}, {100 * ci[1]:.0f}]" if ci else f"{100 * x:.0f}%"


def _num(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def families(summary: Mapping[str, Any]) -> list[str]:
    """Task families in the summary (``macro`` last)."""
    names = sorted({f for acc in summary["stages"].values() for f in acc if f != "macro"})
    return [*names, "macro"]


def table(summary: Mapping[str, Any]) -> str:
    """Markdown table: one row per stage, accuracy [95% CI] per family and the macro mean."""
    fams = families(summary)
    lines = ["| stage | " + " | ".join(fams) + " |", "|---|" + "---|" * len(fams)]
    for stage, acc in summary["stages"].items():
        ci = summary["ci"][stage]
        lines.append(f"| {stage} | " + " | ".join(_pct_ci(acc.get(f), ci.get(f)) for f in fams) + " |")
    return "\n".join(lines)


def cost_table(summary: Mapping[str, Any]) -> str:
    """Markdown table: tool calls per task and tokens per solved task, per stage and family."""
    fams = families(summary)
    lines = ["| stage | metric | " + " | ".join(fams) + " |", "|---|---|" + "---|" * len(fams)]
    for stage in summary["stages"]:
        lines.append(f"| {stage} | tool calls / task | "
                     + " | ".join(_num(summary["tool_calls"][stage].get(f)) for f in fams) + " |")
        lines.append(f"| {stage} | tokens / solved task | "
                     + " | ".join(_num(summary["tokens_per_solved"][stage].get(f), 0) for f in fams) + " |")
    return "\n".join(lines)


def comparison_table(summary: Mapping[str, Any]) -> str:
    """Markdown table of the paired differences (percentage points, 95% paired-bootstrap CI)."""
    lines = []
    for name, rows in summary["comparisons"].items():
        a, _, b = name.partition("_vs_")
        lines += [f"**{a} − {b}** (paired over the same questions; *resolved* = the CI excludes 0)", "",
                  "| family | difference | 95% CI | resolved |", "|---|---|---|---|"]
        for fam, row in rows.items():
            ci = row["ci"]
            ci_s = f"[{100 * ci[0]:+.0f}, {100 * ci[1]:+.0f}]" if ci else "–"
            diff = "–" if row["diff"] is None else f"{100 * row['diff']:+.0f} pt"
            lines.append(f"| {fam} | {diff} | {ci_s} | {'yes' if row['excludes_zero'] else 'no'} |")
        lines.append("")
    return "\n".join(lines)


def plot(summary: Mapping[str, Any], path: str | Path) -> Path:
    """One figure: accuracy (with 95% CI), tool calls per task and tokens per solved task, per family and stage."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np

    fams = families(summary)
    stages = list(summary["stages"])
    x = np.arange(len(fams))
    width = 0.8 / max(1, len(stages))
    reward = [(int(step), float(r)) for step, r in summary.get("rl_reward") or []]
    fig, axes = plt.subplots(1, 4 if reward else 3, figsize=(20 if reward else 15, 4))
    panels = (("accuracy (%)", "stages", 100.0), ("tool calls per task", "tool_calls", 1.0),
              ("tokens per solved task", "tokens_per_solved", 1.0))
    for ax, (title, key, scale) in zip(axes[:3], panels, strict=True):
        for i, stage in enumerate(stages):
            vals = [summary[key][stage].get(f) for f in fams]
            ys = [scale * (v or 0.0) for v in vals]
            err = None
            if key == "stages":
                lo_hi = [summary["ci"][stage].get(f) for f in fams]
                err = np.array([[max(0.0, y - scale * c[0]) if c else 0.0 for y, c in zip(ys, lo_hi, strict=True)],
                                [max(0.0, scale * c[1] - y) if c else 0.0 for y, c in zip(ys, lo_hi, strict=True)]])
            ax.bar(x + (i - (len(stages) - 1) / 2) * width, ys, width, yerr=err, capsize=2, label=stage)
        ax.set_xticks(x, fams, rotation=20, fontsize="small")
        ax.set_title(title)
        ax.set_ylim(0, 105) if key == "stages" else ax.set_ylim(bottom=0)
    # above the bars, not on them (the untrained stage's 0% leaves the lower left empty, the trained bars do not)
    axes[0].legend(fontsize="small", ncol=len(stages), loc="lower center", bbox_to_anchor=(0.5, 1.08), frameon=False)
    if reward:  # next to the bars: what DAPO optimised, step by step
        ax = axes[3]
        ax.plot([s for s, _ in reward], [r for _, r in reward], marker="o")
        ax.set_xlabel("DAPO step")
        ax.set_xticks([s for s, _ in reward])  # steps are whole numbers
        ax.set_ylim(-0.05, 1.05)
        target = (summary.get("rl_target") or {}).get("family")
        ax.set_title("DAPO reward per step" + (f" (RL set: {target} questions)" if target else ""))
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _diff(row: Mapping[str, Any] | None) -> str:
    if not row or row.get("diff") is None:
        return "–"
    ci = row.get("ci")
    ci_s = f" [{100 * ci[0]:+.0f}, {100 * ci[1]:+.0f}]" if ci else ""
    return f"{100 * row['diff']:+.0f} pt{ci_s}" + (" (resolved)" if row.get("excludes_zero") else " (not resolved)")


def stage_story(summary: Mapping[str, Any]) -> list[str]:
    """Lines that say what each stage added: SFT over the untrained student, RL over SFT on the family RL was meant
    to fix (``rl_target``) and on the others."""
    stages, cmp = summary["stages"], summary["comparisons"]
    lines = ["## What each stage added", ""]
    if "sft" in stages and "untrained" in stages:
        gains = ", ".join(f"`{f}` {_diff(r)}" for f, r in cmp.get("sft_vs_untrained", {}).items())
        lines.append(f"- **SFT** (distillation + masked SFT): macro {_pct(stages['untrained'].get('macro'))} → "
                     f"{_pct(stages['sft'].get('macro'))}" + (f"; per family {gains}." if gains else "."))
    target = summary.get("rl_target") or {}
    fam = target.get("family")
    if fam:
        lines.append(f"- **RL was meant to fix `{fam}`**: {target.get('why', '')}.")
    if "rl" in stages and "sft" in stages:
        rows = cmp.get("rl_vs_sft", {})
        if fam:
            lines.append(f"- **RL** (DAPO) on `{fam}`: {_pct(stages['sft'].get(fam))} → {_pct(stages['rl'].get(fam))}, "
                         f"{_diff(rows.get(fam))}.")
        others = [f for f in families(summary) if f not in (fam, "macro")]
        lines.append("- RL on the other families: " + ", ".join(f"`{f}` {_diff(rows.get(f))}" for f in others) + ".")
        if summary.get("rl_stopped"):  # the RL row is an earlier step's checkpoint, not the profile's last step
            lines.append(f"- **DAPO stopped early**: {summary['rl_stopped']}")
    elif summary.get("rl_skipped"):
        lines.append(f"- **RL** did not run: {summary['rl_skipped']}")
    return [*lines, ""]


def write_report(summary: dict[str, Any], out_dir: str | Path, notes: Sequence[str] = ()) -> tuple[Path, Path]:
    """``summary.json`` and ``report.md`` (tables, the plot ``summary.png``, ``notes`` as a list) in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = plot(summary, out / "summary.png")
    summary_path = out / "summary.json"
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    qs = ", ".join(f"{f} {n}" for f, n in sorted(summary["questions"].items()))
    lines = ["# Quickstart: the recipe in miniature", "",
             f"Held-out questions per family: {qs}. Accuracy is avg@k over each stage's samples, with a 95% "
             "percentile-bootstrap CI over questions; *macro* is the unweighted mean over families (stratified "
             "bootstrap).", "", *stage_story(summary), table(summary), "", cost_table(summary), "",
             comparison_table(summary),
             f"![accuracy, tool calls and tokens per stage; the DAPO reward per step]({png.name})", ""]
    if notes:
        lines += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return summary_path, report
