"""`afm data select`: pass rates from real `afm infer` samples (tiny model; stand-in server), the paper's web
threshold and code N/N rule, SFT exclusion, seeded sampling, and the RL parquet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from afm.data.difficulty import FewerSamplesWarning, Sample, exclusion_keys, read_samples, select_questions
from afm.offline.openai_standin import StandIn
from afm.rewards import exact_match

REPO = Path(__file__).resolve().parents[1]
F = "```"


def q(qid: str, answer="yes", question: str | None = None) -> dict:
    return {"_id": qid, "id": qid, "question": question or f"Question {qid}?", "answer": answer}


def samples(qid: str, right: int, wrong: int, *, unfinished_right: int = 0) -> list[Sample]:
    out = [Sample(f"{qid}#{k}", qid, "Yes.", "", True) for k in range(right)]
    out += [Sample(f"{qid}#w{k}", qid, "no", "", True) for k in range(wrong)]
    out += [Sample(f"{qid}#u{k}", qid, "yes", "", False) for k in range(unfinished_right)]
    return out


def test_web_threshold_exclusion_sampling_and_warnings(tmp_path):
    qs = [q("at"), q("above"), q("zero"), q("unfinished"), q("few"), q("none"), q("sft_id"), q("sft_text")]
    ss = (samples("at", 3, 7) + samples("above", 4, 6) + samples("zero", 0, 10)
          + samples("unfinished", 0, 5, unfinished_right=5) + samples("few", 1, 3) + samples("sft_id", 0, 10)
          + samples("sft_text", 0, 10) + [Sample("x#0", "stranger", "yes", "", True)])
    sft = tmp_path / "sft.json"  # an alpaca SFT set in the user prompt style, and a run record
    sft.write_text(json.dumps([{"instruction": "You are an agent...\n\nQuestion:   question SFT_TEXT? ", "input": "",
                                "output": "<answer>no</answer>"}]))
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"run_id": "r1", "question_id": "sft_id", "question": "different text"}) + "\n")
    ids, texts = exclusion_keys([sft, runs])
    assert "sft_id" in ids and "question sft_text?" in texts
    with pytest.warns(FewerSamplesWarning, match="1 question"):
        sel = select_questions(qs, ss, mode="web", n=10, exclude_ids=ids, exclude_questions=texts)
    decision = {r.qid: (r.decision, r.rate) for r in sel.rates}
    assert decision == {"at": ("kept", 0.3), "above": ("too_easy", 0.4), "zero": ("kept", 0.0),
                        "unfinished": ("kept", 0.0), "few": ("kept", 0.25), "none": ("no_samples", None),
                        "sft_id": ("in_sft_set", None), "sft_text": ("in_sft_set", None)}
    assert [row["id"] for row in sel.kept] == ["at", "zero", "unfinished", "few"] and "_id" not in sel.kept[0]
    assert sel.fewer_than_n == ["few"] and sel.unknown_sample_ids == 1
    # a seeded random subset of the eligible questions, kept in input order
    picks = [select_questions(qs, ss, mode="web", n=4, max_questions=2, seed=s).kept for s in (1, 1, 2, 3, 4)]
    assert picks[0] == picks[1] and len(picks[0]) == 2
    assert len({tuple(r["id"] for r in p) for p in picks}) > 1
    assert all([r["id"] for r in p] == sorted((r["id"] for r in p), key=[x["id"] for x in qs].index) for p in picks)
    counts = select_questions(qs, ss, mode="web", n=4, max_questions=2, seed=1).counts
    assert counts["kept"] == 2 and counts["not_sampled"] == 4


def test_code_rule_drops_questions_solved_in_every_sample():
    qs = [q("all"), q("seven"), q("none")]
    ss = samples("all", 8, 0) + samples("seven", 7, 1) + samples("none", 0, 8)
    sel = select_questions(qs, ss, mode="code", scorer="em")
    assert {r.qid: r.decision for r in sel.rates} == {"all": "solved_every_sample", "seven": "kept", "none": "kept"}
    with pytest.raises(ValueError, match="mode"):
        select_questions(qs, ss, mode="math")


def test_code_mode_grades_programs_in_the_sandbox():
    gt = {"stdin": ["1 2\n"], "expected_output": ["3\n"], "question_id": "add"}
    good = f"<answer>\n{F}python\na, b = map(int, input().split())\nprint(a + b)\n{F}\n</answer>"
    bad = f"<answer>\n{F}python\nprint(4)\n{F}\n</answer>"
    qs = [q("easy", gt), q("hard", gt)]
    ss = [Sample(f"easy#{k}", "easy", None, good, True) for k in range(2)]
    ss += [Sample("hard#0", "hard", None, good, True), Sample("hard#1", "hard", None, bad, True)]
    sel = select_questions(qs, ss, mode="code", n=2, progress=False)
    assert {r.qid: (r.decision, r.correct) for r in sel.rates} == {"easy": ("solved_every_sample", 2),
                                                                   "hard": ("kept", 1)}


def select_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "afm.cli", "data", "select", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=180)


def expected_rates(records: list[dict], golds: dict[str, str]) -> dict[str, float]:
    """Pass rates computed here from the raw infer records: mean EM of finished samples' answers."""
    per: dict[str, list[bool]] = {}
    for r in records:
        ok = r["finish_reason"] == "answer" and bool(r["answer"]) and exact_match(r["answer"], [golds[r["id"]]])
        per.setdefault(r["id"], []).append(ok)
    return {k: sum(v) / len(v) for k, v in per.items()}


