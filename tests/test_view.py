"""``afm view`` without a browser: what the page carries from real eval runs, ``afm infer`` output, an SFT set with
its mask report and verl dumps (tests/view_runs.py), that it is self-contained, and the CLI's errors.

What a user sees and does in the page is tested in headless Chromium (tests/test_view_browser.py)."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import run_shared_dir
from view_runs import (
    FLIP_DOWN,
    FLIP_UP,
    HOSTILE,
    RIGHT,
    detail_of,
    manifest_of,
    read_page,
    rows_of,
    view_inputs,
    write_page,
)

from afm.view import write_view
from afm.view.samples import coa_parts, utf16_index

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_model):
    # built once a run: test_view.py and test_view_browser.py may run on different xdist workers
    folder, lock = run_shared_dir(tmp_path_factory, "view-inputs")
    with lock:
        return view_inputs(folder, tiny_model)


@pytest.fixture(scope="module")
def page(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("view") / "view.html"
    info = write_page(inputs, out)
    assert info.path == out and info.bytes == out.stat().st_size
    return out


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def test_sources_in_order_with_every_sample(page, inputs):
    m = manifest_of(page)
    kinds = [(s["label"], s["kind"], s["n"]) for s in m["sources"]]
    assert kinds == [("afm_view_sft", "sft", 2), ("sft", "eval", 10), ("rl", "eval", 10), ("notraj", "eval", 5),
                     ("hostile", "eval", 2), ("infer", "infer", 4), ("rl/rollouts", "rollouts", 16),
                     ("rl/validation", "validation", 4)]
    assert m["rows"]["n"] == sum(n for *_, n in kinds) and m["compare"] == ["sft", "rl"]


def test_eval_rows_scores_and_the_reports_figures(page, inputs):
    from afm.eval.metrics import summarize_run
    from afm.eval.report import fmt_est

    m = manifest_of(page)
    rows = [r for r in rows_of(m) if m["sources"][r["src"]]["label"] in ("sft", "rl")]
    for r in rows:
        run = m["sources"][r["src"]]["label"]
        assert r["acc"] == (1 if r["qid"] in RIGHT[run] else 0), r
        assert r["bench"] == "demo_math" and r["meth"] == "math_verify" and r["st"] == "ok"
    flips = {r["qid"] for r in rows if r["acc"] == 1 and m["sources"][r["src"]]["label"] == "rl"} - \
        {r["qid"] for r in rows if r["acc"] == 1 and m["sources"][r["src"]]["label"] == "sft"}
    assert flips == FLIP_UP and {"demo-math-1"} == FLIP_DOWN
    sft = next(s for s in m["sources"] if s["label"] == "sft")
    accuracy = next(b for b in sft["overview"] if b["title"].startswith("Accuracy"))
    expected = fmt_est(summarize_run(inputs["sft"])["benchmarks"]["demo_math"]["avg_at_k"])
    assert accuracy["table"]["rows"][0][4] == expected  # the report's own figure, CI included


def test_trajectory_details_are_the_records(page, inputs):
    m = manifest_of(page)
    blocks = read_page(page)
    src = next(i for i, s in enumerate(m["sources"]) if s["label"] == "sft")
    records = {(r["qid"], r["sample"]): r for r in _records(inputs["sft"])}
    statuses = {}
    for row in rows_of(m):
        if row["src"] != src:
            continue
        rec = records[(row["qid"], row["k"])]["trajectory"]
        d = detail_of(blocks, m, row["d"])
        text = "".join(s["text"] for s in rec["segments"])
        assert d["text"] == text and d["prompt"] == rec["prompt_text"]
        # the masks are the observation segments, the CoA parts tile the text
        starts = [0]
        for s in rec["segments"]:
            starts.append(starts[-1] + len(s["text"]))
        obs = [x for i, s in enumerate(rec["segments"]) if s["kind"] == "observation" for x in (starts[i], starts[i + 1])]
        assert d["mask"] == obs and all(text[a:b].strip().startswith("<observation>") for a, b in zip(obs[::2], obs[1::2], strict=True))
        parts = d["parts"]
        assert parts[1] == 0 and parts[-4] == len(text)
        assert all(parts[i + 2] == parts[i + 7] for i in range(0, len(parts) - 6, 6))
        statuses[row["qid"]] = [c["status"] for c in d["calls"]]
        assert d["reward"]["acc"] == row["acc"] and d["ids_source"] == "sampled"
        # the token chunk holds exactly the record's ids
        c = next(c for c, (first, n) in enumerate(m["chunks"]) if first <= row["d"] < first + n)
        tok = blocks[f"afm-k{c}"]
        count = struct.unpack_from("<I", tok, 0)[0]
        off = 4 + 4 * count + struct.unpack_from("<I", tok, 4 + 4 * (row["d"] - m["chunks"][c][0]))[0]
        n = struct.unpack_from("<i", tok, off)[0]
        assert list(struct.unpack_from(f"<{n}i", tok, off + 4)) == [i for s in rec["segments"] for i in s["ids"]]
    assert statuses["demo-math-0"] == ["ok"] and statuses["demo-math-3"] == ["error"]
    assert statuses["demo-math-4"] == ["invalid"]
    vocab = json.loads(blocks[f"afm-v{m['sources'][src]['vocab']}"])
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(m["sources"][src]["tokenizer"])
    for token_id, piece in list(zip(vocab["ids"], vocab["pieces"], strict=True))[:50]:
        expected = tok.decode([token_id])
        assert piece == expected or "\ufffd" in expected


def test_a_run_without_trajectories_has_table_and_scores(page):
    m = manifest_of(page)
    blocks = read_page(page)
    src = next(i for i, s in enumerate(m["sources"]) if s["label"] == "notraj")
    rows = [r for r in rows_of(m) if r["src"] == src]
    assert len(rows) == 5 and {r["qid"] for r in rows if r["acc"] == 1} == RIGHT["rl"]
    assert all(detail_of(blocks, m, r["d"])["text"] is None for r in rows)
    assert any(b["title"].startswith("Accuracy") for b in m["sources"][src]["overview"])


def test_infer_output_and_sft_set(page, inputs):
    m = manifest_of(page)
    blocks = read_page(page)
    rows = rows_of(m)
    infer = [r for r in rows if m["sources"][r["src"]]["kind"] == "infer"]
    assert sorted((r["qid"], r["k"]) for r in infer) == [("q0", 0), ("q0", 1), ("q1", 0), ("q1", 1)]
    assert all(r["acc"] is None and r["pred"] == "4" and r["calls"] == 1 and r["ts"] == 1 for r in infer)
    sft = [r for r in rows if m["sources"][r["src"]]["kind"] == "sft"]
    records = json.loads((inputs["sft_set"] / "afm_view_sft.json").read_text())
    assert len(sft) == len(records) == 2
    from afm.trajectory import observation_spans

    for r in sft:
        d = detail_of(blocks, m, r["d"])
        assert d["text"] == records[int(r["qid"])]["output"]
        assert d["mask"] == [x for span in observation_spans(d["text"]) for x in span] and len(d["mask"]) == 4
        assert d["chars"]["masked"] == sum(b - a for a, b in observation_spans(d["text"]))
    report = json.loads(inputs["mask_report"].read_text())["train"]  # afm-sft mask-report keys it by split
    shown = next(b for b in m["sources"][0]["overview"] if b["title"].startswith("Mask report"))
    values = dict(shown["table"]["rows"])
    assert values["tokens_masked"] == report["tokens_masked"] > 0 and values["samples_kept"] == 2


def test_verl_dumps_by_step_with_grpo_advantages(page, inputs):
    m = manifest_of(page)
    blocks = read_page(page)
    src = next(i for i, s in enumerate(m["sources"]) if s["kind"] == "rollouts")
    rows = [r for r in rows_of(m) if r["src"] == src]
    assert sorted({(r["step"], r["grp"]) for r in rows}) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    for (step, grp) in [(1, 0), (2, 1)]:
        group = sorted((r for r in rows if r["step"] == step and r["grp"] == grp), key=lambda r: r["k"])
        scores = [r["score"] for r in group]
        mean = sum(scores) / 4
        std = math.sqrt(sum((s - mean) ** 2 for s in scores) / 3)
        assert [r["adv"] for r in group] == pytest.approx([(s - mean) / (std + 1e-6) for s in scores], abs=1e-4)
        d = detail_of(blocks, m, group[0]["d"])
        assert d["advantage"]["computed"] and d["reward"] == {"score": group[0]["score"]}
        assert d["extra"]["uid"].endswith("_0_0") and group[0]["acc"] is None
        assert group[0]["q"] == "What is the population of Town 4821? Answer with the number." or grp == 1
    chart = next(b for b in m["sources"][src]["overview"] if "chart" in b)["chart"]
    assert chart["x"] == [1, 2] and chart["series"][0]["y"] == [pytest.approx(0.25), pytest.approx(0.75)]
    val = next(i for i, s in enumerate(m["sources"]) if s["kind"] == "validation")
    rows = [r for r in rows_of(m) if r["src"] == val]
    assert sorted((r["step"], r["acc"]) for r in rows) == [(0, 0), (0, 0), (2, 1), (2, 1)]
    assert all(r["adv"] is None and r["meth"] == "em" and r["bench"] == "world_lookup" for r in rows)
    d = detail_of(blocks, m, rows[0]["d"])
    assert d["reward"]["method"] == "em" and d["reward"]["format_ok"] == 1.0 and d["advantage"]["value"] is None


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_page_is_self_contained_and_hostile_text_is_never_markup(page):
    html = page.read_text(encoding="utf-8")
    parser = _Tags()
    parser.feed(html)
    scripts = [a for t, a in parser.tags if t == "script"]
    assert sum(1 for a in scripts if a.get("type") != "application/octet-stream") == 1  # ours, inline
    assert not any("src" in a for a in scripts)
    for tag, attrs in parser.tags:
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        for key in ("src", "href", "action"):
            assert not str(attrs.get(key, "")).lower().startswith(("http:", "https:", "//", "javascript:")), attrs
    assert {t for t, _ in parser.tags} <= {"html", "head", "meta", "title", "link", "style", "body", "noscript", "div",
                                           "header", "h1", "h2", "h3", "p", "nav", "span", "main", "section", "script",
                                           "table", "tr", "th", "td"}
    csp = next(a["content"] for t, a in parser.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert csp.startswith("default-src 'none'; script-src 'sha256-") and "connect-src" not in csp
    assert "<script>window.__afmPwned" not in html and "&lt;script&gt;window.__afmPwned = 1" in html  # the noscript


def test_odd_unicode_offsets_are_utf16():
    text = "🙂 <think>a</think><code>x</code>"
    parts = coa_parts(text)
    assert parts[:3] == [-1, 0, 3] and utf16_index(text)(2) == 3  # the emoji is two UTF-16 units
    assert HOSTILE.count("🙂") == 1


def test_resumed_runs_count_each_key_once(inputs, tmp_path):
    """A duplicate line is skipped; a failed sample is replaced by its retry (as afm eval report reads them)."""
    run = tmp_path / "run"
    run.mkdir()
    lines = (inputs["rl"] / "results.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    failed = dict(json.loads(lines[1]), status="failed", failure="tool: search server down", acc=0.0)
    retried = json.loads(lines[1])
    (run / "results.jsonl").write_text("\n".join([lines[0], json.dumps(failed), *lines[2:], json.dumps(first),
                                                  json.dumps(retried)]) + "\n")
    (run / "config.json").write_text((inputs["rl"] / "config.json").read_text())
    info = write_view([run], tmp_path / "v.html")
    rows = rows_of(manifest_of(tmp_path / "v.html"))
    assert info.samples == {"run": 10} and len(rows) == 10
    assert all(r["st"] == "ok" for r in rows) and sum(r["acc"] for r in rows) == 6


def test_a_folder_is_searched_and_bad_paths_are_one_line_errors(inputs, tmp_path):
    base = inputs["sft_set"].parent
    out = tmp_path / "all.html"
    proc = subprocess.run([sys.executable, "-m", "afm.cli", "view", str(base), "--out", str(out)], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"view: {out}" in proc.stdout
    labels = [s["label"] for s in manifest_of(out)["sources"]]
    assert {"sft", "rl", "notraj", "hostile", "infer", "afm_view_sft", "rl/rollouts", "rl/validation"} <= set(labels)
    for bad, why in ((tmp_path / "nothing-here", "no such file or folder"), (inputs["sft_set"] / "dataset_info.json", "not an")):
        proc = subprocess.run([sys.executable, "-m", "afm.cli", "view", str(bad), "--out", str(tmp_path / "x.html")],
                              capture_output=True, text=True, cwd=REPO, timeout=120)
        assert proc.returncode == 2 and why in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert not (tmp_path / "x.html").exists()


def test_eval_report_writes_and_links_the_viewer(inputs, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("results.jsonl", "config.json"):
        (run / name).write_text((inputs["sft"] / name).read_text())
    proc = subprocess.run([sys.executable, "-m", "afm.cli", "eval", "report", str(run)], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (run / "view.html").is_file() and "](view.html)" in (run / "report.md").read_text()
    assert manifest_of(run / "view.html")["rows"]["n"] == 10


def test_the_quickstart_writes_its_viewer_and_a_broken_input_only_warns(inputs, tmp_path, capsys):
    """afm.quickstart.run.write_viewer on a quickstart's layout (real runs under the quickstart's names)."""
    import shutil

    from afm.quickstart.run import write_viewer

    work = tmp_path / "qs"
    for src, dst in ((inputs["notraj"], "eval/untrained"), (inputs["sft"], "eval/sft"), (inputs["rl"], "eval/rl"),
                     (inputs["sft_set"], "distill/sft_data"), (inputs["rollouts"], "rl/rollouts"),
                     (inputs["infer"], "rl_data/samples.jsonl"), (inputs["mask_report"], "mask_report.json"),
                     (inputs["validation"], "rl/checkpoints/validation")):
        (work / dst).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, work / dst)
    runs = {k: work / "eval" / k for k in ("untrained", "sft", "rl")}
    page = write_viewer(work, runs)
    m = manifest_of(page)
    assert page == work / "view.html" and m["compare"] == ["sft", "rl"] and m["title"] == "afm quickstart"
    assert [s["label"] for s in m["sources"]] == ["afm_view_sft", "untrained", "sft", "rl", "samples", "rl/rollouts",
                                                  "checkpoints/validation"]
    (work / "distill" / "sft_data" / "afm_view_sft.json").write_text("[{broken")
    assert write_viewer(work, runs) is None
    assert "warning: the trajectory viewer was not written" in capsys.readouterr().out
