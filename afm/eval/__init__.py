"""Evaluation harness: benchmark loaders, runs, metrics (avg@k, pass@k, maj@k, best-of-N, CIs) and reports."""

from afm.eval.metrics import (
    Estimate,
    RunResults,
    best_of_n,
    bootstrap_ci,
    compare_runs,
    efficiency,
    estimate,
    load_results,
    paired_difference,
    pass_at_k,
    standard_error,
    summarize_run,
)
from afm.eval.select import JudgeSelector, MajoritySelector, Selection, SelectorConfig, select_majority

__all__ = [
    "Estimate",
    "JudgeSelector",
    "MajoritySelector",
    "RunResults",
    "Selection",
    "SelectorConfig",
    "best_of_n",
    "bootstrap_ci",
    "compare_runs",
    "efficiency",
    "estimate",
    "load_results",
    "paired_difference",
    "pass_at_k",
    "select_majority",
    "standard_error",
    "summarize_run",
    "write_report",
]


def __getattr__(name: str):
    # Imported on first use, so that `python -m afm.eval.report` does not find its own module already imported
    # by the package (runpy warns about that).
    if name == "write_report":
        from afm.eval.report import write_report

        return write_report
    raise AttributeError(f"module 'afm.eval' has no attribute {name!r}")

