"""Command-line behaviour: every Python entry point's --help/-h prints usage and exits 0 without side effects, and
a user's mistake (a misspelt benchmark, a missing data file) gets one clear line instead of a traceback. The
benchmark files are found in the original project's data folder layout too (its names, one folder deeper).

The shell scripts' --help is checked in tests/test_shell_scripts.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# (argv after `python`) of every entry point: the console scripts (pyproject [project.scripts]) with each
# subcommand, and every module with a `__main__` block a user runs.
AFM = ["-m", "afm.cli"]
AFM_SFT = ["-m", "afm.sft.cli"]
ENTRY_POINTS: list[list[str]] = [
    AFM, [*AFM, "quickstart"], [*AFM, "validate"], [*AFM, "doctor"], [*AFM, "sandbox"], [*AFM, "sandbox", "check"],
    [*AFM, "sandbox", "run"], [*AFM, "infer"], [*AFM, "eval"], [*AFM, "eval", "run"], [*AFM, "eval", "report"],
    [*AFM, "model"], [*AFM, "model", "prepare"], [*AFM, "model", "export"], [*AFM, "view"],
    [*AFM, "data"], *([*AFM, "data", c] for c in ("distill", "convert", "filter", "dpo", "select", "rl")),
    AFM_SFT, [*AFM_SFT, "mask-report"],
    *(["-m", m] for m in (
        "afm.data.cli", "afm.eval.run", "afm.eval.report", "afm.eval.download", "afm.eval.lcb_testcases", "afm.data.convert",
        "afm.data.difficulty", "afm.data.distill", "afm.data.dpo_pairs", "afm.data.filters", "afm.data.rl_parquet",
        "afm.doctor", "afm.sandbox.cli", "afm.agent.infer", "afm.servers.search_server", "afm.servers.crawl_server",
        "afm.servers.wiki_server", "afm.servers.demo_site", "afm.servers.bm25_index", "afm.servers.demo_data",
        "afm.quickstart.recipe", "afm.quickstart.rl", "afm.rl.local.toy", "afm.sft.knobs", "afm.launch.sft",
        "afm.rl.knobs", "afm.view.cli",
        "afm.offline.openai_standin")),
]
# Modules with a `__main__` block that are not run by users: worker processes started by afm itself.
INTERNAL_MAINS = {"afm.rewards._math_worker", "afm.sandbox.jail_runner",
                  # the script torchrun runs on each SFT rank (afm-sft starts it; its --help is LLaMA-Factory's, ~9 s
                  # of imports: afm-sft train --help is the user's)
                  "afm.sft.launcher",
                  "afm.rl.cluster",  # the RL launcher's node check (needs ray: .venv-rl only)
                  # the RL launcher's worker zygote and the client Ray runs for each worker (afm/rl/local/zygote.py)
                  "afm.rl.local.zygote", "afm.rl.local.zygote_client"}


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    # PYTHONPATH: this checkout's afm, whatever the environment's editable install points at.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "PYTHONPATH": str(REPO),
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _python(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _modules_with_main() -> set[str]:
    found = set()
    for path in (REPO / "afm").rglob("*.py"):
        if re.search(r'^if __name__ == "__main__":', path.read_text(encoding="utf-8"), re.MULTILINE):
            found.add(".".join(path.relative_to(REPO).with_suffix("").parts))
    return found


def test_every_main_module_is_an_entry_point_here():
    listed = {argv[1] for argv in ENTRY_POINTS}
    assert _modules_with_main() - INTERNAL_MAINS - listed == set()


def test_every_afm_subcommand_is_listed():
    from afm.data.cli import COMMANDS

    listed = {tuple(argv[2:]) for argv in ENTRY_POINTS if argv[:2] == AFM}
    assert {("data", c) for c in COMMANDS} <= listed
    from afm import cli

    top = set(re.findall(r'sub\.add_parser\("([a-z]+)"', Path(cli.__file__).read_text()))
    assert top and {(c,) for c in top} <= listed


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("argv", ENTRY_POINTS, ids=lambda a: " ".join(a[1:]))
def test_help_prints_usage_and_exits_0(argv, flag, tmp_path):
    work = tmp_path / "cwd"
    work.mkdir()
    proc = _python([*argv, flag], work, _env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower(), proc.stdout[:500]
    assert "Traceback" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr[-2000:]
    assert list(work.iterdir()) == []  # nothing written where it was run


# ---- user mistakes: one line, exit 2, nothing started -----------------------------------------------------------

def _eval_run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return _python([*AFM, "eval", "run", "--model", "m", "--tokenizer", "t", "--base-url",
                    "http://127.0.0.1:9/v1", *args], tmp_path, _env(tmp_path))


@pytest.mark.parametrize(("benchmarks", "hint"), [("hle_tst", "did you mean hle?"),
                                                   ("webwalkr", "did you mean webwalker?"),
                                                   ("aime2", "did you mean aime25 or aime24"),
                                                   ("gaia,nosuchbench", "unknown benchmark 'nosuchbench'")])
def test_unknown_benchmark_is_one_line_with_suggestions(benchmarks, hint, tmp_path):
    proc = _eval_run(["--benchmarks", benchmarks, "--run-dir", str(tmp_path / "run")], tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("afm eval run: unknown benchmark") and hint in proc.stderr
    assert "known: nq, triviaqa" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_missing_data_file_is_one_line(tmp_path):
    proc = _eval_run(["--benchmarks", "hle", "--data-root", str(tmp_path / "data"), "--run-dir",
                      str(tmp_path / "run")], tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "no data file for benchmark 'hle'" in proc.stderr and "does not exist" in proc.stderr
    (tmp_path / "data").mkdir()
    proc = _eval_run(["--benchmarks", "hle", "--data-root", str(tmp_path / "data"), "--run-dir",
                      str(tmp_path / "run")], tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "web_agent/hle_test.json and " in proc.stderr and "web_agent/test_benchmarks/hle_test.json" in proc.stderr
    proc = _eval_run(["--benchmarks", "hle", "--file", f"hle={tmp_path / 'nope.json'}", "--run-dir",
                      str(tmp_path / "run")], tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "nope.json" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_bad_file_flag_is_one_line(tmp_path):
    for flag, message in ((["--file", "hle"], "--file takes BENCH=PATH, got 'hle'"),
                          (["--file", "gaia=x.json"], "--file names benchmarks not in --benchmarks: gaia")):
        proc = _eval_run(["--benchmarks", "hle", *flag, "--run-dir", str(tmp_path / "run")], tmp_path)
        assert proc.returncode == 2 and proc.stderr.strip() == f"afm eval run: {message}", proc.stderr


# ---- the original project's data folder as --data-root --------------------------------------------------------

def _original_data_folder(root: Path) -> Path:
    """A small copy of the original's ``AFM/data`` layout: its folder and file names, rows in its fields."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    web = root / "web_agent" / "test_benchmarks"
    mhqa = root / "mhqa_agent" / "test_benchmarks"
    code = root / "code_agent" / "code_math_benchmarks"
    for d in (web, mhqa, code):
        d.mkdir(parents=True)
    (web / "gaia_dev_103.json").write_text(json.dumps([
        {"id": "1", "task_id": "17b5a6a3", "question": "How many?", "answer": "34689", "Level": "2",
         "Annotator_Metadata": "{}"}]))
    (web / "hle_test.json").write_text(json.dumps([
        {"id": "0", "question": "Compute it.", "answer": "11520", "answer_type": "exactMatch", "rationale": "r",
         "raw_subject": "Mathematics", "category": "Math"}]))
    (web / "webwalker_main.json").write_text(json.dumps([
        {"question": "Which program?", "answer": "Horizon", "root_url": "https://ehaweb.org/", "info": "{}"}]))
    (mhqa / "nq_full.jsonl").write_text(json.dumps(
        {"question": "who got the first nobel prize in physics", "answer": ["Wilhelm Conrad Röntgen"],
         "data_source": "nq"}) + "\n")

    def verl_rows(data_source: str, pairs: list[tuple[str, str]]) -> pa.Table:
        # The original's math parquet files: verl RL rows with the question after "Question:" in the prompt.
        return pa.Table.from_pylist([
            {"data_source": data_source, "prompt": [{"role": "user", "content": f"Solve it.\n\nQuestion: {q}"}],
             "ability": "fact-reasoning", "reward_model": {"ground_truth": a, "style": "rule"},
             "extra_info": {"index": str(i), "need_tools_kwargs": True, "split": "train"}}
            for i, (q, a) in enumerate(pairs)])

    pq.write_table(verl_rows("MATH500", [("What is 1+1?", "2"), ("What is 2+2?", "4")]), code / "math500.parquet")
    pq.write_table(verl_rows("OlympiadBench", [("What is 3+3?", "6")]), code / "OlympiadBench.parquet")
    return root


