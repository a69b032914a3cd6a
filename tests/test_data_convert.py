"""``afm data distill`` -> ``afm data convert`` -> LLaMA-Factory preprocessing with observation masking."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import lf_config
from teacher_replies import PLANNER, code_run_rules, rule

from afm.data import convert, distill
from afm.data.records import read_records
from afm.offline.openai_standin import StandIn
from afm.sft.report import preprocess
from afm.trajectory import find_observations


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three questions: two good runs (5 code calls each) and one whose planner never follows the format."""
    work = tmp_path_factory.mktemp("distill")
    questions = work / "questions.jsonl"
    rows = [{"id": "a", "question": "Six times seven, in parts?", "answer": "42"},
            {"id": "b", "question": "Forty-two, computed twice?", "answer": "42"},
            {"id": "c", "question": "BROKEN planner question", "answer": "0"}]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / "tools.yaml").write_text(yaml.safe_dump({"tools": [{"name": "code", "config": {"timeout": 10}}]}))
    out = work / "runs.jsonl"
    with StandIn(default_reply="(no rule matched)") as llm:
        llm.rules(rule(f"{PLANNER}.*Question: BROKEN", "I refuse to use the format."), *code_run_rules(n_code=5))
        rc = distill.main(["--input", str(questions), "--output", str(out), "--tools-config", str(work / "tools.yaml"),
                           "--tools", "code", "--prompt-key", "afm_all_tools", "--concurrency", "2", "--no-progress",
                           "--set", f"default.base_url={llm.base_url}", "--set", "default.model=teacher-m"])
    assert rc == 0
    return out


def test_distill_writes_ok_and_failed_runs(runs):
    recs = {r.question_id: r for r in read_records(runs)}
    assert recs["a"].status == recs["b"].status == "ok" and recs["a"].n_tool_calls == 5
    assert recs["c"].status == "failed" and recs["c"].trajectory == ""
    assert recs["c"].error.startswith("off-protocol reply from planner after 3 attempts")
    summary = json.loads(runs.with_name("runs.summary.json").read_text())
    assert summary["status"] == {"ok": 2, "failed": 1} and summary["tool_calls_by_name"] == {"code": 10}


def test_convert_alpaca_and_sharegpt(runs, tmp_path):
    broken = next(r for r in read_records(runs) if r.status == "ok")
    broken.run_id, broken.trajectory = "x#0", broken.trajectory.replace("</plan>", "", 1)  # unclosed tag
    unordered = next(r for r in read_records(runs) if r.status == "ok")
    unordered.run_id = "y#0"
    unordered.trajectory = unordered.trajectory.replace("\n<think>The double check scored 4, so I give the final "
                                                        "answer.</think>", "")  # <answer> without its <think>
    log = tmp_path / "all.jsonl"
    log.write_text(runs.read_text() + broken.to_json() + "\n" + unordered.to_json() + "\n")
    out = tmp_path / "sft"
    rc = convert.main(["--input", str(log), "--output-dir", str(out), "--format", "both"])
    assert rc == 0
    report = json.loads((out / "afm_distill_sft.report.json").read_text())
    assert report["converted"] == 2 and report["failed_runs_skipped"] == 1 and report["invalid"] == 2
    assert report["invalid_by_reason"] == {"unclosed_tag": 1, "missing_think": 1}
    assert report["invalid_examples"]["missing_think"]["run_id"] == "y#0"
    assert (out / "afm_distill_sft.runs.jsonl").read_text() == log.read_text()  # the run log is kept beside it
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["afm_distill_sft"]["columns"]["response"] == "output"
    assert info["afm_distill_sft_sharegpt"]["formatting"] == "sharegpt"
    alpaca = json.loads((out / "afm_distill_sft.json").read_text())
    share = json.loads((out / "afm_distill_sft_sharegpt.json").read_text())
    assert len(alpaca) == len(share) == 2
    assert alpaca[0]["instruction"].startswith("You are a research agent with three tools")
    assert alpaca[0]["instruction"].endswith("\n\nQuestion: Six times seven, in parts?") or \
        alpaca[0]["instruction"].endswith("\n\nQuestion: Forty-two, computed twice?")
    assert share[0]["conversations"][1]["value"] == alpaca[0]["output"]
    assert len(find_observations(alpaca[0]["output"])) == 5
    rc = convert.main(["--input", str(log), "--output-dir", str(tmp_path / "sys"), "--prompt-style", "system",
                       "--name", "s", "--no-copy-log"])
    row = json.loads((tmp_path / "sys" / "s.json").read_text())[0]
    assert rc == 0 and row["system"].startswith("You are a research agent") and row["instruction"].endswith("?")


def test_converted_data_goes_through_sft_masking(runs, tmp_path, tiny_model):
    out = tmp_path / "sft"
    assert convert.main(["--input", str(runs), "--output-dir", str(out), "--format", "both"]) == 0
    for name in ("afm_distill_sft", "afm_distill_sft_sharegpt"):
        cfg = lf_config(tiny_model, out, tmp_path / f"lf-{name}", dataset=name, cutoff_len=8192)
        report = preprocess(cfg).reports["train"]
        assert report.samples_seen == report.samples_kept == 2 and report.drops == {}
        assert report.observations == 10  # 5 code observations per trajectory, all masked
        assert 0 < report.tokens_masked < report.tokens_target


def test_convert_rejects_bad_input(tmp_path, capsys):
    assert convert.main(["--input", str(tmp_path / "missing.jsonl"), "--output-dir", str(tmp_path)]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"run_id": "a#0"}\n')
    assert convert.main(["--input", str(bad), "--output-dir", str(tmp_path)]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_infer_rows_stored_as_failed_are_failed_and_a_retry_replaces_them(tmp_path):
    # afm infer stores an engine error or a tool infrastructure failure with status "failed" (whatever the finish
    # reason says) and appends the retried trajectory under the same key on the next run
    base = {"question": "q", "gold": "g", "tool_calls": [], "meta": {}}
    lines = [
        {**base, "key": "a#0", "id": "a", "finish_reason": "answer", "status": "failed", "response": "old",
         "failure": "tool: web_search unavailable"},
        {**base, "key": "b#0", "id": "b", "finish_reason": "error", "status": "failed", "response": "",
         "failure": "engine: HTTP 500"},
        {**base, "key": "a#0", "id": "a", "finish_reason": "answer", "status": "ok", "response": "new",
         "answer": "g"},
    ]
    runs = tmp_path / "infer.jsonl"
    runs.write_text("".join(json.dumps(d) + "\n" for d in lines))
    recs = list(read_records(runs))
    assert [(r.run_id, r.status, r.trajectory) for r in recs] == [("a#0", "ok", "new"), ("b#0", "failed", "")]
    assert recs[1].error == "engine: HTTP 500"
    runs.write_text(json.dumps(lines[0]) + "\n")
    only = next(read_records(runs))
    assert (only.status, only.error) == ("failed", "tool: web_search unavailable")
