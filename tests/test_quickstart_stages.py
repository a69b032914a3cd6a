"""The quickstart's stage summary (accuracy per stage and family with CIs, costs, paired differences, plot) and the
pure parts of its RL stage (verl tools yaml from the demo servers' tools, verl console metrics, checkpoints)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from afm.quickstart.rl import VERL_TOOLS, latest_hf_checkpoint, parse_steps, verl_tools_yaml
from afm.quickstart.summary import stage_summary, write_report


def _rec(family: str, qid: str, acc: float, tool_calls: int, tokens: int) -> dict:
    return {"key": f"{family}/{qid}#0", "benchmark": family, "qid": qid, "sample": 0, "question": qid,
            "gold": "g", "level": None, "data_source": family, "score": acc, "acc": acc, "method": "em",
            "pred": "p", "finish_reason": "answer", "tool_calls": tool_calls, "tool_counts": {},
            "model_tokens": tokens, "observation_tokens": 10, "turns": 2, "wall_s": 1.0, "error": None}


def _run(path: Path, solved: dict[str, int], n: int = 10) -> Path:
    """One eval run: per family, the first ``solved[family]`` of ``n`` questions right."""
    path.mkdir(parents=True)
    recs = [_rec(fam, f"q{i}", float(i < k), tool_calls=1 + (i < k), tokens=100 + i)
            for fam, k in solved.items() for i in range(n)]
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (path / "config.json").write_text(json.dumps({"model": "m", "benchmarks": sorted(solved)}))
    return path


def test_stage_summary_values_and_report(tmp_path):
    runs = {"untrained": _run(tmp_path / "u", {"code": 0, "lookup": 0}),
            "sft": _run(tmp_path / "s", {"code": 8, "lookup": 5}),
            "rl": _run(tmp_path / "r", {"code": 9, "lookup": 10})}
    s = stage_summary(runs, compare=[("rl", "sft"), ("sft", "untrained")])
    assert list(s["stages"]) == ["untrained", "sft", "rl"]
    assert s["stages"]["sft"] == {"code": 0.8, "lookup": 0.5, "macro": pytest.approx(0.65)}
    assert s["stages"]["rl"]["macro"] == pytest.approx(0.95)
    assert s["questions"] == {"code": 10, "lookup": 10}
    lo, hi = s["ci"]["sft"]["lookup"]
    assert 0.1 <= lo < 0.5 < hi <= 0.9
    assert s["ci"]["untrained"]["code"] == [0.0, 0.0]
    # solved samples make 2 calls, failed ones 1; tokens per solved task = model + observation tokens
    assert s["tool_calls"]["sft"]["code"] == pytest.approx(1.8)
    assert s["tokens_per_solved"]["sft"]["code"] == pytest.approx(10 + sum(100 + i for i in range(8)) / 8)
    assert s["tokens_per_solved"]["untrained"]["code"] is None
    lookup = s["comparisons"]["rl_vs_sft"]["lookup"]
    assert lookup["diff"] == pytest.approx(0.5) and lookup["excludes_zero"] and lookup["ci"][0] > 0
    code = s["comparisons"]["rl_vs_sft"]["code"]
    assert code["diff"] == pytest.approx(0.1) and not code["excludes_zero"]
    summary_path, report = write_report(s, tmp_path / "out", notes=["a note"])
    assert json.loads(summary_path.read_text())["stages"]["rl"]["lookup"] == 1.0
    text = report.read_text()
    assert "| sft | 80% [" in text and "| lookup | +50 pt |" in text and "- a note" in text
    png = (tmp_path / "out" / "summary.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_report_says_what_each_stage_added_and_plots_the_dapo_reward(tmp_path):
    """report.md names the family RL was meant to fix, why, and RL - SFT there and on the others; summary.png gets a
    fourth panel, the DAPO reward per step, next to the bars; summary.json keeps its keys and adds the curve."""
    import struct

    runs = {"untrained": _run(tmp_path / "u", {"arith": 0, "lookup": 0}),
            "sft": _run(tmp_path / "s", {"arith": 10, "lookup": 5}),
            "rl": _run(tmp_path / "r", {"arith": 10, "lookup": 10})}
    s = stage_summary(runs, compare=[("sft", "untrained"), ("rl", "sft")])
    without = tmp_path / "without"
    write_report(dict(s), without)
    s["rl_target"] = {"family": "lookup", "why": "the teacher answers from the snippet"}
    s["rl_reward"] = [[1, 0.25], [2, 0.5], [3, 0.75]]
    summary_path, report = write_report(s, tmp_path / "out")
    text = report.read_text()
    assert "## What each stage added" in text
    assert "**RL was meant to fix `lookup`**: the teacher answers from the snippet." in text
    assert "**RL** (DAPO) on `lookup`: 50% → 100%, +50 pt [" in text and "(resolved)" in text
    assert "`arith` +0 pt" in text and "stopped early" not in text
    s["rl_stopped"] = "DAPO stopped after step 2 of 4: the group filter dropped 16 groups in step 3"
    _, stopped = write_report(s, tmp_path / "stopped")
    assert "- **DAPO stopped early**: DAPO stopped after step 2 of 4" in stopped.read_text()
    saved = json.loads(summary_path.read_text())
    assert {"stages", "ci", "comparisons", "tool_calls", "tokens_per_solved"} <= set(saved)
    assert saved["rl_reward"] == [[1, 0.25], [2, 0.5], [3, 0.75]]

    def width(png):
        return struct.unpack(">I", png.read_bytes()[16:20])[0]

    assert width(tmp_path / "out" / "summary.png") > 1.25 * width(without / "summary.png")


def test_verl_tools_yaml_takes_the_demo_servers_settings():
    afm_tools = {"tools": [{"name": "web_search", "config": {"url": "http://127.0.0.1:5/search", "num_results": 3}},
                           {"name": "code", "config": {"timeout": 10, "mode": "pool"}}]}
    doc = verl_tools_yaml(afm_tools)
    names = [e["config"]["afm_tool"] for e in doc["tools"]]
    assert names == ["web_search", "code"]
    web = doc["tools"][0]
    assert web["config"]["url"] == "http://127.0.0.1:5/search" and web["config"]["num_results"] == 3
    base = {e["config"]["afm_tool"]: e for e in yaml.safe_load(VERL_TOOLS.read_text())["tools"]}
    assert web["tool_schema"] == base["web_search"]["tool_schema"]
    assert web["class_name"] == "afm.rl.tools.AfmVerlTool"
    with pytest.raises(ValueError, match="no entry for tool"):
        verl_tools_yaml({"tools": [{"name": "calculator"}]})


def test_agent_loops_yaml_caps_one_generation_and_keeps_the_rest():
    from afm.quickstart.rl import AGENT_LOOPS, agent_loops_yaml

    doc = agent_loops_yaml(160)
    base = yaml.safe_load(AGENT_LOOPS.read_text())
    assert base[0]["name"] == "afm_agent" and base[0]["max_tokens_per_turn"] is None
    assert doc[0]["max_tokens_per_turn"] == 160
    assert {k: v for k, v in doc[0].items() if k != "max_tokens_per_turn"} == \
        {k: v for k, v in base[0].items() if k != "max_tokens_per_turn"}


def test_parse_steps_reads_verl_console_metrics():
    log = ("(TaskRunner pid=1) step:1 - critic/score/mean:0.25 - actor/lr:0.0001 - note:text\n"
           "noise\n(TaskRunner pid=1) step:2 - critic/score/mean:0.5\n"
           "(TaskRunner pid=1) step:2 - critic/score/mean:0.75\n")
    steps = parse_steps(log)
    assert [s["step"] for s in steps] == [1.0, 2.0]
    assert steps[0] == {"step": 1.0, "critic/score/mean": 0.25, "actor/lr": 0.0001}
    assert steps[1]["critic/score/mean"] == 0.75  # a resumed run's repeated step: the last one counts


def test_latest_hf_checkpoint(tmp_path):
    for step in (2, 10):
        hf = tmp_path / f"global_step_{step}" / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
    (tmp_path / "global_step_12" / "actor").mkdir(parents=True)  # no HF copy (SAVE_HF_MODEL off): skipped
    assert latest_hf_checkpoint(tmp_path) == tmp_path / "global_step_10" / "actor" / "huggingface"
    with pytest.raises(FileNotFoundError, match="no Hugging Face checkpoint"):
        latest_hf_checkpoint(tmp_path / "global_step_12")


def test_family_names_lose_the_benchmark_prefix(tmp_path):
    from afm.quickstart.summary import rename_families

    runs = {"sft": _run(tmp_path / "s", {"world_arith": 8, "world_lookup": 5}),
            "rl": _run(tmp_path / "r", {"world_arith": 9, "world_lookup": 10})}
    s = rename_families(stage_summary(runs, compare=[("rl", "sft")]), "world_")
    assert s["stages"]["sft"] == {"arith": 0.8, "lookup": 0.5, "macro": pytest.approx(0.65)}
    assert set(s["ci"]["rl"]) == set(s["tool_calls"]["rl"]) == {"arith", "lookup", "macro"}
    assert s["questions"] == {"arith": 10, "lookup": 10}
    assert s["comparisons"]["rl_vs_sft"]["lookup"]["diff"] == pytest.approx(0.5)


def test_rl_questions_keep_the_families_asked_for(tmp_path):
    """The RL split a quickstart trains on when the world names a family RL is meant to fix (``RL_TARGET``): only
    that family's questions, every one of them; no families: the world's file itself; a typo: an error naming it."""
    from afm.quickstart.recipe import make_world, rl_questions

    _, root = make_world(tmp_path / "w", 0, {"train": 2, "rl": 3, "heldout": 2})
    whole = root / "world" / "rl.jsonl"
    assert rl_questions(root, tmp_path / "sel") == whole
    rows = [json.loads(line) for line in rl_questions(root, tmp_path / "sel", ["lookup"]).read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"rl-lookup-{i}" for i in range(3)]
    assert rows == [json.loads(line) for line in whole.read_text().splitlines() if '"family": "lookup"' in line]
    with pytest.raises(ValueError, match="lokup"):
        rl_questions(root, tmp_path / "sel", ["lokup"])


def test_each_world_takes_its_own_settings_unless_flags_give_them():
    """The default is the teacher-shortcut world with its settings; ``--no-teacher-shortcut`` is the plain world with
    the plain world's (6 -> 4 SFT epochs, 1e-3 -> 2e-3, DAPO 8 steps at 5e-5, 0.7 and Adam epsilon 1e-3 -> 4 at
    3e-5, 1.0 and torch's epsilon), every other setting of the profile it starts from; ``--full`` is the plain world
    at its own size, and ``--full --teacher-shortcut`` takes only the shortcut world's DAPO lr, temperature and
    epsilon; flags win."""
    from afm.quickstart.profile import (
        DEFAULT,
        FULL,
        FULL_OWN,
        PLAIN_SETTINGS,
        SHORTCUT_SETTINGS,
        profile_from_args,
    )

    assert profile_from_args() == DEFAULT and DEFAULT.teacher_shortcut and not FULL.teacher_shortcut
    assert {k: getattr(DEFAULT, k) for k in SHORTCUT_SETTINGS} == SHORTCUT_SETTINGS
    assert SHORTCUT_SETTINGS.keys() == PLAIN_SETTINGS.keys()
    assert all(SHORTCUT_SETTINGS[k] != v for k, v in PLAIN_SETTINGS.items())
    assert (DEFAULT.sft_epochs, DEFAULT.sft_lr, DEFAULT.rl_steps, DEFAULT.rl_lr, DEFAULT.rl_temperature) == (
        6.0, 1e-3, 8, 5e-5, 0.7)
    plain = profile_from_args(teacher_shortcut=False)
    assert plain == replace(DEFAULT, teacher_shortcut=False, **PLAIN_SETTINGS)
    assert (plain.sft_epochs, plain.sft_lr, plain.rl_steps, plain.rl_lr, plain.rl_temperature) == (4.0, 2e-3, 4, 3e-5, 1.0)
    assert (DEFAULT.rl_adam_eps, plain.rl_adam_eps) == (1e-3, 0.0)
    assert profile_from_args(teacher_shortcut=True) == DEFAULT
    assert profile_from_args(True) == FULL and (FULL.sft_epochs, FULL.rl_steps, FULL.rl_lr) == (3.0, 30, 3e-5)
    full_on = profile_from_args(True, teacher_shortcut=True)
    assert full_on == replace(FULL, teacher_shortcut=True, rl_lr=SHORTCUT_SETTINGS["rl_lr"],
                              rl_temperature=SHORTCUT_SETTINGS["rl_temperature"],
                              rl_adam_eps=SHORTCUT_SETTINGS["rl_adam_eps"])
    assert all(getattr(full_on, k) == getattr(FULL, k) for k in FULL_OWN)
    assert profile_from_args(teacher_shortcut=False, rl_lr=1e-4).rl_lr == 1e-4
    assert profile_from_args(teacher_shortcut=False, rl_temperature=0.7).rl_temperature == 0.7
    assert profile_from_args(teacher_shortcut=False, sft_epochs=6.0).sft_epochs == 6.0
    assert profile_from_args(teacher_shortcut=None, rl_steps=2) == replace(DEFAULT, rl_steps=2)


@pytest.mark.parametrize("delay", [0.0, 0.6])
def test_quickstart_stops_its_servers_on_sigterm(tmp_path, delay):
    """A SIGTERM to ``afm quickstart`` (kill, timeout, a scheduler) stops the demo servers it started. Each runs in a
    session of its own, so nothing else stops them: before, they kept their ports after the run was gone (found with
    six servers left from two killed quickstarts). ``delay`` after the servers are up: 0.6 s lands in the
    distillation (whose own handler catches the signal: it once made the run fail with "distill failed (exit 130)"),
    or, on a loaded machine, in a later stage; every stage must exit 143."""
    import os
    import re
    import signal
    import socket
    import subprocess
    import sys
    import time

    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "afm.cli", "quickstart", "--workdir", str(tmp_path / "qs"),
                             "--train-per-family", "2", "--heldout-per-family", "1", "--no-rl"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=repo,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"})
    ports: list[int] = []
    deadline = time.monotonic() + 300
    try:
        for line in proc.stdout:
            if line.startswith("servers up on 127.0.0.1:"):
                ports = [int(p) for p in re.findall(r":(\d+)", line)]
                break
            assert time.monotonic() < deadline, "no 'servers up' line"
        assert len(ports) == 4, ports
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    for port in ports:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_the_shortcut_probe_counts_which_page_each_selection_sample_read(tmp_path):
    """benchmarks/probe_shortcut.py's sample census (RESULTS.md 2026-11-27): the route is the first crawl's address,
    right means the last answer is the gold one."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("probe_shortcut", root / "benchmarks" / "probe_shortcut.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)

    def row(text: str, gold: str) -> str:
        return json.dumps({"gold": [gold], "segments": [{"kind": "model", "text": text}]})

    census = "<crawl_page> http://h:1/census-town-4821.html</crawl_page>"
    own = "<crawl_page> http://h:1/town-4821.html</crawl_page>"
    (tmp_path / "s.jsonl").write_text("\n".join([
        row(f"{census}<answer> 47102</answer>", "47102"), row(f"{census}<answer> 47102</answer>", "48213"),
        row(f"{own}<answer>1</answer><answer> 48213</answer>", "48213"), row("<answer>3</answer>", "48213")]) + "\n")
    assert probe.sample_routes(tmp_path / "s.jsonl") == {"census right": 1, "census wrong": 1, "no crawl wrong": 1,
                                                         "own right": 1}


