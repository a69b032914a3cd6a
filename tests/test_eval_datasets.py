"""Evaluation datasets: the benchmark table, every loader on a small file in the original format, the demo
sets (scored by afm.rewards), clear errors for bad files, and the download helpers (offline only)."""

from __future__ import annotations

import base64
import hashlib
import json
import logging

import pytest

from afm.eval.datasets import (
    BENCHMARKS,
    CODE_TEMPERATURE,
    FAMILIES,
    LOADERS,
    EvalItem,
    browsecomp_decrypt,
    get_benchmark,
    last_boxed,
    load_benchmark,
    resolve_data_file,
)
from afm.eval.records import read_records, write_records
from afm.prompts import build_messages, get_prompt, list_prompts
from afm.rewards import compute_score, known_data_sources
from afm.rewards.registry import canonical

SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_turns", "max_tokens_per_turn", "max_response_tokens",
                 "n"}
PAPER_SETS = {"nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle", "gaia",
              "browsecomp", "hle", "webwalker", "aime24", "aime25", "math500", "amc23", "olympiadbench",
              "livecodebench_v4", "livecodebench_v5", "codecontests", "demo_mhqa", "demo_web", "demo_math",
              "demo_code", "world_arith", "world_lookup", "world_multihop", "world_calc"}


@pytest.fixture(autouse=True)
def _no_judge_no_tests_dir(monkeypatch):
    monkeypatch.delenv("GRM_BASE_URL", raising=False)  # web sources score by EM without a judge
    monkeypatch.delenv("LIVECODEBENCH_TESTCASES_DIR", raising=False)
    monkeypatch.delenv("AFM_EVAL_DATA", raising=False)


def encrypt(text: str, password: str) -> str:
    """BrowseComp's scheme, written independently for the test: XOR with SHA-256(password), base64."""
    digest = hashlib.sha256(password.encode()).digest()
    data = text.encode()
    return base64.b64encode(bytes(b ^ digest[i % len(digest)] for i, b in enumerate(data))).decode()


# -- the benchmark table -------------------------------------------------------------------------------------
def test_every_benchmark_is_known_to_rewards_and_prompts():
    # the paper's sets and the demo world's held-out sets (afm.quickstart.world, prompt named as module:attribute)
    assert set(BENCHMARKS) == PAPER_SETS | {f"world_{f}" for f in ("arith", "lookup", "multihop", "calc")}
    sources = {canonical(s) for s in known_data_sources(aliases=True)}
    prompts = set(list_prompts())
    for name, spec in BENCHMARKS.items():
        assert spec.name == name and spec.family in FAMILIES and spec.loader in LOADERS
        assert canonical(spec.data_source) in sources, name
        # a registered key, or a "module:attr" key (the demo world keeps its prompt next to its generator)
        assert spec.prompt in prompts or get_prompt(spec.prompt).text, name
        assert set(spec.tools) <= set(get_prompt(spec.prompt).tools), name
        assert set(spec.sampling) == SAMPLING_KEYS, name
        assert spec.default_file and not spec.default_file.startswith("/")


def test_paper_sampling_settings():
    web = get_benchmark("gaia").sampling
    assert (web["temperature"], web["top_p"], web["top_k"]) == (1.0, 0.9, 20)
    assert all(get_benchmark(b).sampling == web for b in ("browsecomp", "hle", "webwalker"))
    code = get_benchmark("livecodebench_v5").sampling
    assert code["temperature"] == CODE_TEMPERATURE["32b"] == 0.6 and CODE_TEMPERATURE["7b"] == 0.8
    assert code["max_turns"] == 13 and code["n"] == 16  # at most 12 tool calls; avg@16
    assert get_benchmark("aime24").sampling["n"] == 16 and get_benchmark("math500").sampling["n"] == 1
    assert get_benchmark("nq").sampling["temperature"] == 0.0  # the original's MHQA eval was greedy


def test_get_benchmark_aliases_and_unknown_name():
    assert get_benchmark("LCB-v5") is BENCHMARKS["livecodebench_v5"]
    assert get_benchmark("2wiki").name == "2wikimultihopqa"
    with pytest.raises(KeyError, match="known: nq, triviaqa"):
        get_benchmark("gaia2")


