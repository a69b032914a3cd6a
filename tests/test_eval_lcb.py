"""LiveCodeBench test-case processing: decoding (JSON, zlib+base64, pickle only when allowed and only plain
data), the CLI report, and files that afm.rewards grades in the real sandbox (two problems)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib

import pytest

from afm.eval import lcb_testcases as lcb
from afm.eval.datasets import load_benchmark
from afm.eval.records import write_records
from afm.rewards import compute_score

SUM_PUBLIC = [{"input": "2\n1 2\n", "output": "3\n", "testtype": "stdin"}]
SUM_PRIVATE = [{"input": "3\n5 5 5\n", "output": "15\n", "testtype": "stdin"},
               {"input": "1\n-7\n", "output": "-7\n", "testtype": "stdin"}]
ADD_PUBLIC = [{"input": "1\n2", "output": "3", "testtype": "functional"}]
ADD_PRIVATE = [{"input": "10\n-4", "output": "6", "testtype": "functional"}]
SUM_OK = "input()\nprint(sum(map(int, input().split())))"
SUM_PUBLIC_ONLY = "input()\nprint(3)"
ADD_OK = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b"
ADD_PUBLIC_ONLY = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return 3"


def pickled(value) -> str:
    """LiveCodeBench's HF encoding of private tests: base64(zlib(pickle(json string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(value)))).decode()


def rows() -> list[dict]:
    return [
        {"question_id": "abc900_a", "question_title": "Sum", "question_content": "Print the sum of N ints.",
         "platform": "atcoder", "starter_code": "", "contest_date": "2024-10-01T00:00:00",
         "public_test_cases": json.dumps(SUM_PUBLIC), "private_test_cases": pickled(SUM_PRIVATE),
         "metadata": "{}"},
        {"question_id": "3999", "question_title": "Add", "question_content": "Return a + b.",
         "platform": "leetcode",
         "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
         "contest_date": "2024-10-02T00:00:00", "public_test_cases": json.dumps(ADD_PUBLIC),
         "private_test_cases": json.dumps(ADD_PRIVATE), "metadata": json.dumps({"func_name": "add"})},
        {"question_title": "no id", "public_test_cases": json.dumps(SUM_PUBLIC)},
    ]


def answer(code: str) -> str:
    return f"<think> done </think>\n<answer>\n```python\n{code}\n```\n</answer>"


class Boom:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_decoding_json_compressed_json_and_pickle(tmp_path, monkeypatch):
    assert lcb.decode_test_cases(json.dumps(SUM_PUBLIC)) == SUM_PUBLIC
    assert lcb.decode_test_cases(None) == [] and lcb.decode_test_cases("") == []
    compressed_json = base64.b64encode(zlib.compress(json.dumps(SUM_PRIVATE).encode())).decode()
    assert lcb.decode_test_cases(compressed_json) == SUM_PRIVATE  # no pickle layer: no permission needed
    with pytest.raises(lcb.PickleRefused, match="--allow-pickle"):
        lcb.decode_test_cases(pickled(SUM_PRIVATE))
    assert lcb.decode_test_cases(pickled(SUM_PRIVATE), allow_pickle=True) == SUM_PRIVATE
    # A pickle that names a function (the way pickles run code) is refused even when pickles are allowed.
    marker = tmp_path / "pwned"
    evil = base64.b64encode(zlib.compress(pickle.dumps(Boom(str(marker))))).decode()
    with pytest.raises(ValueError, match=r"refused: the payload names (posix|os)\.mkdir"):
        lcb.decode_test_cases(evil, allow_pickle=True)
    assert not marker.exists()
    monkeypatch.setattr(lcb, "MAX_PAYLOAD_BYTES", 1000)
    bomb = base64.b64encode(zlib.compress(b"[" + b" " * 10_000 + b"]")).decode()
    with pytest.raises(ValueError, match="inflate to more than 1000 bytes"):
        lcb.decode_test_cases(bomb)
    for bad, message in (("not base64!", "neither a JSON list nor base64"), ("[{", "not valid JSON"),
                         (json.dumps([{"input": "1"}]), "'input' and 'output'"),
                         (json.dumps([{"input": "1", "output": "2", "testtype": "weird"}]),
                          "testtype 'weird'")):
        with pytest.raises(ValueError, match=message):
            lcb.decode_test_cases(bad)
    assert lcb.func_name('{"func_name": "add"}') == "add" and lcb.func_name("{}") is None