def test_a_seed_serves_the_demo_site_on_its_own_port_unless_it_is_taken(tmp_path):
    """The site's address is in the SFT rows (every page URL): a seed's port makes two runs of it train on the same
    rows; a port something else holds falls back to a random one (None) instead of failing the run."""
    import socket

    from afm.quickstart.servers import SITE_PORT_BASE, SITE_PORT_SPAN, DemoServers, seed_site_port

    ports = {seed: seed_site_port(seed) for seed in range(4)}
    free = {s: p for s, p in ports.items() if p is not None}  # another run of the suite may hold one
    assert len(free) >= 3 and len(set(free.values())) == len(free), ports
    assert all(SITE_PORT_BASE <= p < SITE_PORT_BASE + SITE_PORT_SPAN for p in free.values())
    seed, port = next(iter(free.items()))
    assert seed_site_port(seed) == port  # the same seed, the same port
    with socket.socket() as holder:
        # as a server binds: an earlier run's connections in TIME_WAIT (a quickstart test of this suite) do not hold it
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", port))
        holder.listen()
        assert seed_site_port(seed) is None
    servers = DemoServers(tmp_path / "servers", site_port=port)  # not started: its settings only
    assert servers.site == f"http://127.0.0.1:{port}"  # the URLs the teacher's pages carry