# -- loaders, one file per original format -------------------------------------------------------------------
def test_mhqa_nq_jsonl_and_flashrag_json(tmp_path):
    nq = tmp_path / "mhqa_agent" / "nq_full.jsonl"
    nq.parent.mkdir()
    first = {"question": "who wrote hamlet", "answer": ["Shakespeare", "W. Shakespeare"], "data_source": "nq"}
    second = {"question": "capital of france", "answer": "Paris", "data_source": "nq"}
    nq.write_text(json.dumps(first) + "\n\n" + json.dumps(second) + "\n")
    items = load_benchmark("nq", data_root=tmp_path)
    assert [i.qid for i in items] == ["0", "1"]
    assert items[0].gold == ["Shakespeare", "W. Shakespeare"] and items[1].gold == ["Paris"]
    assert items[0].extra_info == {"question": "who wrote hamlet", "split": "test"}
    assert items[0].data_source == "nq"
    hotpot = tmp_path / "hotpot.json"
    hotpot.write_text(json.dumps([{"id": "5a8b", "question": "Which band?", "golden_answers": ["Yes"],
                                   "metadata": {"type": "bridge"}}]))
    (item,) = load_benchmark("hotpotqa", hotpot)
    assert (item.qid, item.gold, item.benchmark) == ("5a8b", ["Yes"], "hotpotqa")


def test_rl_parquet_rows_any_family(tmp_path, caplog):
    path = tmp_path / "nq.parquet"
    write_records([{"data_source": "nq", "prompt": [{"role": "user", "content": "Rules.\n\nQuestion: who?"}],
                    "reward_model": {"ground_truth": json.dumps({"target": ["Ann"], "question": "who?"}),
                                     "style": "rule"},
                    "extra_info": {"index": "nq-1", "question": "who?", "answer": ["Ann"]}}], path)
    (item,) = load_benchmark("nq", path)
    assert (item.qid, item.question, item.gold) == ("nq-1", "who?", ["Ann"])
    aime = tmp_path / "aime24.parquet"
    write_records([{"data_source": "aime24", "ability": "fact-reasoning",
                    "prompt": [{"role": "user", "content": "Solve it.\nTask:\nFind x: x + 1 = 3."}],
                    "reward_model": {"ground_truth": "2", "style": "rule"},
                    "extra_info": {"index": "0", "split": "test"}}], aime)
    with caplog.at_level(logging.WARNING, logger="afm.eval.datasets"):
        (item,) = load_benchmark("aime24", aime)
    assert (item.question, item.gold, item.qid) == ("Find x: x + 1 = 3.", "2", "0")
    assert "1 of 1 rows have no extra_info.question" in caplog.text


def test_web_gaia_browsecomp_hle_webwalker(tmp_path):
    gaia = tmp_path / "web_agent" / "gaia_dev_103.json"
    write_records([{"id": 0, "task_id": "c61d22de", "question": "Q1?", "answer": "egalitarian", "Level": 2,
                    "Annotator_Metadata": {"Steps": "3"}},
                   {"id": 1, "task_id": "17b5a6a3", "question": "Q2?", "answer": "34689", "Level": "1"}],
                  gaia)
    items = load_benchmark("gaia", data_root=tmp_path)
    assert [(i.qid, i.level, i.gold) for i in items] == [("c61d22de", "2", ["egalitarian"]),
                                                         ("17b5a6a3", "1", ["34689"])]
    hf = tmp_path / "gaia_hf.jsonl"  # the hub's spelling of the fields
    write_records([{"task_id": "t1", "Question": "Q?", "Final answer": "7", "Level": "3", "file_name": ""}],
                  hf)
    assert load_benchmark("gaia", hf)[0].level == "3"
    bc = tmp_path / "browsecomp.json"
    bc.write_text(json.dumps({"data": [{"question": "Which film?", "answer": "Heat", "topic": "Art"}]}))
    assert [(i.qid, i.gold, i.level) for i in load_benchmark("browsecomp", bc)] == [("0", ["Heat"], None)]
    enc = tmp_path / "browse_comp_test_set.csv"
    write_records([{"problem": encrypt("Which year?", "canary-1"), "answer": encrypt("1999", "canary-1"),
                    "problem_topic": "History", "canary": "canary-1"}], enc)
    (item,) = load_benchmark("browsecomp", enc)
    assert (item.question, item.gold) == ("Which year?", ["1999"])
    hle = tmp_path / "hle_test.json"
    write_records([{"id": "66e9", "question": "What is 2+2?\nA. 3\nB. 4", "answer": "B",
                    "answer_type": "multipleChoice", "rationale": "", "raw_subject": "Math",
                    "category": "Math"}], hle)
    assert load_benchmark("hle", hle)[0].qid == "66e9"
    ww = tmp_path / "webwalker_main.json"
    write_records([{"question": "Where?", "answer": "Oslo", "root_url": "https://example.org",
                    "info": "{'domain': 'travel'}"}], ww)
    assert load_benchmark("webwalker", ww)[0].gold == ["Oslo"]


