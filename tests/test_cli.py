"""`afm` command line: validate, doctor, and the quickstart (the README's main job)."""

from __future__ import annotations

import json

import pytest

from afm.cli import main
from afm.trajectory import format_observation

GOOD = "<think>t</think>\n<web_search>q</web_search>" + format_observation("r") + "<answer>a</answer>"


def test_validate_counts_problems_per_code(tmp_path, capsys):
    path = tmp_path / "d.jsonl"
    rows = [{"output": GOOD}, {"output": GOOD.replace("</observation>", "")}, {"output": "<think>x</think>"},
            {"other": 1}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "4 records, 1 valid, 3 with problems" in out
    assert "unclosed_tag" in out and "missing_answer" in out and "missing_field" in out
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps([{"output": GOOD}]))
    assert main(["validate", str(ok)]) == 0
    assert main(["validate", str(tmp_path / "nope.json")]) == 2


def test_doctor_reports_this_environment(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "llamafactory" in out and "torch" in out and "BAD" not in out


def test_llamafactory_version_range():
    from afm.sft.compat import check_llamafactory_version

    assert check_llamafactory_version("0.9.5") is None
    assert "not supported" in check_llamafactory_version("0.9.1")
    assert "not supported" in check_llamafactory_version("0.10.0")


@pytest.mark.slow
def test_quickstart_runs_the_recipe_in_miniature(tmp_path, capsys):
    """The README's main job on a reduced profile: every stage for real (teacher distillation with the servers and
    sandbox, masked SFT, RL selection, DAPO through verl on the CPU, afm eval after each), and the SFT student must
    learn: a broken pipeline (masking everything, wrong prompt at eval, tools not wired) cannot reach the bar."""
    from afm.quickstart import Profile, run
    from afm.quickstart_rl import rl_python

    try:
        rl_python()
        with_rl = True
    except FileNotFoundError:  # AFM_SKIP_RL=1 runs: scripts/test.sh installs .venv-rl otherwise
        with_rl = False
    profile = Profile(train_per_family=500, rl_per_family=3, heldout_per_family=12, untrained_limit=4,
                      sft_epochs=3.0, rl_samples=4, rl_steps=2)
    summary = run(tmp_path / "qs", profile, rl=with_rl)
    out = capsys.readouterr().out
    assert "[afm] observation masking" in out and "[8/8] summary" in out
    stages = summary["stages"]
    assert list(stages) == (["untrained", "sft", "rl"] if with_rl else ["untrained", "sft"])
    assert set(stages["sft"]) == {"arith", "lookup", "multihop", "calc", "macro"}
    assert stages["untrained"]["macro"] == 0.0
    # the student learned to call the sandboxed code tool with the question's numbers and to copy the result
    assert stages["sft"]["arith"] >= 0.34, summary  # 64% [44, 80] on 25 questions in the default run
    assert summary["tool_calls"]["sft"]["arith"] >= 0.9
    assert summary["questions"] == {"arith": 12, "lookup": 12, "multihop": 12, "calc": 12}
    assert summary["comparisons"]["sft_vs_untrained"]["arith"]["excludes_zero"]
    if with_rl:
        assert len(summary["rl_reward"]) == 2 and "rl_vs_sft" in summary["comparisons"]
    saved = json.loads((tmp_path / "qs" / "summary.json").read_text())
    assert saved["stages"] == json.loads(json.dumps(stages))
    report = (tmp_path / "qs" / "report.md").read_text()
    assert "| sft |" in report and "summary.png" in report
    assert (tmp_path / "qs" / "summary.png").stat().st_size > 10_000
