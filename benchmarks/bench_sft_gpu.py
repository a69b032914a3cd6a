#!/usr/bin/env python
"""SFT training throughput with and without observation masking, on one CUDA GPU.

    .venv/bin/python benchmarks/bench_sft_gpu.py [--n 2000] [--steps 60] [--warmup 10] [--out benchmarks/out/gpu]
    .venv/bin/python benchmarks/bench_sft_gpu.py --cpu-smoke     # the same pipeline with a tiny model on CPU

A random-init model shaped like Qwen2.5-0.5B (Qwen2Config: 24 layers, hidden 896, 14/2 heads, vocab 151936; no
weights are downloaded) is trained twice with LLaMA-Factory's own ``run_exp`` (afm overlay applied), on the same
synthetic trajectories as ``bench_masking.py``: once with ``ignore_observation: false`` and once with ``true``.
Each run is a fresh child process, the two are run in A-B-B-A order by default (``--repeats 2``). Throughput is
measured in steady state by a trainer callback: input tokens seen (``include_num_input_tokens_seen:
non_padding``) between the end of step ``--warmup`` and the last step, over the wall time between them (CUDA
synchronised). ``train_runtime`` from ``all_results.json`` is reported too. The target is masked within 3% of
stock: masking only changes labels, so the forward/backward work is the same.

Without a CUDA device it prints why and exits with status 77 (skipped), unless ``--cpu-smoke`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SKIPPED = 77

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0,
                  rms_norm_eps=1e-6, tie_word_embeddings=True)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=4096, tie_word_embeddings=True)


def build_model(out: Path, smoke: bool) -> Path:
    """Random-init Qwen2 model + the bench's tiny tokenizer in ``out/model``."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    sys.path.insert(0, str(HERE))
    from bench_masking import build_tokenizer_dir

    tok_dir = build_tokenizer_dir(out.parent, 0)
    model_dir = out / ("model_tiny" if smoke else "model_qwen2.5-0.5b_random")
    if (model_dir / "config.json").exists():
        return model_dir
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    shape = dict(TINY, vocab_size=len(tokenizer)) if smoke else dict(QWEN25_05B)
    assert shape["vocab_size"] >= len(tokenizer)
    config = Qwen2Config(**shape, bos_token_id=None, eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.float32 if smoke else torch.bfloat16)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    print(f"random-init model ({sum(p.numel() for p in model.parameters()):,} params) in {model_dir}")
    return model_dir


def write_data(out: Path, n: int) -> Path:
    sys.path.insert(0, str(HERE))
    from bench_masking import Gen

    data_dir = out / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    gen = Gen(0)
    texts = [gen.trajectory() for _ in range(n)]
    rows = [{"instruction": gen.question(), "input": "", "output": t} for t in texts]
    (data_dir / "afm_bench_sft.json").write_text(json.dumps(rows, ensure_ascii=False))
    info = {"afm_bench_sft": {"file_name": "afm_bench_sft.json",
                              "columns": {"prompt": "instruction", "query": "input", "response": "output"}}}
    (data_dir / "dataset_info.json").write_text(json.dumps(info, indent=2))
    return data_dir


def run_config(args: argparse.Namespace, model: Path, data: Path, run_dir: Path, masked: bool) -> dict:
    smoke = args.cpu_smoke
    cfg = {
        "model_name_or_path": str(model),
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "full",
        "dataset": "afm_bench_sft",
        "dataset_dir": str(data),
        "template": "qwen",
        "cutoff_len": args.cutoff_len,
        "per_device_train_batch_size": args.batch_size,
        "gradient_accumulation_steps": 1,
        "max_steps": args.steps,
        "learning_rate": 1.0e-5,
        "lr_scheduler_type": "constant",
        "logging_steps": 10,
        "save_strategy": "no",
        "report_to": "none",
        "overwrite_cache": True,
        "preprocessing_num_workers": 1 if smoke else 8,
        "dataloader_num_workers": 0 if smoke else 2,
        "output_dir": str(run_dir),
        "overwrite_output_dir": True,
        "cache_dir": str(run_dir.parent / "hf-cache"),
        "include_num_input_tokens_seen": "non_padding",
        "seed": 0,
        "ignore_observation": masked,
        "ignore_observation_token": "observation",
        "ignore_observation_check": "tags",
    }
    if not smoke:
        cfg["bf16"] = True
    return cfg