def test_math_answer_solution_and_final_answer(tmp_path):
    aime = tmp_path / "code_agent" / "aime24.parquet"
    write_records([{"id": 60, "problem": "Find n.", "solution": "... so $\\boxed{204}$", "answer": 204,
                    "url": "u", "year": "2024"}], aime)
    assert [(i.qid, i.gold) for i in load_benchmark("aime24", data_root=tmp_path)] == [("60", "204")]
    m500 = tmp_path / "math500.jsonl"
    write_records([{"unique_id": "test/algebra/1.json", "problem": "Simplify.",
                    "solution": "First $\\boxed{1}$, finally $\\boxed{\\frac{\\sqrt{3}}{2}}$."}], m500)
    assert load_benchmark("math500", m500)[0].gold == "\\frac{\\sqrt{3}}{2}"
    oly = tmp_path / "oly.json"
    write_records([{"id": 1606, "question": "Find a and b.", "final_answer": ["$1$", "$2$"]},
                   {"id": 1607, "question": "Find c.", "final_answer": ["$(0,1]$"]}], oly)
    assert [i.gold for i in load_benchmark("olympiadbench", oly)] == ["$1$, $2$", "$(0,1]$"]
    amc = tmp_path / "amc.jsonl"
    write_records([{"id": 0, "question": "How many?", "answer": 27.0}], amc)
    (item,) = load_benchmark("amc23", amc)
    assert item.gold == "27.0"
    assert compute_score("amc23", "<answer>\\boxed{27}</answer>", item.gold)["acc"] == 1.0
    assert last_boxed("no box") is None and last_boxed("\\boxed{a{b}c}") == "a{b}c"


