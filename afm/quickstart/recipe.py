"""The recipe in miniature on the demo world: distill -> filter -> convert -> masked SFT -> eval (-> RL: the
quickstart adds select -> DAPO -> eval, see :mod:`afm.quickstart.run`; the settings: :mod:`afm.quickstart.profile`).

Every stage is the production tool, run on local parts: the multi-agent teacher of ``afm data distill`` against the
rule-based teacher model (:mod:`afm.quickstart.teacher`) with the real search, crawl and wiki servers and the code
sandbox (:class:`afm.quickstart.servers.DemoServers`); ``afm data filter`` and ``afm data convert``; ``afm-sft train``
(LLaMA-Factory, observation masking); ``afm eval run`` with the hf backend and the same tools.

    python -m afm.quickstart.recipe runs/recipe          # world -> distill -> SFT -> eval, per-family accuracy
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from afm.common.exit_signals import stop_if_interrupted
from afm.eval.datasets import WORLD_PROMPT as PROMPT_KEY
from afm.eval.datasets import WORLD_SAMPLING
from afm.model.tiny import ModelSize
from afm.quickstart.profile import (
    DEFAULT,
    EVAL_BATCH,
    RL_KNOBS,
    TEACHER_MISS_RATE,
    TEACHER_MISTAKE_RATE,
    SftSchedule,
)
from afm.quickstart.world import FAMILIES, PROMPT, SHORTCUT_RATE, World, build_world

SFT_DATASET = "afm_world_sft"
TEACHER_CONFIG = {
    "default": {"base_url": "${TEACHER_BASE_URL:-http://127.0.0.1:8000/v1}", "model": "afm-demo-teacher",
                "api_key_env": "TEACHER_API_KEY", "timeout_s": 30, "max_retries": 1},
    "budgets": {"max_steps": 40, "max_tool_calls": 6, "max_replans": 2, "max_answer_attempts": 2,
                "run_timeout_s": 120},
    "controller": {"prompt_key": "afm.quickstart.world:PROMPT", "reflect_every": 2, "accept_score": 3,
                   "tool_timeout_s": 30, "answer_think": "Score {score}: answer.",
                   "space_after_tag": True},
}


def world_tools(servers: Any) -> dict[str, Any]:
    """The tools config for the world: the demo servers' clients, one wiki passage and one search result per query.

    One, not two: with a second (unrelated) passage in the observation, the student must pick which ``Town N`` to
    copy into its next call, and the 2-layer student copied the wrong one. In the teacher-shortcut world, two search
    results: the town's census page and its own page (both of the same town, so the copy stays one town's)."""
    cfg = servers.tools_config()
    for tool in cfg["tools"]:
        if tool["name"] == "wiki_search":
            tool["config"]["topk"] = 1
        if tool["name"] == "web_search":
            tool["config"]["num_results"] = servers.world.search_results() if servers.world is not None else 1
    return cfg


def make_world(work: str | Path, seed: int = 0, per_family: dict[str, int] | None = None, *,
               shortcut: bool = False) -> tuple[World, Path]:
    """Build the world (``shortcut``: the teacher-shortcut world, :mod:`afm.quickstart.world`) and write its question
    files under ``work/eval_data/world`` (the eval data root)."""
    world = build_world(seed, per_family, shortcut=shortcut)
    root = Path(work) / "eval_data"
    world.write(root / "world")
    return world, root


def train_questions(world_root: Path, counts: dict[str, int], out: Path) -> Path:
    """The train split's first ``counts[family]`` questions of each family, in the split's order, written to ``out``
    (the distillation's input when a family gets more train questions than the others)."""
    rows, seen = [], dict.fromkeys(counts, 0)
    for line in (world_root / "world" / "train.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        fam = json.loads(line)["family"]
        if seen.get(fam, 0) < counts.get(fam, 0):
            seen[fam] += 1
            rows.append(line)
    short = {f: f"{seen[f]} < {n}" for f, n in counts.items() if seen[f] < n}
    if short:
        raise ValueError(f"the world's train split has too few questions: {short}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(r + "\n" for r in rows))
    return out


def distill_sft_data(world_root: Path, servers: Any, work: str | Path, *, seed: int = 0,
                     mistake_rate: float = TEACHER_MISTAKE_RATE, miss_rate: float = TEACHER_MISS_RATE,
                     shortcut_rate: float = 0.0, questions: Path | None = None,
                     concurrency: int = 4, shards: int | None = None) -> dict[str, Any]:
    """Teacher runs on the train split (or ``questions``, e.g. :func:`train_questions`) -> filtered runs ->
    LLaMA-Factory dataset ``afm_world_sft`` in ``work/sft_data`` (``shortcut_rate``: the teacher's lookup shortcut,
    :mod:`afm.quickstart.world`). Returns the paths and the filter report.

    ``afm data distill`` runs in its own process, as a user runs it, and the rule-based teacher in a thread of
    this one: in one process the client's event loop and the teacher's handler threads took turns on one
    interpreter lock, and the client is the stage's bottleneck (2000 questions: 39 s in-process, 26 s as its own
    process). ``concurrency`` 4: each call answers in ~1 ms, so more questions at once only add work to the
    client's connection pool (16: 39 s, 32: 53 s; benchmarks/RESULTS.md, twenty-third session). ``shards``
    (default :func:`distill_shards`): that many ``afm data distill --shard K/N`` processes side by side, each
    with its own run log, joined into ``runs.jsonl``; the teacher draws every choice from a hash of the question,
    so the runs are the same whatever the split."""
    from afm.data.convert import main as convert
    from afm.data.filters import main as filter_runs
    from afm.quickstart.teacher import TeacherModel

    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "teacher.yaml").write_text(yaml.safe_dump(TEACHER_CONFIG, sort_keys=False))
    (work / "tools.yaml").write_text(yaml.safe_dump(world_tools(servers)))
    runs, kept = work / "runs.jsonl", work / "kept.jsonl"
    questions = questions or world_root / "world" / "train.jsonl"
    shards = max(1, shards if shards is not None else distill_shards())
    outputs = [runs] if shards == 1 else [work / f"runs.{k}.jsonl" for k in range(shards)]
    with TeacherModel(seed=seed, mistake_rate=mistake_rate, miss_rate=miss_rate,
                      shortcut_rate=shortcut_rate) as teacher:
        # the teacher config reads its endpoint from TEACHER_BASE_URL (TEACHER_CONFIG)
        procs = [subprocess.Popen([sys.executable, "-m", "afm.data.distill", "--input", str(questions), "--output",
                                   str(out), "--config", str(work / "teacher.yaml"), "--tools-config",
                                   str(work / "tools.yaml"), "--concurrency", str(concurrency), "--no-progress",
                                   *(["--shard", f"{k}/{shards}"] if shards > 1 else [])],
                                  env={**os.environ, "TEACHER_BASE_URL": teacher.base_url})
                 for k, out in enumerate(outputs)]
        try:
            codes = [proc.wait() for proc in procs]
        finally:  # an interrupted quickstart (or one failed shard's exception) leaves no shard running
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait()
    for rc in codes:
        stop_if_interrupted(rc)
    if any(codes):
        raise RuntimeError(f"afm data distill failed (exit {max(codes)}; the shards' exits {codes})")
    if shards > 1:  # the shards' run logs as one (the kept set is put in question order below)
        runs.write_text("".join(out.read_text() for out in outputs))
    rc = filter_runs(["--input", str(runs), "--output", str(kept), "--min-tool-calls", "1",
                      "--qa-scorer", "data-source", "--upsample-corrected", "2", "--quiet"])
    if rc != 0:
        raise RuntimeError(f"afm data filter failed (exit {rc})")
    _in_question_order(kept, questions)
    data = work / "sft_data"
    rc = convert(["--input", str(kept), "--output-dir", str(data), "--name", SFT_DATASET, "--no-copy-log"])
    if rc != 0:
        raise RuntimeError(f"afm data convert failed (exit {rc})")
    report = json.loads(kept.with_suffix(".report.json").read_text())
    return {"runs": runs, "kept": kept, "data": data, "filter_report": report}


def distill_shards(cpus: int | None = None) -> int:
    """The distillation's client processes: one a core, at most 2. One client keeps ~0.8 of a core busy and the
    servers and teacher ~0.5 more; a second fills the other core (benchmarks/RESULTS.md, twenty-ninth session)."""
    from afm.common.cpu_features import usable_cores

    return max(1, min(2, cpus if cpus is not None else usable_cores()))


def _in_question_order(kept: Path, questions: Path) -> None:
    """Rewrite ``kept`` in the order of the question file: the teacher runs 16 questions at once, so the runs
    arrive in a different order on every run, and with them the SFT set, the student's batches and which copy
    skill it picks up first (benchmarks/RESULTS.md). Sorted, a seed gives one SFT run."""
    rank = {json.loads(line)["id"]: i for i, line in enumerate(questions.read_text().splitlines()) if line.strip()}
    lines = [line for line in kept.read_text().splitlines() if line.strip()]
    lines.sort(key=lambda line: rank.get(json.loads(line).get("question_id"), len(rank)))
    kept.write_text("".join(line + "\n" for line in lines))


def tokenizer_texts(data_dir: Path) -> list[str]:
    """Text the student's tokenizer is trained on: the SFT set's prompts and trajectories. (Not the chat format's
    frame, though every row carries it: with it the set was 10% fewer tokens, SFT no faster, and seed 2's policy a
    lookup copier DAPO could not move; RESULTS.md, twenty-third session.)"""
    rows = json.loads((data_dir / f"{SFT_DATASET}.json").read_text())
    texts = [PROMPT.text]
    for r in rows:
        texts += [str(r.get("instruction", "")), str(r.get("input", "")), str(r.get("output", ""))]
    return texts


def build_student(out: Path, data_dir: Path, size: ModelSize, seed: int = 0) -> Path:
    """The untrained student (random weights, ``size``: a profile's ``student_size()``) with a Qwen2-style tokenizer
    trained on the SFT set."""
    from afm.model.tiny import build_tiny_model

    if (out / "config.json").exists():
        return out
    return build_tiny_model(out, tokenizer_texts(data_dir), size, seed=seed)


def build_or_find(out: Path, data_dir: Path, student: str, size: ModelSize, seed: int = 0) -> Path:
    """The untrained student: the pretrained model's folder (``student``, :mod:`afm.quickstart.student`), else the
    tiny Qwen2 of ``size`` built in ``out`` with a tokenizer trained on the SFT set in ``data_dir``."""
    if student:
        from afm.quickstart.student import pretrained_dir

        return pretrained_dir(student)
    return build_student(out, data_dir, size, seed=seed)


def sft_config(model: Path, data_dir: Path, out: Path, schedule: SftSchedule, seed: int = 0,
               template: str = "qwen") -> dict[str, Any]:
    """The LLaMA-Factory yaml of the masked SFT run (``template``: LLaMA-Factory's chat template of ``model``,
    :func:`afm.quickstart.student.lf_template`)."""
    tuning: dict[str, Any] = {"finetuning_type": schedule.finetuning_type}
    if schedule.finetuning_type == "freeze":  # every decoder layer; the embedding and final norm stay as they are
        from afm.quickstart.student import num_layers

        tuning.update({"freeze_trainable_layers": num_layers(model), "freeze_trainable_modules": "all"})
    return {
        "model_name_or_path": str(model), "stage": "sft", "do_train": True, **tuning,
        "dataset": SFT_DATASET, "dataset_dir": str(data_dir), "template": template,
        "cutoff_len": schedule.cutoff_len,
        "per_device_train_batch_size": schedule.batch_size // (schedule.micro_batches * schedule.ranks),
        "gradient_accumulation_steps": schedule.micro_batches,
        "sort_micro_batches": schedule.micro_batches * schedule.ranks > 1,
        # several ranks on this machine's CPUs: gloo (see train_sft)
        **({"ddp_backend": "gloo"} if schedule.ranks > 1 else {}),
        # the head and the loss only where the next token is trained (about half the positions: the prompt and the
        # observations are masked): the same loss, a shorter step (afm.sft.trained_logits)
        "trained_logits_only": True,
        # the system turn and the instruction every row starts with (94 of a row's ~405 tokens) run once per
        # micro-batch, their cache shared by its rows: the same loss, 1.10x a step (afm.sft.shared_prefix)
        "share_prefix": True,
        "attention_chunks": schedule.attention_chunks,
        "learning_rate": schedule.learning_rate, "lr_scheduler_type": "cosine",
        "warmup_ratio": 0.05, "num_train_epochs": schedule.epochs, "logging_steps": 5, "save_strategy": "no",
        "report_to": "none", "plot_loss": True, "overwrite_cache": True, "preprocessing_num_workers": 1,
        "output_dir": str(out), "overwrite_output_dir": True, "ignore_observation": True,
        "ignore_observation_token": "observation", "seed": seed, "fp16": False, **_precision(schedule.precision),
        # LLaMA-Factory checkpoints activations unless told not to, for memory this student does not need; off, the
        # losses are the same step by step and the step time the same within noise (1.01x, bench_quickstart_sft.py,
        # RESULTS.md 2026-11-27 ninth session)
        "disable_gradient_checkpointing": True,
    }


def _precision(precision: str) -> dict[str, Any]:
    """The LLaMA-Factory settings of an :attr:`SftSchedule.precision`."""
    if precision == "cpu_bf16":
        # bf16 autocast over float32 weights on the CPU; the attention kernel stays float32, where PyTorch's CPU flash
        # attention is faster than its bf16 one for narrow heads (afm.sft.float32_attention)
        return {"bf16": True, "use_cpu": True, "attention_fp32": True}
    return {"bf16": False}


def train_sft(model: Path, data_dir: Path, out: Path, schedule: SftSchedule, seed: int = 0,
              template: str = "qwen") -> Path:
    """Masked SFT through ``afm-sft train`` (a real LLaMA-Factory run); returns ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    cfg = out.parent / f"{out.name}.yaml"
    cfg.write_text(yaml.safe_dump(sft_config(model, data_dir, out, schedule, seed, template)))
    log = out.parent / f"{out.name}.log"
    env = dict(os.environ)
    if schedule.ranks > 1:  # torchrun on this machine, one thread a rank (afm-sft starts it: afm.sft.torchrun)
        env.update(FORCE_TORCHRUN="1", NNODES="1", NODE_RANK="0", NPROC_PER_NODE=str(schedule.ranks),
                   OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", MASTER_ADDR="127.0.0.1")
        for key in ("MASTER_PORT", "RDZV_ID"):  # a free port, static rendezvous: this machine only
            env.pop(key, None)
        # torchrun is started by name (LLaMA-Factory's way): this interpreter's, also from an unactivated venv
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with log.open("w") as f:
        proc = subprocess.run([sys.executable, "-m", "afm.sft.cli", "train", str(cfg)], stdout=f,
                              stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"afm-sft train failed (exit {proc.returncode}); log {log}:\n{tail}")
    return out


def hf_backend(model: Path) -> list[str]:
    """The backend arguments of ``afm eval run`` / ``afm infer`` for ``model`` in the quickstart's process."""
    return ["--backend", "hf", "--model", str(model), "--concurrency", str(EVAL_BATCH), "--batch-size",
            str(EVAL_BATCH)]


def evaluate(model: Path, data_root: Path, servers: Any, run_dir: Path, *, families: tuple[str, ...] = FAMILIES,
             limit: int | None = None, files: dict[str, Path] | None = None, n: int | None = None,
             temperature: float | None = None, backend: Sequence[str] | None = None) -> dict[str, float]:
    """``afm eval run`` of ``model`` on the world's held-out questions (or ``files``); per-family accuracy.
    ``backend``: the engine's arguments (:func:`afm.quickstart.engine.serving`; default :func:`hf_backend`)."""
    from afm.eval.run import main as eval_main

    run_dir.mkdir(parents=True, exist_ok=True)
    tools_yaml = run_dir.parent / f"{run_dir.name}_tools.yaml"
    tools_yaml.write_text(yaml.safe_dump(world_tools(servers)))
    args = ["--benchmarks", ",".join(f"world_{f}" for f in families), "--run-dir", str(run_dir),
            "--data-root", str(data_root), *(backend or hf_backend(model)), "--tools-config",
            str(tools_yaml), "--seed", "0", "--quiet", "--force",
            "--keep-trajectories"]  # for the trajectory viewer (view.html); a few hundred short trajectories
    for fam, path in (files or {}).items():
        args += ["--file", f"world_{fam}={path}"]
    if limit:
        args += ["--limit", str(limit)]
    if n:
        args += ["--n", str(n)]
    if temperature is not None:
        args += ["--temperature", str(temperature)]
    code = eval_main(args)
    stop_if_interrupted(code)
    if code not in (0, None):
        raise RuntimeError(f"afm eval run failed (exit {code})")
    return accuracy(run_dir)


def rl_questions(world_root: Path, work: Path, families: Sequence[str] | None = None) -> Path:
    """The world's ``rl`` split, or a copy in ``work`` that keeps only ``families`` (an unknown name is an error)."""
    questions = world_root / "world" / "rl.jsonl"
    if not families:
        return questions
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown famil{'y' if len(unknown) == 1 else 'ies'} {unknown}: the world has {FAMILIES}")
    rows = [line for line in questions.read_text().splitlines() if json.loads(line)["family"] in families]
    out = Path(work) / f"rl_{'_'.join(families)}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(row + "\n" for row in rows))
    return out


def selection_sampling(temperature: float) -> list[str]:
    """``afm infer``'s sampling flags for the RL selection: the whole distribution at ``temperature``, as DAPO's
    rollouts sample it (verl: ``TOP_P``'s 1.0, no top-k), not afm infer's defaults (top_p 0.9, top_k 20). With the
    SFT'd Gemma's p(census page) at 0.86-0.91, top_p 0.9 cut the town's own page and 31 of 31 samples read the
    census page: the selection saw a policy DAPO would not train (RESULTS.md, 2026-11-29 fifteenth session)."""
    from afm.launch.rl import default as rl_default

    return ["--temperature", str(temperature), "--top-p", rl_default("TOP_P"), "--top-k", "-1"]


def select_rl_data(model: Path, world_root: Path, servers: Any, work: Path, *, n: int,
                   temperature: float, limit: int | None = None, seed: int = 0,
                   max_questions: int | None = None, families: Sequence[str] | None = None,
                   backend: Sequence[str] | None = None) -> dict[str, Any]:
    """The paper's RL selection on the world's ``rl`` split: ``afm infer`` samples ``n`` trajectories per question
    from ``model`` (the SFT policy) with the real tools, then ``afm data select --mode code`` drops the questions it
    solved every time (nothing left to learn) and writes verl's parquet. ``families`` limits the split to those
    families (the RL data a user picks where the distilled agent falls short). Returns the parquet (``None`` when
    no question is kept) and the report."""
    from afm.agent.infer import main as infer
    from afm.data.difficulty import main as select

    work.mkdir(parents=True, exist_ok=True)
    tools_yaml = work / "tools.yaml"
    tools_yaml.write_text(yaml.safe_dump(world_tools(servers)))
    questions = rl_questions(world_root, work, families)
    samples, parquet = work / "samples.jsonl", work / "rl.parquet"
    sampling = WORLD_SAMPLING
    args = ["--input", str(questions), "--output", str(samples), "--id-key", "id", "--answer-key", "answer",
            "--prompt", PROMPT_KEY, *(backend or hf_backend(model)), "--tools-config", str(tools_yaml),
            "--n", str(n), *selection_sampling(temperature), "--max-turns", str(sampling["max_turns"]),
            "--max-tokens-per-turn", str(sampling["max_tokens_per_turn"]),
            "--max-response-tokens", str(sampling["max_response_tokens"]), "--seed", str(seed), "--quiet"]
    if limit:
        args += ["--limit", str(limit)]
    code = infer(args)
    stop_if_interrupted(code)
    if code not in (0, None):
        raise RuntimeError("afm infer failed on the RL split")
    args = ["--questions", str(questions), "--samples", str(samples), "--output", str(parquet), "--mode", "code",
            "--n", str(n), "--scorer", "rewards", "--id-key", "id", "--a-key", "answer",
            "--data-source", "afm_demo", "--prompt-key", PROMPT_KEY, "--ability", "qa", "--seed", str(seed),
            "--quiet"]
    if max_questions:
        args += ["--max-questions", str(max_questions)]
    code = select(args)
    report_path = parquet.with_suffix(".select.json")
    # exit 1 with a report: no question kept (the policy solved every one in every sample), not a failure
    if code not in (0, None) and not (code == 1 and report_path.exists()):
        raise RuntimeError("afm data select failed")
    report = json.loads(report_path.read_text())
    return {"samples": samples, "parquet": parquet if report.get("kept") else None, "report": report}


def start_rl(model: Path, parquet: Path, servers: Any, work: Path, *, steps: int, lr: float,
             knobs: dict[str, Any] | None = None) -> Any:
    """Start DAPO from ``model`` on ``parquet`` through verl's real trainer (``--local``: CPU, hf rollout) with the
    world's tools, the profile's :data:`~afm.quickstart.profile.RL_KNOBS`, the evaluations' cap on one generation and
    learning rate ``lr``; returns the running :class:`afm.quickstart.rl.DapoJob` (``wait()``: the final HF policy and
    per-step metrics)."""
    from afm.quickstart.rl import start_dapo

    return start_dapo(model, parquet, world_tools(servers), work, task="code", steps=steps,
                      knobs={**RL_KNOBS, "LR": lr, **(knobs or {})},
                      max_tokens_per_turn=WORLD_SAMPLING["max_tokens_per_turn"])


def accuracy(run_dir: Path) -> dict[str, float]:
    """Per-family mean accuracy of an eval run, and ``macro``."""
    by: dict[str, list[float]] = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        by.setdefault(str(r["benchmark"]).removeprefix("world_"), []).append(float(r.get("acc") or 0.0))
    acc = {f: sum(v) / len(v) for f, v in sorted(by.items())}
    acc["macro"] = sum(acc.values()) / len(acc) if acc else 0.0
    return acc


def main(argv: list[str] | None = None) -> int:
    """world -> distill -> filter -> convert -> untrained eval -> SFT -> SFT eval, with timings."""
    import argparse

    from afm.quickstart.servers import DemoServers, seed_site_port

    p = argparse.ArgumentParser(prog="python -m afm.quickstart.recipe", description=__doc__.split("\n\n")[0])
    p.add_argument("workdir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=float, default=DEFAULT.sft_epochs)
    p.add_argument("--lr", type=float, default=DEFAULT.sft_lr)
    p.add_argument("--limit", type=int, default=None, help="held-out questions per family")
    args = p.parse_args(argv)
    work = Path(args.workdir).absolute()
    t: dict[str, float] = {}
    t0 = time.monotonic()
    world, root = make_world(work, args.seed, shortcut=DEFAULT.teacher_shortcut)  # the quickstart's world
    with DemoServers(work / "servers", world=world, site_port=seed_site_port(args.seed)) as servers:
        out = distill_sft_data(root, servers, work / "distill", seed=args.seed,
                               shortcut_rate=SHORTCUT_RATE if DEFAULT.teacher_shortcut else 0.0)
        t["distill"] = time.monotonic() - t0
        print(json.dumps(out["filter_report"].get("counts", out["filter_report"]), indent=1)[:1500])
        model = build_student(work / "model-init", out["data"], DEFAULT.student_size())
        t1 = time.monotonic()
        schedule = replace(DEFAULT.sft_schedule(), epochs=args.epochs, learning_rate=args.lr)
        sft = train_sft(model, out["data"], work / "sft", schedule)
        t["sft"] = time.monotonic() - t1
        t2 = time.monotonic()
        acc = evaluate(sft, root, servers, work / "eval_sft", limit=args.limit)
        t["eval"] = time.monotonic() - t2
    print("SFT held-out accuracy:", json.dumps({k: round(v, 3) for k, v in acc.items()}))
    print("seconds:", json.dumps({k: round(v, 1) for k, v in t.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