def child(cfg_path: str) -> int:
    """One training run in this (fresh) process; writes timing.json into the output dir."""
    import torch
    from transformers import TrainerCallback

    from afm.sft.overlay import apply

    apply()
    from llamafactory.train.tuner import run_exp

    cfg = json.loads(Path(cfg_path).read_text())
    warmup = cfg.pop("_warmup")
    out = Path(cfg["output_dir"])

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[tuple[int, float, int]] = []

        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.marks.append((state.global_step, time.perf_counter(), int(state.num_input_tokens_seen)))

    timer = StepTimer()
    run_exp(cfg, callbacks=[timer])
    marks = [m for m in timer.marks if m[0] >= warmup]
    (step0, t0, n0), (step1, t1, n1) = marks[0], marks[-1]
    result = {"steps": step1 - step0, "seconds": t1 - t0, "tokens": n1 - n0,
              "tokens_per_s": (n1 - n0) / (t1 - t0) if t1 > t0 else float("nan")}
    results = out / "all_results.json"
    if results.exists():
        result["all_results"] = json.loads(results.read_text())
    report = out / "afm_mask_report_train.json"
    if report.exists():
        result["mask_report"] = json.loads(report.read_text())
    (out / "timing.json").write_text(json.dumps(result, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="synthetic SFT samples")
    ap.add_argument("--steps", type=int, default=60, help="max_steps of each run")
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of the throughput")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--cutoff-len", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=2, help="runs of each variant, in A-B-B-A order")
    ap.add_argument("--out", type=Path, default=HERE / "out" / "gpu")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny model on CPU, to check the pipeline only")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        return child(args._child)

    import torch

    if args.cpu_smoke:
        args.steps, args.warmup, args.batch_size, args.n, args.repeats = min(args.steps, 6), 2, 2, min(args.n, 64), 1
        device = "CPU (smoke test: the figures mean nothing)"
    elif not torch.cuda.is_available():
        print("bench_sft_gpu: no CUDA device is available, so SFT tokens/s with vs without observation masking was "
              "NOT measured (skipped, exit status 77). Run it on a machine with a GPU, or pass --cpu-smoke to check "
              "the pipeline on CPU.")
        return SKIPPED
    else:
        device = torch.cuda.get_device_name(0)
    args.out.mkdir(parents=True, exist_ok=True)
    model = build_model(args.out, args.cpu_smoke)
    data = write_data(args.out, args.n)
    order = []
    for r in range(args.repeats):
        order += [False, True] if r % 2 == 0 else [True, False]
    results: dict[bool, list[dict]] = {False: [], True: []}
    for k, masked in enumerate(order):
        name = f"{'masked' if masked else 'stock'}_{k}"
        run_dir = args.out / "runs" / name
        shutil.rmtree(run_dir, ignore_errors=True)
        cfg = run_config(args, model, data, run_dir, masked)
        cfg["_warmup"] = args.warmup
        cfg_path = args.out / f"{name}.json"
        cfg_path.write_text(json.dumps(cfg, indent=2))
        log = args.out / f"{name}.log"
        print(f"run {k + 1}/{len(order)}: {name} (log {log})", flush=True)
        with log.open("w") as fh:
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--_child", str(cfg_path)],
                                  stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        if proc.returncode != 0:
            print(f"run {name} failed (exit {proc.returncode}); last lines of {log}:")
            print("\n".join(log.read_text().splitlines()[-30:]))
            return 1
        timing = json.loads((run_dir / "timing.json").read_text())
        results[masked].append(timing)
        rt = timing.get("all_results", {}).get("train_runtime")
        print(f"  {timing['tokens_per_s']:,.0f} tokens/s over steps {args.warmup}..{args.steps} "
              f"({timing['tokens']:,} tokens in {timing['seconds']:.2f}s); train_runtime {rt}s", flush=True)
    stock = statistics.median(t["tokens_per_s"] for t in results[False])
    masked = statistics.median(t["tokens_per_s"] for t in results[True])
    report = results[True][0].get("mask_report", {})
    diff = masked / stock - 1
    print("=" * 100)
    print(f"device {device}; torch {torch.__version__}; Qwen2.5-0.5B-shaped random init"
          f"{' (tiny for the smoke test)' if args.cpu_smoke else ''}; batch {args.batch_size}, {args.steps} steps, "
          f"warmup {args.warmup}, {args.n} samples")
    print(f"SFT stock  (ignore_observation=false): {stock:12,.0f} input tokens/s (median of {len(results[False])})")
    print(f"SFT masked (ignore_observation=true) : {masked:12,.0f} input tokens/s (median of {len(results[True])}); "
          f"mask report: {report.get('tokens_masked', '?')} of {report.get('tokens_target', '?')} label tokens masked")
    verdict = "smoke test, not judged" if args.cpu_smoke else ("PASS" if abs(diff) <= 0.03 else "FAIL")
    print(f"masked vs stock: {100 * diff:+.2f}%  (target within 3%: {verdict})")
    (args.out / "bench_sft_gpu.json").write_text(json.dumps(
        {"device": device, "stock_tokens_per_s": stock, "masked_tokens_per_s": masked, "diff": diff,
         "runs": {"stock": results[False], "masked": results[True]}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