def test_infer_samples_from_a_served_model_then_select(tiny_model, tmp_path):
    questions = {"qA": ("Capital of Velmora?", "Ostrand"), "qB": ("River of Kiriva?", "Aster"),
                 "qC": ("Founder of Dunmere?", "Ada Merrow"), "qD": ("Tallest tower of Quillon?", "Spire"),
                 "qE": ("Oldest bridge of Lunhold?", "Harrow")}
    qfile = tmp_path / "qa.jsonl"
    qfile.write_text("".join(json.dumps({"id": k, "question": v[0], "answer": v[1]}) + "\n"
                             for k, v in questions.items()))
    with StandIn(tokenizer=str(tiny_model)) as llm:
        # answers per question over 4 samples: qA 4/4 right, qB 1/4, qC 2/4, qD 0/4 (qE is in the SFT set)
        rules = []
        for qid, right in (("qA", 4), ("qB", 1), ("qC", 2), ("qE", 4)):
            text, gold = questions[qid]
            rules.append({"match": text.replace("?", r"\?"), "content": f"<think> t </think>\n<answer>{gold}</answer>",
                          "times": right})
        rules.append({"match": "", "content": "<think> t </think>\n<answer>Nowhere</answer>"})
        llm.rules(*rules)
        samples_path = tmp_path / "samples.jsonl"
        run = subprocess.run([sys.executable, "-m", "afm.cli", "infer", "--input", str(qfile), "--output",
                              str(samples_path), "--backend", "openai", "--base-url", llm.base_url, "--model", "standin",
                              "--tokenizer", str(tiny_model), "--prompt", "web_agent", "--n", "4", "--concurrency",
                              "4", "--quiet"], capture_output=True, text=True, cwd=REPO, timeout=180)
    assert run.returncode == 0, run.stderr[-2000:]
    records = [json.loads(line) for line in samples_path.read_text().splitlines()]
    expected = expected_rates(records, {k: v[1] for k, v in questions.items()})
    assert expected == {"qA": 1.0, "qB": 0.25, "qC": 0.5, "qD": 0.0, "qE": 1.0}
    sft = tmp_path / "sft.jsonl"
    sft.write_text(json.dumps({"id": "other", "question": "oldest  bridge of LUNHOLD?"}) + "\n")
    out = tmp_path / "rl" / "web.parquet"
    res = select_cli("--questions", str(qfile), "--samples", str(samples_path), "--output", str(out), "--mode", "web",
                     "--n", "4", "--exclude", str(sft), "--rates", str(tmp_path / "rates.jsonl"), "--quiet")
    assert res.returncode == 0, res.stderr[-2000:]
    rates = {r["id"]: r for r in map(json.loads, (tmp_path / "rates.jsonl").read_text().splitlines())}
    assert {k: v["pass_rate"] for k, v in rates.items() if v["pass_rate"] is not None} == \
        {k: v for k, v in expected.items() if k != "qE"}
    assert {k: v["decision"] for k, v in rates.items()} == {"qA": "too_easy", "qB": "kept", "qC": "too_easy",
                                                             "qD": "kept", "qE": "in_sft_set"}
    report = json.loads((tmp_path / "rl" / "web.select.json").read_text())
    assert report["kept"] == report["rl_rows"] == 2 and report["decisions"]["too_easy"] == 2
    assert report["mean_pass_rate"] == pytest.approx((1.0 + 0.25 + 0.5 + 0.0) / 4)
    assert report["solved_count_histogram"] == {"0/4": 1, "1/4": 1, "2/4": 1, "4/4": 1}
    assert sum(b["count"] for b in report["pass_rate_histogram"]) == 4
    import pandas as pd

    df = pd.read_parquet(out)
    assert [e["id"] for e in df["extra_info"]] == ["qB", "qD"] and set(df["data_source"]) == {"search"}
    assert df["extra_info"].map(lambda e: e["index"]).is_unique


