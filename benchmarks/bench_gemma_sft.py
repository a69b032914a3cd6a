"""Masked SFT of a real pretrained model, Gemma 3 270M (``afm model prepare gemma3-270m``), on the demo world:
full fine-tune and LoRA for the same fixed budget of steps, train loss and held-out accuracy before/after.

The world, the distilled SFT set, the real tool servers and ``afm eval run --backend hf`` are the quickstart's
(afm.quickstart.recipe); the student is Gemma instead of the tiny Qwen2, trained by ``afm-sft train`` with LLaMA-Factory's
``gemma`` template. The LoRA adapter is merged (peft) before it is evaluated. The untrained Gemma is the baseline,
measured in the same run. The 1-minute load average is printed: the machine may be shared.

    .venv/bin/python benchmarks/bench_gemma_sft.py [--steps 30] [--batch 4] [--train-per-family 8]
        [--heldout-per-family 5] [--full-lr 2e-5] [--lora-lr 2e-4] [--out benchmarks/out/gemma_sft]
        [--max-turns 6] [--max-tokens-per-turn 96] [--max-response-tokens 512]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _peak_rss_mb(log: Path) -> float | None:
    """The ``Maximum resident set size`` /usr/bin/time -v wrote at the end of ``log``, in MB."""
    for line in log.read_text(errors="replace").splitlines()[::-1]:
        if "Maximum resident set size" in line:
            return int(line.split(":")[-1]) / 1024
    return None


def train(base: Path, data: Path, out: Path, mode: str, steps: int, batch: int, lr: float) -> dict[str, Any]:
    """One ``afm-sft train`` run (under /usr/bin/time -v when present); its loss curve, seconds and peak RSS."""
    import subprocess

    from afm.quickstart.profile import DEFAULT, SftSchedule
    from afm.quickstart.recipe import sft_config
    from afm.quickstart.run import losses

    schedule = SftSchedule(epochs=DEFAULT.sft_epochs, batch_size=batch, learning_rate=lr, cutoff_len=1024)
    cfg = sft_config(base, data, out, schedule)
    cfg.update({"template": "gemma", "finetuning_type": mode, "max_steps": steps, "logging_steps": 1,
                "warmup_ratio": 0.0, "lr_scheduler_type": "constant"})
    if mode == "lora":
        cfg.update({"lora_rank": 16, "lora_alpha": 32, "lora_target": "all"})
    yml = out.parent / f"{out.name}.yaml"
    yml.write_text(yaml.safe_dump(cfg))
    log = out.parent / f"{out.name}.log"
    cmd = [sys.executable, "-m", "afm.sft.cli", "train", str(yml)]
    if shutil.which("time") or Path("/usr/bin/time").exists():
        cmd = ["/usr/bin/time", "-v", *cmd]
    t0 = time.monotonic()
    with log.open("w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO).returncode
    secs = time.monotonic() - t0
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"afm-sft train ({mode}) exited {code}; log {log}:\n{tail}")
    curve = losses(out)
    return {"seconds": round(secs, 1), "s_per_step": round(secs / steps, 2), "peak_rss_mb": _peak_rss_mb(log),
            "loss_first": curve[0][1] if curve else None, "loss_last": curve[-1][1] if curve else None,
            "loss": curve}


def merge_lora(base: Path, adapter: Path, out: Path) -> Path:
    """The LoRA adapter merged into the base weights, with the adapter folder's tokenizer."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).merge_and_unload()
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(adapter).save_pretrained(out)
    return out


def held_out(model: Path, root: Path, servers: Any, run_dir: Path, caps: list[str]) -> dict[str, float]:
    """``afm eval run --backend hf`` on the world's held-out questions with the token caps (an untrained model would
    otherwise write until the 32k context is full); per-family accuracy."""
    from afm.eval.run import main as eval_main
    from afm.quickstart.recipe import FAMILIES, accuracy, world_tools

    run_dir.mkdir(parents=True, exist_ok=True)
    tools_yaml = run_dir.parent / f"{run_dir.name}_tools.yaml"
    tools_yaml.write_text(yaml.safe_dump(world_tools(servers)))
    code = eval_main(["--benchmarks", ",".join(f"world_{f}" for f in FAMILIES), "--run-dir", str(run_dir),
                      "--data-root", str(root), "--backend", "hf", "--model", str(model), "--tools-config",
                      str(tools_yaml), "--concurrency", "32", "--batch-size", "32", "--seed", "0", "--quiet",
                      "--force", *caps])
    if code not in (0, None):
        raise RuntimeError(f"afm eval run failed (exit {code})")
    return accuracy(run_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--train-per-family", type=int, default=8)
    p.add_argument("--heldout-per-family", type=int, default=5)
    p.add_argument("--full-lr", type=float, default=2e-5)
    p.add_argument("--lora-lr", type=float, default=2e-4)
    p.add_argument("--modes", default="full,lora")
    p.add_argument("--out", default=str(REPO / "benchmarks/out/gemma_sft"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-turns", type=int, default=6)
    p.add_argument("--max-tokens-per-turn", type=int, default=96)
    p.add_argument("--max-response-tokens", type=int, default=512)
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from afm.model import prepare
    from afm.quickstart.recipe import distill_sft_data, make_world
    from afm.quickstart.servers import DemoServers

    work = Path(args.out).absolute()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    gemma = prepare("gemma3-270m")
    caps = ["--max-turns", str(args.max_turns), "--max-tokens-per-turn", str(args.max_tokens_per_turn),
            "--max-response-tokens", str(args.max_response_tokens), "--max-model-len", "4096"]
    res: dict[str, Any] = {"args": vars(args), "load_before": os.getloadavg()[0]}
    world, root = make_world(work, args.seed, {"train": args.train_per_family, "rl": 1,
                                               "heldout": args.heldout_per_family})
    with DemoServers(work / "servers", world=world) as servers:
        t = time.monotonic()
        data = distill_sft_data(root, servers, work / "distill", seed=args.seed)["data"]
        res["distill_s"] = round(time.monotonic() - t, 1)
        res["sft_samples"] = len(json.loads((data / "afm_world_sft.json").read_text()))
        print(f"[bench] {res['sft_samples']} SFT samples; evaluating the untrained Gemma", flush=True)
        t = time.monotonic()
        res["untrained"] = {"acc": held_out(gemma.hf_dir, root, servers, work / "eval" / "untrained", caps),
                            "eval_s": round(time.monotonic() - t, 1)}
        print(f"[bench] untrained: {res['untrained']}", flush=True)
        for mode in args.modes.split(","):
            lr = args.full_lr if mode == "full" else args.lora_lr
            out = work / f"sft_{mode}"
            res[mode] = train(gemma.hf_dir, data, out, mode, args.steps, args.batch, lr)
            model = out if mode == "full" else merge_lora(gemma.hf_dir, out, work / "sft_lora_merged")
            t = time.monotonic()
            res[mode]["acc"] = held_out(model, root, servers, work / "eval" / mode, caps)
            res[mode]["eval_s"] = round(time.monotonic() - t, 1)
            print(f"[bench] {mode}: " + json.dumps({k: v for k, v in res[mode].items() if k != "loss"}), flush=True)
    res["load_after"] = os.getloadavg()[0]
    (work / "result.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k not in ("full", "lora")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
