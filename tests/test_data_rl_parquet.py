"""afm.data.rl_parquet: question/answer files -> verl RL parquet rows, validation with a report, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from afm.data.cli import main as data_main
from afm.data.rl_parquet import (
    RLBuildReport,
    build_rl_rows,
    encode_ground_truth,
    filter_prompt_length,
    main,
    read_items,
    split_rows,
    write_rl_parquet,
)
from afm.prompts import build_messages, get_prompt
from afm.rewards.ground_truth import normalize_ground_truth


@pytest.mark.parametrize(("answer", "stored"), [
    ("Paris", "Paris"),
    ("  Paris ", "Paris"),
    (["Paris", " City of Paris "], '["Paris", "City of Paris"]'),
    (("a", 3), '["a", "3"]'),
    (42, "42"),
    (2.5, "2.5"),
    ("[0, 1)", '{"target": ["[0, 1)"]}'),         # not JSON: wrapped so no scorer decodes it
    ("{1, 2}", '{"target": ["{1, 2}"]}'),
    ("[1, 2]", '{"target": ["[1, 2]"]}'),         # a JSON list of numbers is a vector answer, kept whole
    ('["x", "y"]', '["x", "y"]'),                 # already an encoded alias list
    ('{"target": ["x"]}', '{"target": ["x"]}'),   # already an encoded ground-truth object
    ({"stdin": ["1\n"], "expected_output": ["2\n"]}, '{"expected_output": ["2\\n"], "stdin": ["1\\n"]}'),
])
def test_encode_ground_truth(answer, stored):
    assert encode_ground_truth(answer) == stored


def test_encoded_ground_truths_mean_what_was_given():
    for answer, kind, targets in [("[0, 1)", "math", ("[0, 1)",)), ("[0, 1)", "qa", ("[0, 1)",)),
                                  (["a", "b"], "qa", ("a", "b")), ("[1, 2]", "qa", ("[1, 2]",)),
                                  (7, "math", ("7",))]:
        assert normalize_ground_truth(encode_ground_truth(answer), "src", kind).targets == targets


@pytest.mark.parametrize(("answer", "reason"), [
    (None, "missing_answer"), ("", "empty_answer"), ("  ", "empty_answer"), ([], "empty_answer"),
    (["", " "], "empty_answer"), ({}, "empty_answer"), (True, "bad_answer"), ([["nested"]], "bad_answer"),
    ({"x": object()}, "bad_answer"), (object(), "bad_answer"),
])
def test_encode_ground_truth_rejects(answer, reason):
    with pytest.raises(ValueError) as err:
        encode_ground_truth(answer)
    assert err.value.reason == reason


ITEMS = [
    {"id": 1, "question": "Who wrote Hamlet?", "answer": "Shakespeare"},
    {"id": 1, "question": "Capital of France?", "answer": ["Paris", "City of Paris"]},   # repeated id: kept
    {"id": 3, "question": "  capital of   FRANCE? ", "answer": "Lyon"},                  # repeat, other answer
    {"id": 4, "question": "Who wrote Hamlet?", "answer": "Shakespeare"},                 # repeat, same answer
    {"id": 5, "question": "", "answer": "x"},
    {"id": 6, "question": 12, "answer": "x"},
    {"id": 7, "question": "Q7?", "answer": []},
    {"id": 8, "question": "Q8?"},
    {"id": 9, "question": "Q9?", "answer": True},
    {"id": 10, "answer": "x"},
    "not a dict",
    {"id": 12, "question": "x" * 60_000, "answer": "x"},
]


def test_build_rows_validates_and_reports():
    rows, report = build_rl_rows(ITEMS, data_source="nq", prompt_key="mhqa")
    assert report.total == len(ITEMS) and report.kept == 2 == len(rows)
    assert report.dropped == {"duplicate_question": 2, "empty_question": 1, "non_string_question": 1,
                              "empty_answer": 1, "missing_answer": 1, "bad_answer": 1, "missing_question": 1,
                              "not_a_mapping": 1, "question_too_long": 1}
    assert report.n_dropped == 10
    assert report.duplicate_ids == 1 and report.conflicting_duplicates == 1
    assert report.examples["empty_question"][0] == {"where": "item 5", "id": "5", "detail": ""}
    assert report.prompt_ref == get_prompt("mhqa").ref
    text = report.summary()
    assert "kept 2, dropped 10" in text and "duplicate_question" in text
    d = report.to_dict()
    assert d["n_dropped"] == 10 and "missing_answer" in d["reasons"]
    json.dumps(d)


def test_row_layout():
    rows, _ = build_rl_rows(ITEMS[:2], data_source="nq", prompt_key="mhqa", ability="fact-reasoning", split="test")
    row = rows[1]
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"}
    assert row["prompt"] == build_messages(get_prompt("mhqa"), "Capital of France?")
    assert row["ability"] == "fact-reasoning" and row["agent_name"] == "afm_agent"
    assert row["reward_model"] == {"style": "rule", "ground_truth": '["Paris", "City of Paris"]'}
    info = row["extra_info"]
    assert info["question"] == "Capital of France?" and info["answer"] == '["Paris", "City of Paris"]'
    assert info["split"] == "test" and info["id"] == "1" and info["agent_name"] == "afm_agent"
    assert info["tools_kwargs"] == {"wiki_search": {"create_kwargs": {"data_source": "nq", "question_id": "1"}}}
    assert info["need_tools_kwargs"] is True
    assert info["index"].startswith("nq-000001-") and info["index"] != rows[0]["extra_info"]["index"]


def test_index_is_unique_even_with_repeated_or_missing_ids():
    items = [{"question": f"q{i}?", "answer": "a"} for i in range(50)]
    items += [{"id": "same", "question": f"r{i}?", "answer": "a"} for i in range(50)]
    rows, report = build_rl_rows(items, data_source="hotpotqa", prompt_key="mhqa")
    indices = [r["extra_info"]["index"] for r in rows]
    assert len(set(indices)) == 100 and report.duplicate_ids == 49
    assert rows[0]["extra_info"]["id"] == indices[0]  # no id: the index stands in
    # the same input gives the same indices (reproducible builds)
    assert [r["extra_info"]["index"] for r in build_rl_rows(items, data_source="hotpotqa", prompt_key="mhqa")[0]] \
        == indices


def test_tools_agent_name_and_kwargs():
    rows, report = build_rl_rows(ITEMS[:1], data_source="gaia", prompt_key="web_agent", tools=["web_search"],
                                 agent_name=None, tools_kwargs={"web_search": {"create_kwargs": {"k": 1},
                                                                               "execute_kwargs": {"num": 5}}})
    row = rows[0]
    assert "agent_name" not in row and "agent_name" not in row["extra_info"]
    assert row["extra_info"]["tools_kwargs"] == {"web_search": {
        "create_kwargs": {"data_source": "gaia", "question_id": "1", "k": 1}, "execute_kwargs": {"num": 5}}}
    assert report.warnings == []
    rows, report = build_rl_rows(ITEMS[:1], data_source="gaia", prompt_key="web_agent", tools=[])
    assert "tools_kwargs" not in rows[0]["extra_info"] and rows[0]["extra_info"]["need_tools_kwargs"] is False
    _, report = build_rl_rows(ITEMS[:1], data_source="gaia", prompt_key="web_agent", tools=["code"])
    assert any("not enabled by prompt" in w for w in report.warnings)


def test_unknown_data_source_warns_and_bad_arguments_raise():
    rows, report = build_rl_rows(ITEMS[:1], data_source="my_private_set", prompt_key="mhqa")
    assert len(rows) == 1 and any("no scorer" in w for w in report.warnings)
    with pytest.raises(ValueError, match="unknown prompt"):
        build_rl_rows(ITEMS, data_source="nq", prompt_key="no_such_prompt")
    with pytest.raises(ValueError, match="unknown tools"):
        build_rl_rows(ITEMS, data_source="nq", prompt_key="mhqa", tools=["browser"])
    with pytest.raises(ValueError, match="tools_kwargs names tools"):
        build_rl_rows(ITEMS, data_source="nq", prompt_key="mhqa", tools_kwargs={"code": {}})
    with pytest.raises(ValueError, match="data_source"):
        build_rl_rows(ITEMS, data_source=" ", prompt_key="mhqa")


def test_scorer_rejected_ground_truth_is_dropped():
    # a qa source needs gold answers: a test-case dict has none
    rows, report = build_rl_rows([{"question": "q?", "answer": {"inputs": ["1"], "outputs": ["1"]}}],
                                 data_source="nq", prompt_key="mhqa")
    assert rows == [] and report.dropped == {"bad_ground_truth": 1} and "no row was kept" in report.warnings[0]
    # a code source accepts it and keeps the tests out of extra_info.answer
    rows, _ = build_rl_rows([{"question": "q?", "answer": {"inputs": ["1"], "outputs": ["1"]}}],
                            data_source="codecontests", prompt_key="code_agent", ability="code")
    assert json.loads(rows[0]["reward_model"]["ground_truth"]) == {"inputs": ["1"], "outputs": ["1"]}
    assert rows[0]["extra_info"]["answer"] == ""


def test_prompt_extras_from_items():
    items = [{"question": "Sum two ints.", "answer": {"inputs": ["1 2"], "outputs": ["3"]}, "stdin": True},
             {"question": "Two sum.", "answer": {"functional": "assert True"}, "starter_code": "class Solution: pass"},
             {"question": "Bad.", "answer": {"functional": "assert True"}, "stdin": "yes"}]
    rows, report = build_rl_rows(items, data_source="livecodebench", prompt_key="code_agent", ability="code")
    p = get_prompt("code_agent")
    assert rows[0]["prompt"] == build_messages(p, "Sum two ints.", extra={"stdin": True})
    assert rows[1]["prompt"] == build_messages(p, "Two sum.", extra={"starter_code": "class Solution: pass"})
    assert report.dropped == {"bad_prompt_extra": 1}


def test_write_round_trips_and_refuses_bad_rows(tmp_path):
    rows, _ = build_rl_rows([*ITEMS[:2], {"id": "m", "question": "2+2?", "answer": 4}], data_source="nq",
                            prompt_key="mhqa")
    path = write_rl_parquet(rows, tmp_path / "sub" / "train.parquet")
    assert path.is_file() and [p.name for p in path.parent.iterdir()] == ["train.parquet"]  # no temp file left
    back = pq.read_table(path).to_pylist()
    assert back == rows
    assert pq.read_table(path).schema.field("reward_model").type == pa.struct(
        [("style", pa.string()), ("ground_truth", pa.string())])
    with pytest.raises(ValueError, match=r"share extra_info\.index"):
        write_rl_parquet(rows + rows[:1], tmp_path / "dup.parquet")
    with pytest.raises(ValueError, match="no rows"):
        write_rl_parquet([], tmp_path / "empty.parquet")
    with pytest.raises(ValueError, match="index is missing"):
        write_rl_parquet([{**rows[0], "extra_info": {}}], tmp_path / "noindex.parquet")
    with pytest.raises(ValueError, match="must be a string"):
        write_rl_parquet([{**rows[0], "reward_model": {"style": "rule", "ground_truth": ["a"]}}], tmp_path / "x.parquet")
    other, _ = build_rl_rows(ITEMS[:1], data_source="nq", prompt_key="mhqa", agent_name=None)
    with pytest.raises(ValueError, match="agent_name"):
        write_rl_parquet([rows[1], *other], tmp_path / "mixed.parquet")
    assert not (tmp_path / "dup.parquet").exists()


def test_split_rows():
    rows, _ = build_rl_rows([{"question": f"q{i}?", "answer": "a"} for i in range(100)], data_source="nq",
                            prompt_key="mhqa")
    train, val = split_rows(rows, 0.1, seed=1)
    assert len(train) == 90 and len(val) == 10
    assert all(r["extra_info"]["split"] == "val" for r in val)
    assert all(r["extra_info"]["split"] == "train" for r in train)
    assert {r["extra_info"]["index"] for r in train}.isdisjoint(r["extra_info"]["index"] for r in val)
    assert split_rows(rows, 0.1, seed=1)[1] == val
    with pytest.raises(ValueError):
        split_rows(rows, 1.5, seed=0)
    with pytest.raises(ValueError):
        split_rows(rows[:1], 0.5, seed=0)


def test_read_items_formats(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"question": "q1", "answer": "a"}\n\n{"question": "q2", "answer": "b"}\n')
    (tmp_path / "b.json").write_text(json.dumps({"data": [{"question": "q3", "answer": "c"}]}))
    pq.write_table(pa.Table.from_pylist([{"question": "q4", "answer": ["d", "e"]}]), tmp_path / "c.parquet")
    items = [*read_items(tmp_path / "a.jsonl"), *read_items(tmp_path / "b.json"), *read_items(tmp_path / "c.parquet")]
    assert [i["question"] for i in items] == ["q1", "q2", "q3", "q4"]
    assert [i["_afm_source"] for i in items] == ["a.jsonl:1", "a.jsonl:3", "b.json[0]", "c.parquet#0"]
    assert items[3]["answer"] == ["d", "e"]
    (tmp_path / "bad.jsonl").write_text('{"question": "q"}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        list(read_items(tmp_path / "bad.jsonl"))
    with pytest.raises(ValueError, match="unsupported"):
        list(read_items(_touch(tmp_path / "x.csv")))
    with pytest.raises(FileNotFoundError):
        list(read_items(tmp_path / "missing.jsonl"))


def _touch(path):
    path.write_text("")
    return path


def _write_jsonl(path, items):
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path


def test_cli_end_to_end(tmp_path, capsys):
    nq = _write_jsonl(tmp_path / "nq.jsonl", [{"id": i, "question": f"nq q{i}?", "golden_answers": [f"a{i}"]}
                                             for i in range(20)] + [{"id": 99, "question": "", "golden_answers": ["x"]}])
    hp = _write_jsonl(tmp_path / "hp.jsonl", [{"id": i, "question": f"hp q{i}?", "golden_answers": [f"b{i}"]}
                                             for i in range(20)])
    out = tmp_path / "out" / "mhqa_train.parquet"
    rc = data_main(["rl", "--input", str(nq), "--input", str(hp), "--data-source", "nq", "--data-source", "hotpotqa",
                    "--prompt-key", "mhqa", "--a-key", "golden_answers", "--output", str(out),
                    "--val-fraction", "0.1"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "kept 40, dropped 1" in printed and "empty_question" in printed and "nq.jsonl:21" in printed
    train = pq.read_table(out).to_pylist()
    val = pq.read_table(tmp_path / "out" / "mhqa_train_val.parquet").to_pylist()
    assert len(train) == 36 and len(val) == 4
    assert {r["data_source"] for r in train + val} == {"nq", "hotpotqa"}
    assert len({r["extra_info"]["index"] for r in train + val}) == 40
    report = json.loads((tmp_path / "out" / "mhqa_train.report.json").read_text())
    assert report["kept"] == 40 and report["dropped"] == {"empty_question": 1}
    assert report["outputs"] == {str(out): 36, str(tmp_path / "out" / "mhqa_train_val.parquet"): 4}


def test_cli_options_and_exit_codes(tmp_path, capsys):
    src = _write_jsonl(tmp_path / "w.jsonl", [{"qid": "x1", "q": "Who?", "a": "Me"}])
    out = tmp_path / "w.parquet"
    assert main(["--input", str(src), "--data-source", "gaia", "--prompt-key", "web_agent", "--q-key", "q",
                 "--a-key", "a", "--id-key", "qid", "--agent-name", "none", "--tools", "web_search",
                 "--split", "test", "--ability", "web", "--output", str(out),
                 "--tools-kwargs", '{"web_search": {"execute_kwargs": {"num": 3}}}']) == 0
    row = pq.read_table(out).to_pylist()[0]
    assert "agent_name" not in row and row["ability"] == "web" and row["extra_info"]["split"] == "test"
    assert row["extra_info"]["id"] == "x1"
    assert row["extra_info"]["tools_kwargs"]["web_search"]["execute_kwargs"] == {"num": 3}
    # nothing kept -> 1 and no parquet, but a report
    empty = _write_jsonl(tmp_path / "e.jsonl", [{"question": "", "answer": "x"}])
    assert main(["--input", str(empty), "--data-source", "nq", "--prompt-key", "mhqa",
                 "--output", str(tmp_path / "e.parquet")]) == 1
    assert not (tmp_path / "e.parquet").exists() and (tmp_path / "e.report.json").exists()
    # bad arguments -> 2 with a message
    for argv, needle in [
        (["--input", str(src), "--input", str(src), "--data-source", "a", "--data-source", "b", "--data-source", "c",
          "--prompt-key", "mhqa", "--output", str(out)], "once per --input"),
        (["--input", str(src), "--data-source", "nq", "--prompt-key", "nope", "--output", str(out)], "unknown prompt"),
        (["--input", str(tmp_path / "missing.jsonl"), "--data-source", "nq", "--prompt-key", "mhqa", "--output",
          str(out)], "not found"),
        (["--input", str(src), "--data-source", "nq", "--prompt-key", "mhqa", "--output", str(out),
          "--tools-kwargs", "[1]"], "JSON object"),
        (["--input", str(src), "--data-source", "nq", "--prompt-key", "mhqa", "--output", str(out),
          "--max-prompt-tokens", "10"], "needs --tokenizer"),
    ]:
        capsys.readouterr()
        assert main(argv) == 2
        assert needle in capsys.readouterr().err


def test_prompt_length_filter(tokenizer):
    rows, report = build_rl_rows([{"question": "short?", "answer": "a"},
                                  {"question": "long " * 400 + "?", "answer": "b"}],
                                 data_source="nq", prompt_key="search_r1")
    n_short = len(_ids(tokenizer, rows[0]["prompt"]))
    kept = filter_prompt_length(rows, report, tokenizer, max_tokens=n_short + 5)
    assert len(kept) == 1 and kept[0] is rows[0]
    assert report.dropped == {"prompt_too_long": 1} and report.kept == 1
    assert "tokens >" in report.examples["prompt_too_long"][0]["detail"]


def _ids(tokenizer, messages):
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return ids["input_ids"] if hasattr(ids, "keys") else ids


def test_report_merge():
    a = RLBuildReport("nq", "mhqa", total=3, kept=2)
    a.drop("empty_question", "item 1", None)
    b = RLBuildReport("hotpotqa", "mhqa", total=2, kept=1, duplicate_ids=1)
    b.drop("empty_question", "item 2", "x")
    b.warn("w")
    a.merge(b)
    assert (a.total, a.kept, a.duplicate_ids, a.dropped, a.warnings) == (5, 3, 1, {"empty_question": 2}, ["w"])
    assert len(a.examples["empty_question"]) == 2


def test_module_does_not_import_verl():
    code = "import sys, afm.data.rl_parquet; print('verl' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() \
        == "False"


def _original_prepare_data_row(question: str, answer: list[str], data_source: str, uid: str) -> dict:
    """A row in the layout of the original project's AFM/data/prepare_data.py (--tool-type single): the prompt is
    built already, the question and answer live in extra_info, the ground truth is a {"target", "question"} JSON
    string, and the index is '<data_source>-<uuid4>'."""
    kwargs = {"create_kwargs": {"ground_truth": answer, "question": question, "data_source": data_source}}
    return {"data_source": data_source,
            "prompt": [{"role": "user", "content": "You are a helpful assistant.\n\nQuestion: " + question}],
            "reward_model": {"ground_truth": json.dumps({"target": answer, "question": question})},
            "extra_info": {"need_tools_kwargs": True, "index": f"{data_source}-{uid}",
                           "tools_kwargs": {"wiki_search": kwargs}, "question": question, "answer": answer}}


def test_cli_reads_the_original_prepare_data_parquet(tmp_path, capsys):
    rows = [_original_prepare_data_row("who wrote hamlet?", ["Shakespeare", "William Shakespeare"], "nq",
                                       "0b1e6f4c-1"),
            _original_prepare_data_row("capital of france?", ["Paris"], "nq", "0b1e6f4c-2")]
    src = tmp_path / "nq_random_300.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    out = tmp_path / "rl" / "nq.parquet"
    rc = data_main(["rl", "--input", str(src), "--data-source", "nq", "--prompt-key", "mhqa", "--output", str(out)])
    printed = capsys.readouterr()
    assert rc == 0, printed.err + printed.out
    assert "kept 2, dropped 0" in printed.out
    got = pq.read_table(out).to_pylist()
    assert [r["extra_info"]["question"] for r in got] == ["who wrote hamlet?", "capital of france?"]
    assert json.loads(got[0]["reward_model"]["ground_truth"]) == ["Shakespeare", "William Shakespeare"]
    assert got[1]["reward_model"]["ground_truth"] == '["Paris"]'
    assert [r["extra_info"]["id"] for r in got] == ["nq-0b1e6f4c-1", "nq-0b1e6f4c-2"]
    # rebuilt with afm's prompt: the original's system prompt is not carried over
    assert got[0]["prompt"] == build_messages(get_prompt("mhqa"), "who wrote hamlet?")
    assert "You are a helpful assistant" not in json.dumps(got[0]["prompt"])


def test_verl_rows_without_extra_info_answer_use_the_ground_truth():
    row = _original_prepare_data_row("capital of france?", ["Paris"], "nq", "u")
    del row["extra_info"]["answer"]
    rows, report = build_rl_rows([row, {**row, "extra_info": {"index": "x"}}], data_source="nq", prompt_key="mhqa")
    assert report.kept == 1 and report.dropped == {"missing_question": 1}
    assert json.loads(rows[0]["reward_model"]["ground_truth"])["target"] == ["Paris"]
    assert "extra_info.question" in report.examples["missing_question"][0]["detail"]


def test_every_drop_reason_with_its_report_entry():
    # One item per reason (in the order the checks run), and the exact report entry each produces.
    items = [
        "not a mapping",
        {"id": "m", "answer": "a"},
        {"id": "n", "question": 7, "answer": "a"},
        {"id": "e", "question": "  ", "answer": "a"},
        {"id": "l", "question": "x" * 50_001, "answer": "a"},
        {"id": "ma", "question": "no answer?"},
        {"id": "ea", "question": "empty answer?", "answer": []},
        {"id": "ba", "question": "bool answer?", "answer": True},
        {"id": "bg", "question": "tests for a qa source?", "answer": {"inputs": ["1"], "outputs": ["1"]}},
        {"id": "ok", "question": "Kept?", "answer": "yes"},
        {"id": "dq", "question": "  kept? ", "answer": "no"},
        {"id": "ok", "question": "Kept too?", "answer": "yes"},
    ]
    rows, report = build_rl_rows(items, data_source="nq", prompt_key="mhqa")
    assert [r["extra_info"]["id"] for r in rows] == ["ok", "ok"]
    assert (report.total, report.kept, report.duplicate_ids, report.conflicting_duplicates) == (12, 2, 1, 1)
    assert report.examples == {
        "not_a_mapping": [{"where": "item 1", "id": None, "detail": "got str"}],
        "missing_question": [{"where": "item 2", "id": "m", "detail": "no 'question'; keys: ['answer', 'id']"}],
        "non_string_question": [{"where": "item 3", "id": "n", "detail": "'question' is a int"}],
        "empty_question": [{"where": "item 4", "id": "e", "detail": ""}],
        "question_too_long": [{"where": "item 5", "id": "l", "detail": "50001 characters"}],
        "missing_answer": [{"where": "item 6", "id": "ma", "detail": "no 'answer'; keys: ['id', 'question']"}],
        "empty_answer": [{"where": "item 7", "id": "ea", "detail": "answer is an empty list"}],
        "bad_answer": [{"where": "item 8", "id": "ba", "detail": "answer is a bool (True)"}],
        "bad_ground_truth": [{"where": "item 9", "id": "bg", "detail": report.examples["bad_ground_truth"][0]["detail"]}],
        "duplicate_question": [{"where": "item 11", "id": "dq", "detail": "kept?"}],
    }
    assert report.examples["bad_ground_truth"][0]["detail"]
    bad_extra, extra_report = build_rl_rows([{"id": "x", "question": "q?", "answer": {"functional": "assert 1"},
                                              "stdin": "yes", "_afm_source": "f.jsonl:3"}],
                                            data_source="livecodebench", prompt_key="code_agent")
    assert bad_extra == [] and extra_report.examples["bad_prompt_extra"][0]["where"] == "f.jsonl:3"
    assert extra_report.examples["bad_prompt_extra"][0]["id"] == "x"