def test_the_masking_report_is_the_sft_runs_own(tmp_path):
    """The quickstart shows and saves the masking report of SFT's own preprocessing (no second tokenization):
    its totals in afm-sft mask-report --json's form, its text as the run printed it."""
    from afm.quickstart.run import masking_report

    totals = {"samples_seen": 3, "samples_kept": 3, "tokens_total": 90, "tokens_masked": 20, "drops": {}}
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "afm_mask_report_train.json").write_text(json.dumps(totals))
    block = ["[afm] observation masking (train, tag <observation>)", "  samples   seen 3  kept 3  dropped 0",
             "  observations 2  boundary tokens masked with model text 0"]
    (tmp_path / "sft.log").write_text("\n".join(["[INFO] loading", *block, "[INFO|hub.py] offline"]) + "\n")
    text = masking_report(tmp_path / "sft", tmp_path / "sft.log", tmp_path / "mask_report.json")
    assert text == "\n".join(block)
    assert json.loads((tmp_path / "mask_report.json").read_text()) == {"train": totals}
    (tmp_path / "sft.log").write_text("no report printed\n")  # a log without it: the totals, still one line
    assert masking_report(tmp_path / "sft", tmp_path / "sft.log", tmp_path / "m.json").startswith(
        "[afm] observation masking: {")