def test_real_tiny_model_samples_pass_rates_match(tiny_model, tmp_path):
    qfile = tmp_path / "qa.jsonl"
    qfile.write_text("".join(json.dumps({"id": f"d{i}", "question": f"What is {i} * {i}?", "answer": str(i * i)})
                             + "\n" for i in range(3)))
    samples_path = tmp_path / "samples.jsonl"
    run = subprocess.run([sys.executable, "-m", "afm.cli", "infer", "--input", str(qfile), "--output",
                          str(samples_path), "--backend", "hf", "--model", str(tiny_model), "--prompt", "code_agent",
                          "--n", "3", "--seed", "0", "--max-turns", "2", "--max-tokens-per-turn", "24",
                          "--max-response-tokens", "48", "--max-model-len", "4096", "--quiet"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert run.returncode in (0, 1), run.stderr[-2000:]
    records = [json.loads(line) for line in samples_path.read_text().splitlines()]
    assert len(records) == 9 and {r["id"] for r in records} == {"d0", "d1", "d2"}
    # Make one question certainly "solved": its gold becomes what a finished sample answered, if any did.
    golds = {f"d{i}": str(i * i) for i in range(3)}
    answered = [r for r in records if r["finish_reason"] == "answer" and r["answer"]]
    if answered:
        golds[answered[0]["id"]] = answered[0]["answer"]
    qfile.write_text("".join(json.dumps({"id": k, "question": f"What is {k[1]} * {k[1]}?", "answer": v}) + "\n"
                             for k, v in golds.items()))
    expected = expected_rates(records, golds)
    parsed = read_samples(samples_path)
    assert len(parsed) == 9
    from afm.data.difficulty import read_questions

    sel = select_questions(read_questions(qfile), parsed, mode="web", n=3, threshold=0.3, progress=False)
    assert {r.qid: r.rate for r in sel.rates} == pytest.approx(expected)
    assert {r.qid for r in sel.rates if r.decision == "kept"} == {k for k, v in expected.items() if v <= 0.3}


def test_cli_errors(tmp_path):
    qfile = tmp_path / "qa.jsonl"
    qfile.write_text(json.dumps({"id": "a", "question": "Q?", "answer": "x"}) + "\n{bad\n")
    res = select_cli("--questions", str(qfile), "--samples", str(qfile), "--output", str(tmp_path / "o.parquet"),
                     "--mode", "web")
    assert res.returncode == 2 and f"{qfile}:2:" in res.stderr
    qfile.write_text(json.dumps({"id": "a", "question": "Q?", "answer": "x"}) + "\n")
    res = select_cli("--questions", str(qfile), "--samples", str(tmp_path / "none.jsonl"), "--output",
                     str(tmp_path / "o.parquet"), "--mode", "web")
    assert res.returncode == 2 and "none.jsonl" in res.stderr
    res = select_cli("--questions", str(qfile), "--samples", str(qfile), "--output", str(tmp_path / "o.parquet"),
                     "--mode", "web")
    assert res.returncode == 2 and "neither an `afm infer` line" in res.stderr