def test_cli_refuses_pickle_then_writes_files_that_grade_correctly(tmp_path, capsys):
    src = tmp_path / "lcb.jsonl"
    write_records(rows(), src)
    out = tmp_path / "livecodebench_testcases"
    assert lcb.main([str(src), str(out)]) == 0  # without --allow-pickle: the pickled row is skipped
    report = capsys.readouterr().out
    assert "wrote 1 test-case files" in report and "2 rows skipped" in report
    assert "pickle payload refused (pass --allow-pickle) (rows 1 (abc900_a))" in report
    assert "no question_id (nor extra_info.index, nor one in the ground truth) (rows 3 ())" in report
    assert not (out / "abc900_a.json").exists()

    parquet = tmp_path / "lcb.parquet"
    write_records(rows(), parquet)
    assert lcb.main([str(parquet), str(out), "--allow-pickle"]) == 0
    assert "wrote 2 test-case files" in capsys.readouterr().out
    sum_file = json.loads((out / "abc900_a.json").read_text())
    assert sum_file == {"question_id": "abc900_a", "tests": SUM_PUBLIC + SUM_PRIVATE, "fn_name": None,
                        "private_tests": 2}
    add_file = json.loads((out / "3999.json").read_text())
    assert add_file == {"question_id": "3999", "tests": ADD_PUBLIC + ADD_PRIVATE, "fn_name": "add",
                        "private_tests": 1}

    # Graded through afm.rewards on the processed files: public + private tests.
    res = compute_score("livecodebench_v5", answer(SUM_OK), {"question_id": "abc900_a"},
                        code_tests_dir=str(out))
    details = json.loads(res["details"])
    assert res["acc"] == 1.0 and details["tests_from"] == "file" and details["total"] == 3
    res = compute_score("livecodebench_v5", answer(SUM_PUBLIC_ONLY), {"question_id": "abc900_a"},
                        code_tests_dir=str(out))
    assert res["acc"] == 0.0 and json.loads(res["details"])["passed"] == 1  # passes public, fails private
    # The loader's gold for the same rows carries question_id, so it is graded on the file too.
    benchmark = write_records(rows()[:2], tmp_path / "livecodebench_v5.jsonl")
    items = {i.qid: i for i in load_benchmark("livecodebench_v5", benchmark)}
    assert items["3999"].prompt_extra["starter_code"].startswith("class Solution")
    add = items["3999"]
    assert compute_score(add.data_source, answer(ADD_OK), add.gold, code_tests_dir=str(out))["acc"] == 1.0
    res = compute_score(add.data_source, answer(ADD_PUBLIC_ONLY), add.gold, code_tests_dir=str(out))
    assert res["acc"] == 0.0 and json.loads(res["details"])["tests_from"] == "file"


def test_cli_exit_code_and_bad_input(tmp_path, capsys):
    src = tmp_path / "empty.jsonl"
    write_records([{"question_id": "x", "public_test_cases": "[]"}], src)
    assert lcb.main([str(src), str(tmp_path / "out")]) == 1
    assert "rows skipped" in capsys.readouterr().out
    assert lcb.main([str(tmp_path / "missing.jsonl"), str(tmp_path / "out")]) == 1
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(ValueError, match="cannot be a file name"):
        lcb.write_test_file(tmp_path, "../escape", SUM_PUBLIC, None)


def test_download_writer_filters_by_contest_date_and_writes_the_tests(tmp_path):
    from afm.eval.download import write_benchmark
    from afm.eval.records import read_records

    too_old = {**rows()[0], "question_id": "abc100_a", "contest_date": "2023-05-01T00:00:00"}
    path = write_benchmark("livecodebench_v5", [too_old, *rows()[:2]], tmp_path / "eval", allow_pickle=True)
    assert path == tmp_path / "eval" / "code_agent" / "livecodebench_v5.parquet"
    written = read_records(path)
    assert [r["question_id"] for r in written] == ["abc900_a", "3999"]
    assert all("private_test_cases" not in r for r in written)  # private tests live in the test-case files
    tests_dir = tmp_path / "livecodebench_testcases"
    assert sorted(p.name for p in tests_dir.iterdir()) == ["3999.json", "abc900_a.json"]
    assert len(json.loads((tests_dir / "abc900_a.json").read_text())["tests"]) == 3
    items = load_benchmark("livecodebench_v5", data_root=tmp_path / "eval")
    assert [(i.qid, i.gold["question_id"]) for i in items] == [("abc900_a", "abc900_a"), ("3999", "3999")]


