"""``afm quickstart``: the whole pipeline on embedded defaults, offline, on CPU.

1. build a tiny Qwen2-architecture model and a locally trained tokenizer;
2. write demo CoA trajectories (code and search tasks; two deliberately broken samples);
3. print the observation-masking report for the SFT set (``afm-sft mask-report``);
4. run masked SFT, then masked DPO from the SFT checkpoint (``afm-sft train``, real LLaMA-Factory runs);
5. print both loss curves.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml


def _config(model: Path, data: Path, out: Path, stage: str, **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "model_name_or_path": str(model),
        "stage": stage,
        "do_train": True,
        "finetuning_type": "full",
        "dataset": "afm_demo_sft" if stage == "sft" else "afm_demo_dpo",
        "dataset_dir": str(data),
        "template": "qwen",
        "cutoff_len": 1024,
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1,
        "learning_rate": 3.0e-3 if stage == "sft" else 1.0e-4,
        "lr_scheduler_type": "cosine",
        "warmup_ratio": 0.1,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "plot_loss": True,
        "overwrite_cache": True,
        "preprocessing_num_workers": 1,
        "output_dir": str(out),
        "overwrite_output_dir": True,
        "ignore_observation": True,
        "ignore_observation_token": "observation",
        "seed": 0,
    }
    cfg.update(extra)
    return cfg


def _run(cmd: list[str], log: Path) -> None:
    print(f"$ {' '.join(cmd)}   (log: {log})", flush=True)
    with log.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"command failed with exit code {proc.returncode}: {' '.join(cmd)}\n{tail}")


def losses(output_dir: Path) -> list[tuple[int, float]]:
    """(step, loss) pairs from a finished run's trainer_state.json."""
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return [(int(e["step"]), float(e["loss"])) for e in state["log_history"] if "loss" in e]


def ascii_curve(points: list[tuple[int, float]], width: int = 60, height: int = 8) -> str:
    """A small text plot of a loss curve."""
    if not points:
        return "(no losses logged)"
    ys = [y for _, y in points]
    lo, hi = min(ys), max(ys)
    span = (hi - lo) or 1.0
    n = min(width, len(ys))
    cols = [ys[int(i * len(ys) / n)] for i in range(n - 1)] + [ys[-1]]
    rows = []
    for r in range(height, -1, -1):
        level = lo + span * r / height
        line = "".join("•" if abs((y - lo) / span * height - r) < 0.5 else " " for y in cols)
        rows.append(f"{level:8.3f} |{line}")
    rows.append(" " * 9 + "+" + "-" * len(cols))
    rows.append(" " * 10 + f"step 1 .. {points[-1][0]}   first {ys[0]:.3f}  last {ys[-1]:.3f}")
    return "\n".join(rows)


def _evaluate(model: Path, work: Path, servers: Any) -> dict[str, Any]:
    """`afm eval run` on the demo benchmarks with the demo servers as tools; returns the report path."""
    from afm.eval.run import main as eval_main

    tools_yaml = work / "tools.yaml"
    tools_yaml.write_text(yaml.safe_dump(servers.tools_config()))
    run_dir = work / "eval"
    code = eval_main(["--benchmarks", "demo_math,demo_code,demo_mhqa,demo_web", "--run-dir", str(run_dir),
                      "--backend", "hf", "--model", str(model), "--tools-config", str(tools_yaml), "--n", "2",
                      "--limit", "2", "--concurrency", "8", "--seed", "0", "--quiet"])
    report = run_dir / "report.md"
    if report.exists():
        text = report.read_text()
        print(text[: text.find("\n## ", text.find("\n## ") + 1)] if text.count("\n## ") > 1 else text[:3000])
    return {"exit_code": code, "run_dir": str(run_dir), "report": str(report)}


def run(workdir: str | Path = "runs/quickstart", sft_epochs: float = 3.0, dpo_epochs: float = 2.0,
        n_sft: int = 64, n_dpo: int = 32, seed: int = 0) -> dict[str, Any]:
    """Run the quickstart in ``workdir``; returns the paths and loss curves."""
    from afm.demo.tiny_model import build_tiny_model
    from afm.demo_content.samples import tokenizer_corpus, write_demo_data

    t0 = time.time()
    work = Path(workdir).absolute()
    work.mkdir(parents=True, exist_ok=True)
    model = work / "tiny-qwen2"
    if not (model / "config.json").exists():
        print(f"[1/7] building a tiny Qwen2 model and tokenizer in {model}", flush=True)
        build_tiny_model(model, tokenizer_corpus(seed), hidden_size=128, intermediate_size=256, seed=seed)
    else:
        print(f"[1/7] reusing the tiny model in {model}", flush=True)
    data = work / "data"
    print(f"[2/7] writing demo CoA trajectories to {data}", flush=True)
    write_demo_data(data, n_sft=n_sft, n_dpo=n_dpo, seed=seed)

    sft_out, dpo_out = work / "sft", work / "dpo"
    sft_cfg = work / "sft.yaml"
    sft_cfg.write_text(yaml.safe_dump(_config(model, data, sft_out, "sft", num_train_epochs=sft_epochs)))
    dpo_cfg = work / "dpo.yaml"
    dpo_cfg.write_text(yaml.safe_dump(_config(sft_out, data, dpo_out, "dpo", num_train_epochs=dpo_epochs,
                                              pref_beta=0.1, pref_loss="sigmoid")))
    afm_sft = [sys.executable, "-m", "afm.sft.cli"]

    print("[3/7] masking report for the SFT set", flush=True)
    report_json = work / "mask_report.json"
    _run([*afm_sft, "mask-report", str(sft_cfg), "--show", "1", "--json", str(report_json)], work / "mask_report.log")
    log_text = (work / "mask_report.log").read_text()
    start = log_text.find("[afm] observation masking")
    print(log_text[start:].split("\n---")[0].rstrip() if start >= 0 else log_text[-2000:])
    sample = log_text[log_text.find("--- sample 0"):]
    if sample.startswith("--- sample"):
        print("\n".join(sample.splitlines()[:24]))

    print("[4/7] masked SFT, then masked DPO (LLaMA-Factory through afm-sft)", flush=True)
    _run([*afm_sft, "train", str(sft_cfg)], work / "sft.log")
    _run([*afm_sft, "train", str(dpo_cfg)], work / "dpo.log")

    curves = {"sft": losses(sft_out), "dpo": losses(dpo_out)}
    print("[5/7] loss curves", flush=True)
    for name, points in curves.items():
        print(f"\n{name.upper()} loss ({len(points)} steps)")
        print(ascii_curve(points))
    from afm.demo.agent_demo import DemoServers, run_agent_demo

    with DemoServers(work / "servers") as servers:
        print("\n[6/7] rollouts: the SFT model answers demo questions through the engine, with the local tool "
              "servers and the code sandbox", flush=True)
        rollouts = run_agent_demo(sft_out, work / "rollouts", servers=servers)
        print("\n[7/7] evaluation: the SFT model on the demo benchmarks (2 questions x 2 samples each), scored by "
              "afm.rewards, with a report", flush=True)
        evaluation = _evaluate(sft_out, work, servers)
    print(f"\nDone in {time.time() - t0:.0f}s. Outputs in {work}: sft/ and dpo/ (checkpoints, training_loss.png), "
          "mask_report.json, rollouts/trajectories.jsonl, eval/ (results.jsonl, report.md, plots), *.log")
    return {"workdir": str(work), "curves": curves, "mask_report": json.loads(report_json.read_text()),
            "rollouts": rollouts, "evaluation": evaluation}
