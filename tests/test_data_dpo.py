"""`afm data dpo`: pairs from real scored runs, loaded through LLaMA-Factory's DPO pipeline with observation masking."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import lf_config

from afm.data.dpo_pairs import dataset_info_entry, make_pairs
from afm.data.records import RunRecord
from afm.prompts import get_prompt
from afm.trajectory import format_observation

REPO = Path(__file__).resolve().parents[1]


def traj(obs: str, answer: str) -> str:
    return (f"<think> compute it </think>\n<code>\n```py\nprint({answer})\n```\n</code>" + format_observation(obs)
            + f"<reflection> checked </reflection>\n<answer>{answer}</answer>")


def rec(run_id: str, qid: str, answer: str, correct: bool | None, *, status: str = "ok", gold: str = "12") -> RunRecord:
    return RunRecord(run_id=run_id, question_id=qid, question=f"What is question {qid}?", gold=gold, task="math",
                     data_source="math", prompt_key="code_agent", trajectory=traj(f"OBS-{run_id}", answer),
                     final_answer=answer, correct=correct, status=status)


def records() -> list[RunRecord]:
    return [
        rec("a1", "qa", "12", True), rec("a2", "qa", "13", False), rec("a3", "qa", "14", False),
        rec("a4", "qa", "12", True), rec("b1", "qb", "12", True), rec("b2", "qb", "12", True),  # only correct
        rec("c1", "qc", "1", False), rec("c2", "qc", "2", None),  # only incorrect, one unscored
        rec("d1", "qd", "12", True), rec("d2", "qd", "", False, status="failed"),  # failed runs left out
    ]


def test_pairs_group_by_question_and_report():
    pairs, report = make_pairs(records(), pairs_per_question=3)
    assert report.to_dict() == {"records": 10, "questions": 4, "with_both": 1, "only_correct": 2,
                                "only_incorrect": 1, "pairs": 3, "skipped_records": {"unscored": 1, "failed_run": 1},
                                "skipped_pairs": {}}
    system = get_prompt("code_agent").text.strip()
    for p in pairs:
        assert p["instruction"].startswith("What is question qa?") and p["input"] == "" and p["system"].strip() == system
        assert "<answer>12</answer>" in p["chosen"] and "<answer>12</answer>" not in p["rejected"]
    # each trajectory is used once before any is reused: both rejected ones appear in the first two pairs
    assert {p["rejected"] for p in pairs[:2]} == {traj("OBS-a2", "13"), traj("OBS-a3", "14")}
    assert len({(p["chosen"], p["rejected"]) for p in pairs}) == 3
    pairs, report = make_pairs(records(), include_failed=True, fmt="sharegpt", prompt_style="user")
    assert report.pairs == 2 and report.with_both == 2
    first = pairs[0]
    assert first["conversations"][0]["from"] == "human" and first["system"] == ""
    assert "\n\nQuestion: What is question qa?" in first["conversations"][0]["value"]
    assert first["chosen"]["from"] == first["rejected"]["from"] == "gpt"
    with pytest.raises(ValueError, match="pairs_per_question"):
        make_pairs(records(), pairs_per_question=0)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "afm.cli", "data", "dpo", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_cli_scores_inline_and_llamafactory_trains_on_it_masked(tiny_model, tmp_path):
    from afm.sft.masking import IGNORE_INDEX
    from afm.sft.report import preprocess

    runs = tmp_path / "runs.jsonl"
    unscored = [rec(r.run_id, r.question_id, r.final_answer or "", None, status=r.status) for r in records()]
    runs.write_text("".join(r.to_json() + "\n" for r in unscored))
    data = tmp_path / "data"
    for fmt in ("alpaca", "sharegpt"):
        res = cli("--input", str(runs), "--output", str(data / f"pairs_{fmt}.json"), "--score", "--format", fmt,
                  "--dataset-name", f"pairs_{fmt}", "--pairs-per-question", "4", "--quiet")
        assert res.returncode == 0, res.stderr[-2000:]
        # Math-Verify graded the answers: qa has 2 right x 2 wrong, qc 0 right, qb and qd only right
        report = json.loads((data / f"pairs_{fmt}.report.json").read_text())
        assert (report["pairs"], report["with_both"], report["only_correct"], report["only_incorrect"]) == (4, 1, 2, 1)
    info = json.loads((data / "dataset_info.json").read_text())
    assert info["pairs_alpaca"] == dataset_info_entry("pairs_alpaca.json", "alpaca")
    assert info["pairs_sharegpt"]["formatting"] == "sharegpt" and info["pairs_sharegpt"]["ranking"] is True
    for fmt in ("alpaca", "sharegpt"):
        out = preprocess(lf_config(tiny_model, data, tmp_path / fmt, stage="dpo", dataset=f"pairs_{fmt}",
                                   cutoff_len=8192))
        rows = out.dataset_module["train_dataset"]
        assert len(rows) == 4 and out.reports["train"].drops == {}
        for row in rows:
            chosen = out.tokenizer.decode([t for t in row["chosen_labels"] if t != IGNORE_INDEX])
            rejected = out.tokenizer.decode([t for t in row["rejected_labels"] if t != IGNORE_INDEX])
            assert "OBS-" not in chosen and "OBS-" not in rejected  # observations masked on both sides
            assert "<answer>12</answer>" in chosen and "<answer>12</answer>" not in rejected
            prompt = out.tokenizer.decode(row["chosen_input_ids"])
            assert "What is question qa?" in prompt and get_prompt("code_agent").text.strip()[:40] in prompt


def test_cli_errors(tmp_path):
    res = cli("--input", str(tmp_path / "nope.jsonl"), "--output", str(tmp_path / "o.json"))
    assert res.returncode == 2 and "nope.jsonl" in res.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(rec("a", "q", "1", True).to_json() + "\n\nnot json\n")
    res = cli("--input", str(bad), "--output", str(tmp_path / "o.json"))
    assert res.returncode == 2 and f"{bad}:3:" in res.stderr
    only_right = tmp_path / "right.jsonl"
    only_right.write_text(rec("a", "q", "1", True).to_json() + "\n")
    res = cli("--input", str(only_right), "--output", str(tmp_path / "o.json"))
    assert res.returncode == 1 and "0 pairs" in res.stdout and json.loads((tmp_path / "o.json").read_text()) == []