def test_code_lcb_parquet_lcb_rows_and_codecontests(tmp_path):
    lcb = tmp_path / "livecodebench_v5.parquet"
    stdin_gt = {"stdin": ["3\n1 2 3\n"], "expected_output": ["6\n"], "question_id": "abc374_c"}
    fn_gt = {"functional": "assert Solution().addOne(1) == 2", "question_id": "3610"}
    write_records([
        {"data_source": "skywork_livecodebench_v5", "ability": "coding",
         "prompt": [{"role": "user", "content": "You are an expert.\n\nQuestion: Sum the numbers."}],
         "reward_model": {"ground_truth": json.dumps(stdin_gt), "style": "rule"},
         "extra_info": {"index": "7", "question": "Sum the numbers.", "starter_code": "", "metadata": "{}"}},
        {"data_source": "skywork_livecodebench_v5", "ability": "coding",
         "prompt": [{"role": "user", "content": "Question: Add one."}],
         "reward_model": {"ground_truth": json.dumps(fn_gt), "style": "rule"},
         "extra_info": {"index": "8", "question": "Add one.",
                        "starter_code": "class Solution:\n    def addOne(self, x: int) -> int:\n        ",
                        "metadata": json.dumps({"func_name": "addOne"})}}], lcb)
    stdin_item, fn_item = load_benchmark("livecodebench_v5", lcb)
    assert (stdin_item.qid, stdin_item.gold) == ("abc374_c", stdin_gt)
    assert stdin_item.prompt_extra == {"stdin": True}
    assert fn_item.qid == "3610" and fn_item.prompt_extra["starter_code"].startswith("class Solution")
    for item in (stdin_item, fn_item):  # the code prompt accepts the extras
        messages = build_messages(get_prompt("code_agent"), item.question, extra=item.prompt_extra)
        assert item.question in messages[0]["content"]
    raw = tmp_path / "lcb_rows.jsonl"
    write_records([{"question_id": "3700", "question_title": "t", "question_content": "Double it.",
                    "platform": "leetcode", "starter_code": "class Solution:\n    def double(self, x):",
                    "public_test_cases": json.dumps([{"input": "2", "output": "4",
                                                      "testtype": "functional"}]),
                    "private_test_cases": "eJwLAA==", "metadata": json.dumps({"func_name": "double"})}], raw)
    (item,) = load_benchmark("livecodebench_v4", raw)
    assert item.gold == {"inputs": ["2"], "outputs": ["4"], "fn_name": "double", "question_id": "3700"}
    cc = tmp_path / "codecontest.jsonl"
    write_records([{"name": "1548_A. Web of Lies", "description": "Print the sum.",
                    "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
                    "private_tests": {"input": ["5 5\n"], "output": ["10\n"]},
                    "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]}}], cc)
    (item,) = load_benchmark("codecontests", cc)
    assert item.qid == "1548_A. Web of Lies" and item.prompt_extra == {"stdin": True}
    assert item.gold == {"stdin": ["1 2\n", "5 5\n"], "expected_output": ["3\n", "10\n"]}


def test_limit_and_json_lines_in_a_json_file(tmp_path):
    path = tmp_path / "bamboogle.json"  # datasets' to_json writes JSON lines even into .json files
    rows = [{"id": f"b{k}", "question": f"q{k}", "golden_answers": [f"a{k}"]} for k in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [i.qid for i in load_benchmark("bamboogle", path, limit=2)] == ["b0", "b1"]
    assert len(load_benchmark("bamboogle", path)) == 5


# -- demo sets -----------------------------------------------------------------------------------------------
def _gold_answer(item: EvalItem) -> str:
    from afm.eval.demo_sets import DEMO_CODE_SOLUTIONS

    if item.benchmark == "demo_math":
        return f"<answer>\\boxed{{{item.gold}}}</answer>"
    if item.benchmark == "demo_code":
        return f"<answer>\n```python\n{DEMO_CODE_SOLUTIONS[item.qid]}\n```\n</answer>"
    return f"<answer>{item.gold[0]}</answer>"


def test_demo_sets_load_through_the_loaders_and_their_golds_score_one(tmp_path):
    from afm.eval.demo_sets import DEMO_SET_NAMES, write_demo_sets

    paths = write_demo_sets(tmp_path)
    assert set(paths) == set(DEMO_SET_NAMES)
    assert paths["demo_web"] == tmp_path / "demo" / "demo_web.json"
    assert set(read_records(paths["demo_web"])[0]) >= {"task_id", "question", "answer", "Level"}  # GAIA
    assert set(read_records(paths["demo_code"])[0]) >= {"question_id", "public_test_cases", "metadata"}  # LCB
    for name in DEMO_SET_NAMES:
        spec = get_benchmark(name)
        items = load_benchmark(name, data_root=tmp_path)
        assert len(items) >= 4, name
        for item in items:
            messages = build_messages(get_prompt(spec.prompt), item.question, extra=item.prompt_extra)
            assert item.question in messages[0]["content"]
            res = compute_score(item.data_source, _gold_answer(item), item.gold, item.extra_info)
            assert res["score"] == 1.0, (name, item.qid, res)
        wrong = "<answer>9999</answer>"
        if name == "demo_code":
            wrong = "<answer>\n```python\nprint(0)\n```\n</answer>"
        assert compute_score(items[0].data_source, wrong, items[0].gold, items[0].extra_info)["score"] == 0.0
    assert {i.level for i in load_benchmark("demo_web", data_root=tmp_path)} == {"1", "2"}


def test_demo_sets_are_generated_when_their_files_are_missing(tmp_path):
    from afm.eval.demo_sets import write_demo_sets

    generated = load_benchmark("demo_mhqa", data_root=tmp_path / "empty")
    write_demo_sets(tmp_path / "root", names=("demo_mhqa",))
    assert generated == load_benchmark("demo_mhqa", data_root=tmp_path / "root")
    assert not (tmp_path / "empty").exists()


# -- bad files -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "content", "message"), [
    ("nq.jsonl", '{"question": "q", "answer": ["a"]}\n{"answer": ["b"]}\n',
     r"nq\.jsonl: row 2: missing field 'question' \(or 'problem', 'Question'\) \(fields: answer\)"),
    ("nq.jsonl", '{"question": "q", "answer": ["a"]}\n{"question": "q2", "answer": [""]}\n',
     r"row 2: field 'answer' holds no answer"),
    ("nq.jsonl", '{"question": "q", "answer": []}\n', r"row 1: field 'answer' is empty"),
    ("nq.jsonl", "", r"nq\.jsonl: empty file"),
    ("nq.json", "[]", r"nq\.json: no records"),
    ("nq.jsonl", '{"question": "q", "answer": ["a"]}\n\n{"question": "q2", answer: 1}\n',
     r"nq\.jsonl: line 3: invalid JSON"),
    ("nq.json", '[\n {"question": "q",\n  "answer": ["a"]\n ,]', r"nq\.json: invalid JSON at line 4"),
    ("nq.json", '{"rows": []}', r"expected a list of records or \{\"data\": \[\.\.\.\]\}"),
    ("nq.json", '[["q", "a"]]', r"row 1: expected an object"),
    ("nq.json", '[{"id": 1, "question": "a", "answer": "x"}, {"id": 1, "question": "b", "answer": "y"}]',
     r"row 2: duplicate id '1' \(first at row 1\)"),
    ("nq.txt", "question,answer", r"unsupported file type '\.txt'"),
])
def test_bad_mhqa_files_give_clear_errors(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_benchmark("nq", path)


def test_bad_math_code_and_parquet_files(tmp_path):
    math = tmp_path / "m.jsonl"
    write_records([{"problem": "p", "solution": "no box here"}], math)
    with pytest.raises(ValueError, match=r"row 1: missing field 'answer'.*'solution' has no \\boxed"):
        load_benchmark("math500", math)
    code = tmp_path / "c.jsonl"
    write_records([{"question_id": "x", "question_content": "Do it."}], code)
    with pytest.raises(ValueError, match=r"row 1: no tests: expected 'ground_truth'"):
        load_benchmark("livecodebench_v5", code)
    broken = tmp_path / "b.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(ValueError, match=r"b\.parquet: not a readable parquet file"):
        load_benchmark("aime24", broken)


def test_missing_file_says_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"gaia_dev_103\.json.*python -m afm\.eval\.download gaia"):
        load_benchmark("gaia", data_root=tmp_path)
    alt = tmp_path / "web_agent" / "gaia_dev_103.jsonl"  # same stem, another format
    write_records([{"task_id": "a", "question": "q", "answer": "x", "Level": 1}], alt)
    assert resolve_data_file("gaia", data_root=tmp_path) == alt


def test_data_root_from_environment(tmp_path, monkeypatch):
    write_records([{"question": "q", "answer": ["a"]}], tmp_path / "mhqa_agent" / "nq_full.jsonl")
    monkeypatch.setenv("AFM_EVAL_DATA", str(tmp_path))
    assert load_benchmark("nq")[0].gold == ["a"]


# -- download helpers (offline) ------------------------------------------------------------------------------
def test_download_offline_fails_clearly_without_touching_the_network(tmp_path, monkeypatch):
    from afm.eval import download as dl

    def no_network(*args, **kwargs):
        raise AssertionError("the network was used")

    monkeypatch.setattr(dl, "_fetch_hf", no_network)
    monkeypatch.setattr(dl, "_fetch_lcb", no_network)
    for var in dl.OFFLINE_ENV:  # scripts/test.sh exports some of these: start from a known state
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("gaia", "livecodebench_v5", "browsecomp"):
        where = get_benchmark(name).default_file
        with pytest.raises(dl.DownloadError, match=r"offline .*Put the file at .*" + where):
            dl.download(name, tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE")

    def unreachable(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr(dl, "_fetch_hf", unreachable)
    with pytest.raises(dl.DownloadError, match=r"cannot download 'nq' from RUC-NLPIR/FlashRAG_datasets: OS"):
        dl.download("nq", tmp_path)
    assert not list(tmp_path.rglob("*.json*"))


def test_write_benchmark_from_an_in_memory_dataset(tmp_path):
    from datasets import Dataset

    from afm.eval.download import write_benchmark

    gaia_hf = Dataset.from_list([
        {"task_id": "t1", "Question": "Q1?", "Level": "1", "Final answer": "A1", "file_name": "",
         "Annotator Metadata": {"Steps": "2"}},
        {"task_id": "t2", "Question": "Q2 + file?", "Level": "2", "Final answer": "A2", "file_name": "x",
         "Annotator Metadata": {"Steps": "5"}},
        {"task_id": "t3", "Question": "Q3?", "Level": "3", "Final answer": "A3", "file_name": "",
         "Annotator Metadata": {"Steps": "9"}}])
    path = write_benchmark("gaia", gaia_hf, tmp_path)
    assert path == tmp_path / "web_agent" / "gaia_dev_103.json"
    assert read_records(path)[0] == {"id": 0, "task_id": "t1", "question": "Q1?", "answer": "A1",
                                     "Level": "1", "Annotator_Metadata": {"Steps": "2"}}
    items = load_benchmark("gaia", data_root=tmp_path)
    assert [(i.qid, i.level, i.gold) for i in items] == [("t1", "1", ["A1"]), ("t3", "3", ["A3"])]
    flashrag = Dataset.from_list([{"id": "test_0", "question": "who?", "golden_answers": ["Ann", "Anne"],
                                   "metadata": {}}])
    nq = write_benchmark("nq", flashrag, tmp_path)
    assert nq.name == "nq_full.jsonl" and read_records(nq)[0]["data_source"] == "nq"
    assert load_benchmark("nq", data_root=tmp_path)[0].gold == ["Ann", "Anne"]
    with pytest.raises(ValueError, match=r"row 1: missing field 'question' \(or 'problem'"):
        write_benchmark("aime25", [{"question_text": "x", "answer": "1"}], tmp_path)
    assert not (tmp_path / "code_agent").exists()  # nothing written for rows the loader rejects


def test_download_browsecomp_from_a_local_csv_while_offline(tmp_path, monkeypatch):
    from afm.eval.download import download

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    csv_path = tmp_path / "browse_comp_test_set.csv"
    write_records([{"problem": encrypt("Name the ship.", "c"), "answer": encrypt("Grey Heron", "c"),
                    "problem_topic": "Sports", "canary": "c"}], csv_path)
    path = download("browsecomp", tmp_path / "root", source=str(csv_path))
    assert read_records(path) == [{"question": "Name the ship.", "answer": "Grey Heron", "topic": "Sports"}]
    assert browsecomp_decrypt(encrypt("é ok", "k"), "k") == "é ok"


def test_the_download_converter_is_named_by_the_spec(tmp_path):
    import dataclasses

    from afm.eval.download import (
        HF_SOURCES,
        LCB_WINDOWS,
        DownloadError,
        convert_rows,
        converter_of,
        write_benchmark,
    )

    for spec in BENCHMARKS.values():
        if spec.family == "demo":
            assert spec.converter is None, spec.name  # written by afm.eval.demo_sets, not downloaded
            continue
        fetch = converter_of(spec).fetch
        assert {"hf": spec.name in HF_SOURCES, "lcb": spec.name in LCB_WINDOWS, "csv": True}[fetch], spec.name
    # A benchmark added to the table in an existing layout downloads without a change to afm.eval.download.
    aime26 = dataclasses.replace(get_benchmark("aime24"), name="aime26", default_file="code_agent/aime26.parquet")
    path = write_benchmark(aime26, [{"problem": "What is 1+1?", "answer": "2", "url": "u", "votes": 3}], tmp_path)
    assert path == tmp_path / "code_agent" / "aime26.parquet"
    assert read_records(path) == [{"problem": "What is 1+1?", "answer": "2", "url": "u"}]
    with pytest.raises(DownloadError, match="'demo_math' has no converter"):
        convert_rows("demo_math", [])
    with pytest.raises(DownloadError, match="'nope' is not one of mhqa, gaia"):
        convert_rows(dataclasses.replace(aime26, converter="nope"), [])
