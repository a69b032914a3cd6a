"""afm eval report: report.md tables, PNG plots and summary.json from synthetic run folders (one run and A vs B)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from afm.eval.report import fmt_est, main, write_report

PNG = b"\x89PNG\r\n\x1a\n"


def rec(bench: str, qid: str, sample: int, acc: float, pred: str = "x", level: str | None = None, **kw) -> dict:
    return {"key": f"{bench}/{qid}#{sample}", "benchmark": bench, "qid": qid, "sample": sample,
            "question": f"{bench} question {qid}?", "gold": "g", "level": level, "data_source": bench,
            "score": acc, "acc": acc, "method": "judge", "pred": pred, "finish_reason": "answer",
            "tool_calls": sample + 1, "tool_counts": {"web_search": sample + 1}, "model_tokens": 100 * (sample + 1),
            "observation_tokens": 50, "turns": 2, "wall_s": 3.0, "error": None, **kw}


def write_run(path: Path, records: list[dict], tail: str = "") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    (path / "config.json").write_text(json.dumps({"model": "afm-32b", "prompt_style": "coa", "benchmarks": ["gaia"],
                                                  "settings": {"gaia": {"n": 3, "temperature": 1.0}},
                                                  "started_at": "2026-01-01T00:00:00"}))
    return path


def run_a(path: Path) -> Path:
    """GAIA: 12 questions x 3 samples over levels 1/2/3; question i solved on samples < i % 4 (0..3 of 3)."""
    records = []
    for i in range(12):
        level = str(i % 3 + 1)
        for k in range(3):
            records.append(rec("gaia", f"g{i}", k, 1.0 if k < i % 4 else 0.0, pred=f"ans{i}-{k % 2}", level=level))
    records += [rec("math", f"m{i}", k, float(k == 0), pred=str(k)) for i in range(4) for k in range(2)]
    # a half-written last line, as left by a killed run
    return write_run(path, records, tail='{"key": "gaia/g99#0", "benchmark": "ga')


def run_b(path: Path) -> Path:
    """GAIA: the same 12 questions (+1 only here), never solved, twice the tokens."""
    records = [rec("gaia", f"g{i}", k, 0.0, level=str(i % 3 + 1), model_tokens=200 * (k + 1))
               for i in range(13) for k in range(3)]
    return write_run(path, records)


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 2000, path


def test_single_run_report(tmp_path):
    run = run_a(tmp_path / "a")
    report = write_report(run, resamples=300)
    assert report == run / "report.md"
    text = report.read_text()
    # GAIA avg@3: per question (i % 4)/3 for i = 0..11 -> mean of 0, 1/3, 2/3, 1 = 50.0
    assert "| gaia | 12 | 36 | 3 | 50.0 ± " in text
    assert "| math | 4 | 8 | 2 | 50.0 ± 0.0 [50.0, 50.0] |" in text
    for heading in ("## Accuracy", "## pass@k and maj@k", "## Per level", "## Efficiency",
                    "## Finish reasons and scoring", "## Tool calls", "## Plots"):
        assert heading in text
    assert "| gaia | 1 | 4 |" in text and "| gaia | 3 | 4 |" in text  # per-level rows
    assert "unparsable lines skipped: 1" in text
    assert "| pass@3 |" in text and "| maj@2 |" in text
    assert "## Best-of-N" not in text and "## Comparison" not in text
    summary = json.loads((run / "summary.json").read_text())
    gaia = summary["run"]["benchmarks"]["gaia"]
    assert gaia["avg_at_k"]["value"] == pytest.approx(0.5) and summary["run"]["bad_lines"] == 1
    # pass@2 per question for c = 0, 1, 2, 3 of 3: 0, 2/3, 1, 1 -> mean 2/3
    assert gaia["pass_at_k"]["2"]["value"] == pytest.approx(2 / 3)
    assert summary["other"] is None and summary["comparison"] is None
    for name in ("accuracy.png", "pass_at_k.png", "tool_calls.png"):
        assert f"](plots/{name})" in text
        assert_png(run / "plots" / name)


def test_comparison_report_with_paired_bootstrap(tmp_path):
    a, b = run_a(tmp_path / "a"), run_b(tmp_path / "b")
    out = tmp_path / "cmp"
    report = write_report(a, b, out, selector="majority", resamples=500)
    assert report == out / "report.md" and not (a / "report.md").exists()
    text = report.read_text()
    assert "## Comparison" in text and "## Best-of-N" in text and "](plots/comparison.png)" in text
    assert_png(out / "plots" / "comparison.png")
    # avg@k: A 50.0 vs B 0.0 over the 12 shared questions; all per-question diffs >= 0 and most > 0 -> resolved
    row = next(line for line in text.splitlines() if line.startswith("| gaia | avg@k (%) |"))
    assert "| 12 | 50.0 | 0.0 | 50.0 ± " in row and row.endswith("| yes |")
    cmp = json.loads((out / "summary.json").read_text())["comparison"]["gaia"]
    assert (cmp["shared_questions"], cmp["only_a"], cmp["only_b"]) == (12, 0, 1)
    m = cmp["metrics"]
    assert m["avg_at_k"]["excludes_zero"] and m["avg_at_k"]["ci"][0] > 0
    assert set(m) >= {"avg_at_k", "pass_at_2", "pass_at_3", "maj_at_n", "best_of_n", "total_tokens", "tool_calls"}
    # tokens per sample: A has 100/200/300 model + 50 observation, B 200/400/600 + 50 -> A - B = -200 every time
    assert m["total_tokens"]["value"] == pytest.approx(-200) and m["total_tokens"]["excludes_zero"]
    assert m["tool_calls"]["value"] == 0 and not m["tool_calls"]["excludes_zero"]
    assert "math" not in cmp  # only in A


def test_cli_main_and_fmt(tmp_path, capsys):
    a = run_a(tmp_path / "a")
    out = tmp_path / "out"
    assert main([str(a), "--out", str(out), "--ks", "1,2", "--selector", "majority", "--bootstrap", "200"]) == 0
    assert str(out / "report.md") in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())["run"]
    assert summary["ks"] == [1, 2] and set(summary["benchmarks"]["gaia"]["maj_at_k"]) == {"1", "2"}
    assert summary["benchmarks"]["gaia"]["best_of_n"]["methods"] == {"majority": 12}
    assert main([str(tmp_path / "nothing")]) == 2
    assert "no results file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(a), "--ks", "1,x"])
    assert fmt_est({"value": 0.553, "se": 0.049, "ci": [0.456, 0.65]}) == "55.3 ± 4.9 [45.6, 65.0]"
    assert fmt_est({"value": None}) == "–"


def test_report_on_empty_run(tmp_path):
    run = write_run(tmp_path / "empty", [], tail='{"half')
    text = write_report(run, resamples=100).read_text()
    assert "No results yet." in text and "unparsable lines skipped: 1" in text
    assert_png(run / "plots" / "accuracy.png")


def test_headline_warns_about_fallback_public_tests_and_infrastructure_failures(tmp_path, capsys):
    records = [rec("gaia", f"g{i}", 0, 1.0, method="em_f1_fallback" if i < 2 else "judge") for i in range(3)]
    records += [rec("livecodebench_v5", f"c{i}", 0, 1.0, method="code_tests", tests_from=t)
                for i, t in enumerate(("inline", "file", "file_public_only"))]
    failed = rec("livecodebench_v5", "c9", 0, 0.0, method="code_tests", status="failed",
                 failure="sandbox: sandbox failure: nsjail could not mount /usr")
    engine = rec("gaia", "g9", 0, 0.0, method="not_scored", status="failed", failure="engine: HTTP 503")
    retried = [rec("gaia", "g8", 0, 0.0, status="failed", failure="engine: HTTP 503"), rec("gaia", "g8", 0, 1.0)]
    run = write_run(tmp_path / "run", [*records, failed, engine, *retried])
    assert main([str(run), "--bootstrap", "100"]) == 0
    err = capsys.readouterr().err
    head = (run / "report.md").read_text().split("- run:")[0]
    assert "**Scored by EM/F1 fallback, not the judge** (gaia 2/4 samples)" in head
    assert "**LiveCodeBench graded without private tests** (livecodebench_v5 2/3 samples on public tests only)" in head
    assert "**2 samples failed on infrastructure** (sandbox: 1, engine: 1; livecodebench_v5: 1, gaia: 1)" in head
    assert "warning: Scored by EM/F1 fallback, not the judge" in err and "failed on infrastructure" in err
    summary = json.loads((run / "summary.json").read_text())["run"]
    # the failed samples are in no score; the retried one counts once, with its new result
    assert summary["benchmarks"]["gaia"]["samples"] == 4 and summary["duplicates"] == 0
    assert summary["benchmarks"]["livecodebench_v5"]["samples"] == 3