# Rows in the layout of the original's livecodebench_v5.parquet (verl RL rows: the id in extra_info.index and
# in the ground truth, no question_id column, the tests in the ground truth, the instructions in the prompt).
ROW_STDIN_NOTE = ("In you final answer code nippet, read the inputs from stdin to solve the problem and write the "
                  "answer to stdout (do not directly test on the example inputs). Ensure that when the python "
                  "program runs, it reads the inputs, runs the algorithm and writes output to STDOUT.")
ROW_ANSWER_FORMAT = ("Answer format: The answer should be a complete python code snippet with necessary imports. "
                     "Answer should begin with '```py\n' and end with '```\n'. For instance:\n```py\nimport math\n"
                     "def add(x,y):\n    return math.add(x,y)\n```\n")
ADD_STARTER = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        "


def rl_rows() -> list[dict]:
    def row(qid, content, gt, metadata="{}", starter=""):
        return {"data_source": "skywork_livecodebench_v5", "ability": "coding",
                "prompt": [{"role": "user", "content": "You are an expert python code programmer.\n\nTask: " + content}],
                "reward_model": {"ground_truth": json.dumps(gt), "style": "rule"},
                "extra_info": {"index": qid, "metadata": metadata, "split": "test", "starter_code": starter,
                               "platform": "atcoder" if not starter else "leetcode"}}

    return [
        row("abc900_a", f"Print the sum of N ints.\n\nSample Input 1\n\n2\n1 2\n\nSample Output 1\n\n3\n"
                        f"{ROW_STDIN_NOTE}\n{ROW_ANSWER_FORMAT}",
            {"stdin": ["2\n1 2\n"], "expected_output": ["3\n"], "question_id": "abc900_a"}),
        row("3999", "Return a + b.\nYou will use the following starter code to write the solution to the problem.\n"
                    f"```py\n{ADD_STARTER}\n```\n\n{ROW_ANSWER_FORMAT}",
            {"functional": "\nresult = Solution().add(1, 2)\nassert result == 3, f\"Expected 3, got {result}\"\n"
                           "\nresult = Solution().add(10, -4)\nassert result == 6\n",
             "question_id": "3999"},
            metadata=json.dumps({"func_name": "add"}), starter=ADD_STARTER),
    ]


def test_cli_accepts_rl_rows_whose_id_is_in_extra_info(tmp_path, capsys):
    src = write_records(rl_rows(), tmp_path / "livecodebench_v5.parquet")
    out = tmp_path / "tests"
    assert lcb.main([str(src), str(out)]) == 0
    report = capsys.readouterr().out
    assert "wrote 2 test-case files" in report and "0 rows skipped" in report and "no question_id" not in report
    assert "2 problems have no private tests, so they will be graded on their public tests only" in report
    add_file = json.loads((out / "3999.json").read_text())
    assert add_file == {"question_id": "3999", "fn_name": "add", "private_tests": 0, "tests": [
        {"input": "1\n2", "output": "3", "testtype": "functional"},
        {"input": "10\n-4", "output": "6", "testtype": "functional"}]}
    # The files grade: the functional asserts were read back into argument/result pairs.
    items = {i.qid: i for i in load_benchmark("livecodebench_v5", src)}
    ok = compute_score("livecodebench_v5", answer(ADD_OK), items["3999"].gold, code_tests_dir=str(out))
    assert ok["acc"] == 1.0 and json.loads(ok["details"])["total"] == 2
    assert json.loads(ok["details"])["tests_from"] == "file_public_only"
    with pytest.raises(ValueError, match="unexpected statement"):
        lcb.functional_asserts_to_tests("import os\nassert f(1) == 2")


def test_rl_rows_say_the_answer_format_once(tmp_path):
    from afm.prompts import build_messages, get_prompt

    src = write_records(rl_rows(), tmp_path / "livecodebench_v5.parquet")
    for item in load_benchmark("livecodebench_v5", src):
        text = build_messages(get_prompt("code_agent"), item.question, extra=item.prompt_extra or None)[-1]["content"]
        assert text.count("Answer format") == 1, text
        assert "In you final answer code nippet" not in text and "For instance" not in text
        if item.qid == "3999":
            assert text.count("def add(self, a: int, b: int)") == 1  # the starter code, once
            assert "Return a + b." in text
        else:
            assert "Sample Output 1" in text and text.count("STDIN") == 1
