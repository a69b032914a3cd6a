"""`afm data filter`: each of the paper's SFT filters on constructed run records, graded by the real scorers
(LLM judge = the OpenAI-compatible stand-in on 127.0.0.1, Math-Verify, code tests in the sandbox)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("httpx")

from afm.data.filters import FilterConfig, apply_filters, format_report
from afm.data.records import RunRecord, read_records
from afm.offline.openai_standin import StandIn
from afm.rewards import Judge, JudgeConfig

REPO = Path(__file__).resolve().parents[1]
CORRECT = json.dumps({"rationale": "same", "judgement": "correct"})
INCORRECT = json.dumps({"rationale": "different", "judgement": "incorrect"})
F = "```"
ADD = "a, b = map(int, input().split())\nprint(a + b)"
CODE_GT = {"stdin": ["1 2\n", "3 4\n"], "expected_output": ["3\n", "7\n"], "question_id": "add"}


def calls(n: int) -> list[dict]:
    return [{"name": "web_search", "argument": f"query {i}", "status": "ok"} for i in range(n)]


def run(run_id: str, question: str, answer: str, *, qid: str | None = None, task: str = "qa", gold=None,
        n_calls: int = 5, reflection: bool = True, status: str = "ok", checks: tuple[int, ...] = (),
        body: str = "") -> RunRecord:
    text = "<think> look it up </think>\n" + body
    if reflection:
        text += "<reflection> the sources agree </reflection>\n"
    text += f"<answer>{answer}</answer>"
    return RunRecord(run_id=run_id, question_id=qid or run_id, question=question, gold=gold, task=task,
                     data_source=task, trajectory=text, final_answer=answer, tool_calls=calls(n_calls),
                     double_checks=[{"score": s, "answer": answer} for s in checks], status=status,
                     error=None if status == "ok" else "no answer")


def paris(run_id: str, answer: str = "Paris", **kw) -> RunRecord:
    kw.setdefault("gold", ["Paris"])
    return run(run_id, "What is the capital of France?", answer, **kw)


@pytest.fixture(scope="module")
def llm():
    with StandIn(default_reply=INCORRECT) as server:
        yield server


@pytest.fixture
def judge(llm, tmp_path):
    llm.reset()
    llm.set_default(INCORRECT)
    # The judge sees "Predicted answer: <answer>": only answers naming Paris are correct.
    llm.rules({"match": r"Predicted answer: [^\n]*Paris", "content": CORRECT})
    j = Judge(JudgeConfig(base_url=llm.base_url, api_key="sk-test", model="judge", timeout=5.0, max_retries=1,
                          backoff=0.01, cache=str(tmp_path / "judge.sqlite")))
    yield j
    j.close()


def all_cases() -> list[RunRecord]:
    return [
        paris("failed", status="failed"),
        paris("few_calls", n_calls=3),
        paris("qa_no_reflection", reflection=False),
        paris("qa_ok"),
        paris("qa_ok_dup", qid="qa_ok"),  # same question and trajectory as qa_ok
        paris("qa_wrong", answer="Lyon"),
        paris("qa_corrected", answer="The city of Paris", checks=(2, 4)),
        paris("qa_corrected_wrong", answer="Marseille", checks=(1, 3)),
        run("math_ok", "What is 1/2 + 0?", "\\frac{1}{2}", task="math", gold="0.5", reflection=False,
            checks=(2, 3)),
        run("math_wrong", "What is 1/3 + 0?", "0.3", task="math", gold="1/3", reflection=False),
        run("code_ok", "Add two numbers.", f"\n{F}python\n{ADD}\n{F}\n", task="code", gold=CODE_GT, reflection=False),
        run("code_wrong", "Add two numbers!", f"\n{F}python\nprint(3)\n{F}\n", task="code", gold=CODE_GT,
            reflection=False),
        run("no_gold", "Who wrote Hamlet?", "Shakespeare", gold=None),
    ]


def test_each_filter_keeps_and_drops_the_right_runs(judge, llm):
    records = all_cases()
    result = apply_filters(records, FilterConfig(score_options={"judge": judge}, progress=False, concurrency=4))
    kept = [r.run_id for r in result.kept]
    assert kept == ["qa_ok", "qa_corrected", "qa_corrected#up1", "math_ok", "math_ok#up1", "code_ok"]
    copy = result.kept[2]
    assert copy.meta["upsampled_from"] == "qa_corrected" and copy.trajectory == result.kept[1].trajectory
    report = result.report()
    by_name = {f["name"]: f for f in report["filters"]}
    assert [f["name"] for f in report["filters"]] == ["status", "complexity", "reflection", "dedup", "quality",
                                                      "upsample"]
    assert by_name["status"] == {**by_name["status"], "in": 13, "out": 12, "reasons": {"status_failed": 1},
                                 "examples": {"status_failed": ["failed"]}}
    assert by_name["complexity"]["reasons"] == {"fewer_than_5_tool_calls": 1}
    assert by_name["reflection"]["reasons"] == {"no_reflection": 1}  # math/code without reflection stay
    assert by_name["dedup"]["examples"] == {"duplicate": ["qa_ok_dup"]}
    assert by_name["quality"]["reasons"] == {"incorrect": 4, "unscored": 1}
    assert set(by_name["quality"]["examples"]["incorrect"]) == {"qa_wrong", "qa_corrected_wrong", "math_wrong",
                                                                 "code_wrong"}
    assert by_name["upsample"] == {**by_name["upsample"], "in": 4, "out": 6, "added": 2}
    assert report["records_in"] == 13 and report["records_out"] == 6
    # correctness came from the real scorers, recorded on the records
    verdicts = {r.run_id: (r.correct, r.meta["quality"]["method"]) for r in result.scored}
    assert verdicts["qa_ok"] == (True, "judge") and verdicts["qa_wrong"] == (False, "judge")
    assert verdicts["math_ok"] == (True, "math_verify") and verdicts["math_wrong"] == (False, "math_verify")
    assert verdicts["code_ok"] == (True, "code_tests") and verdicts["code_wrong"] == (False, "code_tests")
    assert verdicts["no_gold"][0] is None and result.scored[-1].meta["quality"]["error"] == "no gold answer"
    prompts = [r["body"]["messages"][-1]["content"] for r in llm.requests()]
    assert len(prompts) == 4 and all("What is the capital of France?" in p for p in prompts)
    assert "quality methods: judge=4" in format_report(report)


def test_switches_turn_filters_off():
    records = all_cases()
    cfg = FilterConfig(quality=False, reflection=False, dedup=False, upsample_corrected=1, min_tool_calls=0,
                       status=False)
    result = apply_filters(records, cfg)
    assert [r.run_id for r in result.kept] == [r.run_id for r in records]
    assert all(not f["enabled"] and f["in"] == f["out"] == 13 for f in result.report()["filters"])
    # without the quality filter a self-corrected run is upsampled unless known to be wrong
    records = all_cases()
    records[7].correct = False  # qa_corrected_wrong, judged earlier
    result = apply_filters(records, FilterConfig(quality=False, upsample_corrected=3, min_tool_calls=4))
    ids = [r.run_id for r in result.kept]
    assert ids.count("qa_corrected") == 1 and "qa_corrected#up2" in ids and "qa_corrected_wrong#up1" not in ids
    assert "few_calls" not in ids and "qa_ok_dup" not in ids
    with pytest.raises(ValueError, match="upsample_corrected"):
        apply_filters(records, FilterConfig(upsample_corrected=0))


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "afm.cli", "data", "filter", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120, env={**os.environ, **(env or {})})


def test_cli_with_judge_from_env_writes_output_report_and_scored(llm, tmp_path):
    llm.reset()
    llm.set_default(INCORRECT)
    llm.rules({"match": r"Predicted answer: [^\n]*Paris", "content": CORRECT})
    runs = tmp_path / "runs.jsonl"
    records = [paris("a"), paris("b", answer="Lyon"), paris("c", answer="Paris!", checks=(1, 4)), paris("d", n_calls=1)]
    runs.write_text("".join(r.to_json() + "\n" for r in records))
    env = {"GRM_BASE_URL": llm.base_url, "GRM_API_KEY": "sk-test", "AFM_JUDGE_CACHE": "off"}
    res = cli("--input", str(runs), "--output", str(tmp_path / "kept.jsonl"), "--scored-output",
              str(tmp_path / "scored.jsonl"), "--upsample-corrected", "3", "--quiet", env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    kept = list(read_records(tmp_path / "kept.jsonl"))
    assert [r.run_id for r in kept] == ["a", "c", "c#up1", "c#up2"] and all(r.correct for r in kept)
    scored = {r.run_id: r.correct for r in read_records(tmp_path / "scored.jsonl")}
    assert scored == {"a": True, "b": False, "c": True}
    report = json.loads((tmp_path / "kept.report.json").read_text())
    assert report["records_in"] == 4 and report["records_out"] == 4
    assert report["quality_methods"] == {"judge": 3} and report["settings"]["upsample_corrected"] == 3
    assert "quality" in res.stdout and "kept 4 of 4" in res.stdout


def test_cli_errors_name_the_problem(tmp_path):
    res = cli("--input", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "o.jsonl"))
    assert res.returncode == 2 and "input file not found" in res.stderr and "missing.jsonl" in res.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(paris("a").to_json() + "\n" + '{"run_id": "b", "question_id"\n')
    res = cli("--input", str(bad), "--output", str(tmp_path / "o.jsonl"), "--no-quality")
    assert res.returncode == 2 and f"{bad}:2:" in res.stderr
    bad.write_text(json.dumps({"run_id": "x"}) + "\n")
    res = cli("--input", str(bad), "--output", str(tmp_path / "o.jsonl"), "--no-quality")
    assert res.returncode == 2 and ":1:" in res.stderr and "question_id" in res.stderr
    res = cli("--input", str(bad), "--output", str(tmp_path / "o.jsonl"), "--scorer-source", "qa")
    assert res.returncode == 2 and "TASK=DATA_SOURCE" in res.stderr
