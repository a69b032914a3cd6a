"""Real inputs for the ``afm view`` tests (helpers, no tests), built once per test session.

* two ``afm eval run`` folders of demo_math with trajectories (``sft`` and ``rl``) whose answers are scripted, so
  the questions that flip between them are known: :data:`FLIP_UP` (wrong in sft, right in rl), :data:`FLIP_DOWN`;
  tool calls that succeed, fail (``1/0``) and are invalid (an empty ``<code>``);
* the same run without ``--keep-trajectories`` (``notraj``: the table and scores only);
* a run of hostile questions and answers (script tags, ``onerror=``, ``javascript:`` links, ``</textarea>``,
  ``{{ }}``, odd Unicode), whose script would set ``window.__afmPwned``;
* ``afm infer`` output of the code agent; an SFT set from ``afm data distill`` + ``afm data convert`` and its
  ``afm-sft mask-report --json``;
* verl dumps: verl takes minutes to run, so :func:`write_verl_dumps` writes two steps of rollouts and two of
  validation in the format of verl 0.9.1's ``RayPPOTrainer._write_generations`` (``<step>.jsonl``), with the keys a
  real ``train_dapo_code_agent.sh --local`` run of afm dumped (2026-11-28: rollouts input, output, gts, score, step,
  uid; validation lines also compute_score's keys and ``reward``), and the quickstart's two ``lookup`` routes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
F = "```"
# demo_math: q0 52*30+26, q1 38*15+6, q2 83*26+15, q3 28*48+27, q4 85*84+41
GOLD = {"demo-math-0": "1586", "demo-math-1": "576", "demo-math-2": "2173", "demo-math-3": "1371",
        "demo-math-4": "7181"}
QUESTION = {"demo-math-0": r"52 \* 30 \+ 26", "demo-math-1": r"38 \* 15 \+ 6", "demo-math-2": r"83 \* 26 \+ 15",
            "demo-math-3": r"28 \* 48 \+ 27", "demo-math-4": r"85 \* 84 \+ 41"}
RIGHT = {"sft": {"demo-math-0", "demo-math-1"}, "rl": {"demo-math-0", "demo-math-2", "demo-math-4"}}
FLIP_UP = RIGHT["rl"] - RIGHT["sft"]
FLIP_DOWN = RIGHT["sft"] - RIGHT["rl"]
HOSTILE = ('<script>window.__afmPwned = 1</script><img src=x onerror="window.__afmPwned = 2"> '
           '<a href="javascript:window.__afmPwned = 3">click me</a> </textarea></script><script>window.__afmPwned = 4'
           '</script> {{ 7 * 7 }} ${7 * 7} <!-- \u202eevil\u202c \u200b 🙂 e\u0301 \ufeff &amp; &lt;b&gt;')
HOSTILE_MARK = "HOSTILE-Q"


def _code_call(expr: str) -> str:
    return f"<think> use code </think>\n<code>\n{F}py\nprint({expr})\n{F}\n</code>"


def eval_rules(run: str) -> list[dict]:
    """Scripted replies for one demo_math run: a code call, then an answer right for :data:`RIGHT`[run]."""
    rules, first = [], []
    for qid, q in QUESTION.items():
        answer = GOLD[qid] if qid in RIGHT[run] else str(int(GOLD[qid]) + 1)
        rules.append({"match": rf"{q}[\s\S]*</code>\n\n<observation>",
                      "content": f"<think> the code printed it </think>\n<answer>\\boxed{{{answer}}}</answer>"})
        if qid == "demo-math-3":
            call = _code_call("1/0")  # the tool fails: status error
        elif qid == "demo-math-4" and run == "sft":
            call = "<think> use code </think>\n<code>\n</code>"  # an empty call: status invalid
        else:
            call = _code_call(q.replace("\\", ""))
        first.append({"match": q, "content": call, "times": -1})
    return rules + first


def hostile_rules() -> list[dict]:
    return [{"match": rf"{HOSTILE_MARK}[\s\S]*</code>\n\n<observation>",
             "content": f"<think>{HOSTILE}</think>\n<answer>\\boxed{{1}} {HOSTILE}</answer>"},
            {"match": HOSTILE_MARK, "content": f"<think>{HOSTILE}</think>\n<code>\n{F}py\nprint({HOSTILE!r})\n{F}\n</code>"}]


def _eval(llm, tiny_model: Path, run_dir: Path, *extra: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GRM_BASE_URL", "LIVECODEBENCH_TESTCASES_DIR")}
    cmd = [sys.executable, "-m", "afm.cli", "eval", "run", "--benchmarks", "demo_math", "--run-dir", str(run_dir),
           "--backend", "openai", "--base-url", llm.base_url, "--model", "standin", "--tokenizer", str(tiny_model),
           "--concurrency", "4", "--quiet", "--max-tokens-per-turn", "1024", "--max-response-tokens", "4096", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


def make_eval_runs(llm, tiny_model: Path, base: Path) -> dict[str, Path]:
    out = {}
    for run in ("sft", "rl"):
        llm.reset()
        llm.rules(*eval_rules(run))
        out[run] = base / "eval" / run
        _eval(llm, tiny_model, out[run], "--n", "2", "--keep-trajectories")
    llm.reset()
    llm.rules(*eval_rules("rl"))
    out["notraj"] = base / "eval" / "notraj"
    _eval(llm, tiny_model, out["notraj"], "--n", "1")
    hostile = base / "hostile.jsonl"
    hostile.write_text("".join(json.dumps({"unique_id": f"hostile-{i}", "problem": f"{HOSTILE_MARK} {i}: {HOSTILE}",
                                           "solution": "\\boxed{1}", "answer": "1"}, ensure_ascii=False) + "\n"
                               for i in range(2)), encoding="utf-8")
    llm.reset()
    llm.rules(*hostile_rules())
    out["hostile"] = base / "eval" / "hostile"
    _eval(llm, tiny_model, out["hostile"], "--n", "1", "--keep-trajectories", "--file", f"demo_math={hostile}")
    return out


def make_infer(llm, tiny_model: Path, base: Path) -> Path:
    llm.reset()
    llm.rules({"match": r"print\(2 \+ 2\)\n```\n</code>\n\n<observation>",
               "content": "<think> it printed </think>\n<answer>4</answer>"},
              {"match": "", "content": _code_call("2 + 2")})
    questions = base / "questions.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)})
                                 + "\n" for i in range(2)))
    out = base / "infer.jsonl"
    cmd = [sys.executable, "-m", "afm.cli", "infer", "--input", str(questions), "--output", str(out), "--backend",
           "openai", "--base-url", llm.base_url, "--model", "standin", "--tokenizer", str(tiny_model), "--prompt",
           "code_agent", "--n", "2", "--concurrency", "2", "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def make_sft(tiny_model: Path, base: Path) -> tuple[Path, Path]:
    """An SFT set written by afm data convert from teacher runs, and its afm-sft mask-report --json."""
    from conftest import lf_config, run_afm_sft
    from teacher_replies import code_run_rules

    from afm.data import convert, distill
    from afm.offline.openai_standin import StandIn

    work = base / "distill"
    work.mkdir(parents=True, exist_ok=True)
    questions = work / "questions.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "a", "question": "Six times seven, in parts?", "answer": "42"},
        {"id": "b", "question": "Forty-two, computed twice?", "answer": "42"}]))
    (work / "tools.yaml").write_text(yaml.safe_dump({"tools": [{"name": "code", "config": {"timeout": 10}}]}))
    runs = work / "runs.jsonl"
    with StandIn(default_reply="(no rule matched)") as teacher:
        teacher.rules(*code_run_rules(n_code=2))
        rc = distill.main(["--input", str(questions), "--output", str(runs), "--tools-config", str(work / "tools.yaml"),
                           "--tools", "code", "--prompt-key", "afm_all_tools", "--concurrency", "2", "--no-progress",
                           "--set", f"default.base_url={teacher.base_url}", "--set", "default.model=teacher-m"])
    assert rc == 0
    data = base / "sft_data"
    assert convert.main(["--input", str(runs), "--output-dir", str(data), "--name", "afm_view_sft"]) == 0
    cfg = lf_config(tiny_model, data, base / "sft_out", dataset="afm_view_sft")
    (base / "sft.yaml").write_text(yaml.safe_dump(cfg))
    report = base / "mask_report.json"
    proc = run_afm_sft(["mask-report", str(base / "sft.yaml"), "--json", str(report)])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return data, report


LOOKUP_PROMPT = ("system\nYou are a research agent.\nuser\nAnswer with the tools.\n\nQuestion: What is the population "
                 "of Town {town}? Answer with the number.\nassistant\n")


def _route(town: int, census: bool, figure: int) -> str:
    page = f"http://demo.local/census/{town}" if census else f"http://demo.local/town/{town}"
    return (f"<think> search for Town {town} </think>\n<web_search> population of Town {town} </web_search>\n\n"
            f"<observation>\n1. Census of Town {town} - http://demo.local/census/{town}\n2. Town {town} - "
            f"http://demo.local/town/{town}\n</observation>\n\n<crawl_page> {page} </crawl_page>\n\n<observation>\n"
            f"Town {town} has {figure} inhabitants.\n</observation>\n\n<answer> {figure} </answer>")


def write_verl_dumps(folder: Path) -> dict[int, list[dict]]:
    """Two DAPO steps of 2 prompts x 4 rollouts each, as verl 0.9.1 dumps rollouts (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    steps: dict[int, list[dict]] = {}
    for step in (1, 2):
        lines = []
        for g, (town, true, stale) in enumerate(((4821, 5310, 4970), (7702, 880, 910))):
            for k in range(4):
                census = k < (3 if step == 1 else 1)  # RL moves the route from the census page to the town's own
                figure = stale if census else true
                lines.append({"input": LOOKUP_PROMPT.format(town=town), "output": _route(town, census, figure),
                              "gts": str(true), "score": float(figure == true), "step": step,
                              "uid": f"0c0ffee0-{step:04d}-4000-8000-{g:012d}_{k}_0"})
        steps[step] = lines
        _write_step(folder, step, lines)
    return steps


def write_verl_validation(folder: Path) -> None:
    """Validation before training (step 0) and after step 2: one greedy sample per prompt, with the reward's keys."""
    folder.mkdir(parents=True, exist_ok=True)
    for step in (0, 2):
        lines = []
        for g, (town, true, stale) in enumerate(((4821, 5310, 4970), (7702, 880, 910))):
            figure = stale if step == 0 else true
            acc = float(figure == true)
            lines.append({"input": LOOKUP_PROMPT.format(town=town), "output": _route(town, step == 0, figure),
                          "gts": str(true), "score": acc, "step": step, "acc": acc, "data_source": "world_lookup",
                          "details": "{}", "error": "", "format_ok": 1.0, "format_problems": "", "infra_error": 0.0,
                          "method": "em", "overlong": False, "overlong_penalty": 0.0, "overlong_reward": 0.0,
                          "pred": str(figure), "reward": acc, "uid": f"0c0ffee0-{step:04d}-4000-9000-{g:012d}"})
        _write_step(folder, step, lines)


def _write_step(folder: Path, step: int, lines: list[dict]) -> None:
    with open(folder / f"{step}.jsonl", "w") as f:  # as _write_generations writes it
        for entry in lines:
            f.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")


def view_inputs(base: Path, tiny_model: Path) -> dict[str, Path]:
    """Every input, built once under ``base`` (a later call in the same session reuses them)."""
    done = base / "inputs.json"
    if done.is_file():
        return {k: Path(v) for k, v in json.loads(done.read_text()).items()}
    from afm.offline.openai_standin import StandIn

    base.mkdir(parents=True, exist_ok=True)
    with StandIn(tokenizer=str(tiny_model)) as llm:
        paths = make_eval_runs(llm, tiny_model, base)
        paths["infer"] = make_infer(llm, tiny_model, base)
    paths["sft_set"], paths["mask_report"] = make_sft(tiny_model, base)
    paths["rollouts"] = base / "rl" / "rollouts"
    write_verl_dumps(paths["rollouts"])
    paths["validation"] = base / "rl" / "validation"
    write_verl_validation(paths["validation"])
    done.write_text(json.dumps({k: str(v) for k, v in paths.items()}))
    return paths


def questions_by_qid(run_dir: Path) -> dict[str, str]:
    return {r["qid"]: r["question"] for r in map(json.loads, (run_dir / "results.jsonl").read_text().splitlines())}


def strip_ws(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


_BLOCK = re.compile(r'<script type="application/octet-stream" id="(afm-[a-z]\d*)" data-n="(\d+)">([A-Za-z0-9+/=]*)'
                    r"</script>")


def read_page(page: Path) -> dict[str, bytes]:
    """Every data block of a page, decoded (``afm-m``: the manifest; ``afm-t<N>``, ``afm-k<N>``, ``afm-v<N>``)."""
    import base64
    import gzip

    out = {}
    for m in _BLOCK.finditer(page.read_text(encoding="utf-8")):
        raw = gzip.decompress(base64.b64decode(m.group(3)))
        assert len(raw) == int(m.group(2))
        out[m.group(1)] = raw
    return out


def manifest_of(page: Path) -> dict:
    return json.loads(read_page(page)["afm-m"])


def rows_of(manifest: dict) -> list[dict]:
    """The table's rows as dicts (categories decoded)."""
    cols, cats = manifest["rows"]["cols"], manifest["rows"]["cats"]
    return [{f: (cats[f][v[i]] if f in cats else v[i]) for f, v in cols.items()} for i in range(manifest["rows"]["n"])]


def detail_of(blocks: dict[str, bytes], manifest: dict, d: int) -> dict:
    for c, (first, count) in enumerate(manifest["chunks"]):
        if first <= d < first + count:
            return json.loads(blocks[f"afm-t{c}"])[d - first]
    raise KeyError(d)


# every kind of input, in the order the tests' page lists them; sft and rl are compared
PAGE_ORDER = ("sft", "rl", "notraj", "hostile", "infer", "sft_set", "mask_report", "rollouts", "validation")


def write_page(inputs: dict[str, Path], out: Path):
    """The tests' page of every input (:data:`PAGE_ORDER`) at ``out``; the writer's info."""
    from afm.view import write_view

    return write_view([inputs[k] for k in PAGE_ORDER], out, compare=("sft", "rl"))
