"""`afm` command line: validate, doctor, and the quickstart (the README's main job)."""

from __future__ import annotations

import json
from pathlib import Path

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
def test_quickstart_runs_end_to_end(tmp_path, capsys):
    from afm.quickstart import run

    result = run(tmp_path / "qs", sft_epochs=1.0, dpo_epochs=1.0, n_sft=16, n_dpo=8)
    out = capsys.readouterr().out
    assert "[afm] observation masking" in out and "unclosed_observation" in out
    assert "SFT loss" in out and "DPO loss" in out
    assert len(result["curves"]["sft"]) >= 2 and len(result["curves"]["dpo"]) >= 1
    assert result["mask_report"]["train"]["samples_dropped"] == 2
    assert (tmp_path / "qs" / "dpo" / "model.safetensors").exists()
    # step 6: rollouts through the engine with the real search server and sandbox
    rollouts = result["rollouts"]
    records = [json.loads(line) for line in Path(rollouts["trajectories"]).read_text().splitlines()]
    assert len(records) == 4 and rollouts["summary"]["trajectories"] == 4
    for r in records:
        assert r["finish_reason"] in ("answer", "eos", "max_tokens", "max_turns")
        assert r["segments"] and r["segments"][0]["kind"] == "model" and r["counts"]["model_tokens"] > 0
    assert "rollouts: the SFT model answers demo questions" in out and "finish reasons:" in out
    assert "servers up on 127.0.0.1" in out
    for tool in ("web_search", "crawl_page", "wiki_search"):
        assert f"</{tool}> -> ok:" in out, out[-3000:]
    # step 7: evaluation of the SFT model on the demo benchmarks, with a report
    evaluation = result["evaluation"]
    assert evaluation["exit_code"] == 0
    results = [json.loads(line) for line in (Path(evaluation["run_dir"]) / "results.jsonl").read_text().splitlines()]
    assert len(results) == 16 and {r["benchmark"] for r in results} == {"demo_math", "demo_code", "demo_mhqa",
                                                                         "demo_web"}
    assert all(r["acc"] in (0.0, 1.0) and r["method"] for r in results)
    assert Path(evaluation["report"]).exists() and "[7/7] evaluation" in out