def test_a_background_dapo_job_is_stopped_with_everything_it_started(tmp_path):
    """The quickstart evaluates the SFT policy while DAPO trains (afm.quickstart.rl.DapoJob): a quickstart that stops
    on the way (an error in the evaluation, SIGTERM) ends the launch's whole process group, and a run that exited
    non-zero raises with its log's tail."""
    import os
    import subprocess
    import time

    from afm.common.ray_scope import private_ray_tmpdir
    from afm.quickstart.rl import DapoJob

    def job(script: str) -> DapoJob:
        log = tmp_path / "dapo.log"
        out = log.open("w")
        proc = subprocess.Popen(["bash", "-c", script], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        return DapoJob(proc, log, tmp_path, private_ray_tmpdir(), out)

    running = job("sleep 300 & echo child $!; wait")
    deadline = time.monotonic() + 30
    while "child" not in (tmp_path / "dapo.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int((tmp_path / "dapo.log").read_text().split()[1])
    running.stop(grace_s=5)
    assert running.proc.returncode is not None and not running.ray_tmp.exists()
    for _ in range(100):  # the grandchild got the group's SIGTERM (reaped by init)
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the launch's child {child} survived stop()")
    running.stop()  # twice is harmless
    failed = job("echo Traceback; echo 'ValueError: bad config'; exit 3")
    with pytest.raises(RuntimeError, match="exit 3") as err:
        failed.wait()
    assert "bad config" in str(err.value) and not failed.ray_tmp.exists()
    assert os.path.exists(tmp_path / "dapo.log")


def test_the_last_steps_policy_is_found_before_the_dapo_run_exits(tmp_path):
    """DapoJob.final_policy: the quickstart evaluates the last step's checkpoint while verl and Ray shut down. It
    returns once verl's marker names that step (the Hugging Face weights are written before it), and None for a run
    that ended without it (a stopped run: its own newest checkpoint is evaluated after wait())."""
    import subprocess

    from afm.common.ray_scope import private_ray_tmpdir
    from afm.quickstart.rl import DapoJob

    ckpt = tmp_path / "checkpoints"
    # a launch that checkpoints step 1, then step 2 (weights, then the marker), then stays up a while (its shutdown)
    script = (f"mkdir -p {ckpt}/global_step_1/actor/huggingface {ckpt}/global_step_2/actor/huggingface; "
              f"echo '{{}}' > {ckpt}/global_step_1/actor/huggingface/config.json; echo 1 > {ckpt}/latest_checkpointed_iteration.txt; "
              f"sleep 0.5; echo '{{}}' > {ckpt}/global_step_2/actor/huggingface/config.json; "
              f"echo 2 > {ckpt}/latest_checkpointed_iteration.txt; sleep 300")
    log = tmp_path / "dapo.log"
    out = log.open("w")
    proc = subprocess.Popen(["bash", "-c", script], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    job = DapoJob(proc, log, tmp_path, private_ray_tmpdir(), out)
    try:
        assert job.final_policy(2, poll_s=0.05) == ckpt / "global_step_2" / "actor" / "huggingface"
        assert proc.poll() is None  # found while the run still shuts down
    finally:
        job.stop(grace_s=5)
    out = log.open("w")
    ended = DapoJob(subprocess.Popen(["bash", "-c", "exit 0"], stdout=out, start_new_session=True), log, tmp_path,
                    private_ray_tmpdir(), out)
    assert ended.final_policy(3, poll_s=0.05) is None  # the marker says 2: the run ended before step 3's checkpoint
    ended.stop()