ORIGINAL_STEMS = {"gaia_dev_103": ("gaia", 1), "hle_test": ("hle", 1), "webwalker_main": ("webwalker", 1),
                  "nq_full": ("nq", 1), "math500": ("math500", 2), "OlympiadBench": ("olympiadbench", 1)}


def test_original_file_stems_are_benchmark_names():
    from afm.eval.datasets import get_benchmark

    for stem, (name, _) in ORIGINAL_STEMS.items():
        assert get_benchmark(stem).name == name


def test_data_root_in_the_original_layout(tmp_path, monkeypatch):
    from afm.eval.datasets import load_benchmark, resolve_data_file
    from afm.eval.run import add_args, load_inputs

    monkeypatch.delenv("AFM_EVAL_DATA", raising=False)
    root = _original_data_folder(tmp_path / "AFM" / "data")
    for stem, (name, n) in ORIGINAL_STEMS.items():
        path = resolve_data_file(stem, data_root=root)
        assert path.parent.parent.parent == root and path.stem == stem
        items = load_benchmark(stem, data_root=root)
        assert len(items) == n and items[0].benchmark == name
    assert load_benchmark("math500", data_root=root)[1].question == "What is 2+2?"

    import argparse

    parser = argparse.ArgumentParser()
    add_args(parser)
    args = parser.parse_args(["--model", "m", "--run-dir", str(tmp_path / "run"), "--data-root", str(root),
                              "--benchmarks", ",".join(ORIGINAL_STEMS)])
    names, _specs, items = load_inputs(args)
    assert names == [name for name, _ in ORIGINAL_STEMS.values()]
    assert {b: len(v) for b, v in items.items()} == {name: n for name, n in ORIGINAL_STEMS.values()}


def test_afm_layout_wins_over_the_original_one(tmp_path):
    from afm.eval.datasets import resolve_data_file

    root = _original_data_folder(tmp_path)
    ours = root / "web_agent" / "hle_test.json"
    ours.write_text((root / "web_agent" / "test_benchmarks" / "hle_test.json").read_text())
    assert resolve_data_file("hle", data_root=root) == ours


# (argv after `afm`, the start of the one line it must print); run where only q.jsonl (a good question file) exists
MISTAKES = [
    (["infer", "--input", "nope.jsonl", "--output", "out.jsonl", "--model", "m", "--tokenizer", "t"],
     "afm infer: input file not found: nope.jsonl"),
    (["infer", "--input", "q.jsonl", "--output", "out.jsonl", "--model", "m", "--tokenizer", "t", "--prompt",
      "web_agnt"], "afm infer: unknown prompt 'web_agnt' (did you mean web_agent"),
    (["infer", "--input", "q.jsonl", "--output", "out.jsonl", "--model", "m", "--tokenizer", "no-such-tokenizer"],
     "afm infer: cannot load the tokenizer (--tokenizer) 'no-such-tokenizer': "),
    (["eval", "run", "--benchmarks", "demo_math", "--run-dir", "out", "--model", "m", "--tokenizer",
      "no-such-tokenizer"], "afm eval run: cannot load the tokenizer"),
    (["eval", "report", "out"], "afm eval report: out/results.jsonl: no results file"),
    (["view", "nothing-here"], "afm view: nothing-here: no such file or folder"),
    (["view", "q.jsonl"], "afm view: q.jsonl: not an afm eval run folder"),
    (["sandbox", "run", "nope.py"], "afm sandbox run: FILE nope.py: no such file"),
]


@pytest.mark.parametrize(("argv", "line"), MISTAKES, ids=["infer-no-input", "infer-prompt", "infer-tokenizer",
                                                          "eval-run-tokenizer", "eval-report-no-run", "view-no-path",
                                                          "view-not-an-input", "sandbox-no-file"])
def test_a_mistake_is_one_line_and_writes_nothing(argv, line, tmp_path):
    work = tmp_path / "cwd"
    work.mkdir()
    (work / "q.jsonl").write_text('{"question": "2+2?"}\n')
    proc = _python([*AFM, *argv], work, _env(tmp_path))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith(line) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert sorted(p.name for p in work.iterdir()) == ["q.jsonl"]  # no output file, run or report folder


# ---- what a newcomer reads in --help (issue 40) ---------------------------------------------------------------

def _help_text(argv: list[str], tmp_path: Path, **env: str) -> str:
    """``argv --help``'s output without whitespace (argparse wraps lines, at hyphens too)."""
    proc = _python([*argv, "--help"], tmp_path, {**_env(tmp_path), **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return "".join(proc.stdout.split())


def test_model_prepare_help_names_the_real_folder_and_what_the_sizes_are(tmp_path):
    text = _help_text([*AFM, "model", "prepare"], tmp_path)
    assert f"{tmp_path}/home/.cache/afm/models/<name>" in text, text
    text = _help_text([*AFM, "model", "prepare"], tmp_path, AFM_MODEL_CACHE=str(tmp_path / "cache"))
    assert f"{tmp_path}/cache/<name>" in text and "/.cache/afm/models" not in text, text
    # measured on gemma3-270m: 1.36 GB written, 2.7 GB peak resident memory
    assert "~1.4GBondisk" in text and "~3GBofmemory" in text, text


def test_eval_run_help_lists_the_demo_sets(tmp_path):
    from afm.eval.demo_sets import DEMO_SET_NAMES

    text = _help_text([*AFM, "eval", "run"], tmp_path)
    assert "demosets" in text.lower() and ",".join(DEMO_SET_NAMES) in text, text
