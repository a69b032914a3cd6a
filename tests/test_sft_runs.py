"""Real LLaMA-Factory trainings through ``afm-sft`` on the tiny model (CPU, seconds each)."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import lf_config, run_afm_sft

pytestmark = pytest.mark.slow


def _train(tmp_path, name, **overrides):
    out = tmp_path / name
    cfg = lf_config(overrides.pop("model"), overrides.pop("data"), out, **overrides)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, out


def _train_loss(out):
    return json.loads((out / "all_results.json").read_text())["train_loss"]


def _report(out) -> dict:
    report = json.loads((out / "afm_mask_report_train.json").read_text())
    report.pop("from_cache", None)
    return report


def _expected_report(cfg: dict) -> dict:
    """The mask report of this config computed in this process (afm-sft mask-report's pipeline, no training)."""
    from afm.sft.report import preprocess

    report = preprocess(dict(cfg)).reports["train"].to_dict()
    report.pop("from_cache", None)
    return report


def _first_step_loss(out):
    return json.loads((out / "trainer_state.json").read_text())["log_history"][0]["loss"]


def _untrained_loss(cfg_path) -> float:
    """Cross-entropy of the untrained model over every trained label of the rows LLaMA-Factory builds from this
    config (afm-sft mask-report's pipeline): sum over tokens / number of tokens, as the trainer reduces a batch."""
    import torch
    from transformers import AutoModelForCausalLM

    from afm.sft.masking import IGNORE_INDEX
    from afm.sft.report import preprocess

    cfg = yaml.safe_load(cfg_path.read_text())
    rows = preprocess(cfg, force_mask=False).dataset_module["train_dataset"]
    model = AutoModelForCausalLM.from_pretrained(cfg["model_name_or_path"], torch_dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            logits = model(input_ids=torch.tensor([row["input_ids"]])).logits[0, :-1]
            target = torch.tensor(row["labels"][1:])
            keep = target != IGNORE_INDEX
            total += torch.nn.functional.cross_entropy(logits[keep], target[keep], reduction="sum").item()
            count += int(keep.sum())
    return total / count


def test_sft_masked_vs_unmasked_and_packed(tiny_model, demo_data, tmp_path):
    """Step 1 covers every row in one batch, so its loss is the untrained model's loss over exactly the labels that
    masking (and packing) left: computed here independently, it must match what LLaMA-Factory logged. The masked and
    packed runs take logits only at trained positions (trained_logits_only), the unmasked one all of them."""
    reports = {}
    for name, extra in {"masked": {"trained_logits_only": True}, "unmasked": {"ignore_observation": False},
                        "packed": {"packing": True, "cutoff_len": 2048, "trained_logits_only": True}}.items():
        cfg, out = _train(tmp_path, name, model=tiny_model, data=demo_data, per_device_train_batch_size=32, **extra)
        proc = run_afm_sft(["train", str(cfg)])
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert ("[afm] trained_logits_only: the first micro-batch takes logits at" in proc.stdout) \
            == bool(extra.get("trained_logits_only")), name
        # float32 batched vs one row at a time: ~1e-5 relative apart; masking moves the loss ~6e-4 relative
        assert _first_step_loss(out) == pytest.approx(_untrained_loss(cfg), rel=5e-5), name
        assert _train_loss(out) < _first_step_loss(out)  # three steps of training lowered it
        if extra.get("ignore_observation", True):
            reports[name] = _report(out)
            assert reports[name]["drops"] == {"unclosed_observation": 2}
            assert reports[name] == _expected_report(yaml.safe_load(cfg.read_text()))
            assert "[afm] observation masking" in proc.stdout
        else:
            assert not (out / "afm_mask_report_train.json").exists()
    # packing concatenates the same masked samples: the same tokens are trained and masked
    assert reports["packed"] == reports["masked"]


def _weights(model_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def test_sorted_micro_batches_train_the_same_step_with_less_padding(tiny_model, demo_data, tmp_path):
    """sort_micro_batches: one step of 8 rows as one batch and as two sorted micro-batches of 4 (gradient
    accumulation) trains the same rows to the same weights; the log says what the sorting saved. With share_prefix
    (and trained_logits_only) on top, each micro-batch's common prefix runs once, and each attention call runs as
    three query chunks (attention_chunks; the rows' ~150-220 queries a call): the same weights again. In bf16
    on the CPU with attention_fp32 too: Adam's first step moves each weight by ~lr along its gradient's sign, so
    nearly every weight moves as in float32."""
    weights, logs = {}, {}
    shared = {"share_prefix": True, "trained_logits_only": True, "disable_gradient_checkpointing": True,
              "attention_chunks": 3}
    runs = {"one": (8, 1, {}), "two": (4, 2, {}), "shared": (4, 2, shared),
            "bf16": (4, 2, {**shared, "bf16": True, "use_cpu": True, "attention_fp32": True})}
    for name, (micro, accum, extra) in runs.items():
        cfg, out = _train(tmp_path, name, model=tiny_model, data=demo_data, per_device_train_batch_size=micro,
                          gradient_accumulation_steps=accum, max_steps=1, sort_micro_batches=True, **extra)
        proc = run_afm_sft(["train", str(cfg)])
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        weights[name], logs[name] = _weights(out), proc.stdout
    assert "each step's 8 rows longest first, in micro-batches of 4" in logs["two"]
    assert "same rows and gradient per step" in logs["two"]
    assert "[afm] share_prefix: a micro-batch's 4 rows share their first" in logs["shared"]
    untrained = _weights(tiny_model)
    for key, tensor in weights["one"].items():
        # float32, the loss summed in another order: equal to ~1e-7; the step itself moved them ~lr (1e-3)
        assert torch_allclose(weights["two"][key], tensor, atol=2e-6), key
        assert torch_allclose(weights["shared"][key], tensor, atol=2e-6), key
    assert any(not torch_allclose(untrained[k], t, atol=1e-5) for k, t in weights["one"].items())
    assert "[afm] attention_fp32: the attention kernel runs on float32" in logs["bf16"]
    assert "[afm] attention_chunks: each causal attention call runs as 3 query chunks" in logs["shared"]
    same = sum(int(((weights["bf16"][k].float() - t).abs() <= 1e-6).sum()) for k, t in weights["one"].items())
    assert same / sum(t.numel() for t in weights["one"].values()) > 0.95
    cfg, _ = _train(tmp_path, "refused", model=tiny_model, data=demo_data, stage="dpo", dataset="afm_demo_dpo",
                    sort_micro_batches=True)
    proc = run_afm_sft(["train", str(cfg)])
    assert proc.returncode != 0 and "sort_micro_batches is implemented for stage sft only" in proc.stderr
    cfg, _ = _train(tmp_path, "refused_logits", model=tiny_model, data=demo_data, stage="dpo",
                    dataset="afm_demo_dpo", trained_logits_only=True)
    proc = run_afm_sft(["train", str(cfg)])
    assert proc.returncode != 0 and "trained_logits_only is implemented for stage sft only" in proc.stderr
    cfg, _ = _train(tmp_path, "refused_prefix", model=tiny_model, data=demo_data, share_prefix=True)
    proc = run_afm_sft(["train", str(cfg)])  # LLaMA-Factory's default: gradient checkpointing on
    assert proc.returncode != 0 and "share_prefix needs disable_gradient_checkpointing: true" in proc.stderr
    cfg, _ = _train(tmp_path, "refused_fp32", model=tiny_model, data=demo_data, attention_fp32=True)
    proc = run_afm_sft(["train", str(cfg)])
    assert proc.returncode != 0 and "attention_fp32 changes nothing without mixed precision" in proc.stderr
    cfg, _ = _train(tmp_path, "refused_fp32_ckpt", model=tiny_model, data=demo_data, attention_fp32=True, bf16=True,
                    use_cpu=True)
    proc = run_afm_sft(["train", str(cfg)])  # LLaMA-Factory's default: gradient checkpointing on
    assert proc.returncode != 0 and "attention_fp32 needs disable_gradient_checkpointing: true" in proc.stderr


def torch_allclose(a, b, atol: float) -> bool:
    import torch

    return torch.allclose(a.float(), b.float(), atol=atol, rtol=0)


def test_dpo_masked(tiny_model, demo_data, tmp_path):
    cfg, out = _train(tmp_path, "dpo", model=tiny_model, data=demo_data, stage="dpo", dataset="afm_demo_dpo",
                      pref_beta=0.1, pref_loss="sigmoid")
    proc = run_afm_sft(["train", str(cfg)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = _report(out)
    assert report["samples_kept"] == 12 and report == _expected_report(yaml.safe_load(cfg.read_text()))
    assert "rewards/accuracies" in (out / "trainer_state.json").read_text()


def test_cli_flags_without_config_file(tiny_model, demo_data, tmp_path):
    out = tmp_path / "flags"
    proc = run_afm_sft([
        "train", "--model_name_or_path", str(tiny_model), "--stage", "sft", "--do_train", "true",
        "--finetuning_type", "full", "--dataset", "afm_demo_sft", "--dataset_dir", str(demo_data),
        "--template", "qwen", "--cutoff_len", "1024", "--max_steps", "2", "--output_dir", str(out),
        "--report_to", "none", "--save_strategy", "no", "--overwrite_cache", "true",
        "--ignore_observation", "true", "--ignore_observation_token", "observation",
        "--cache_dir", str(tmp_path / "hf-cache"),
    ])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the flags reach the same masking as the equivalent config file
    assert _report(out) == _expected_report(lf_config(tiny_model, demo_data, tmp_path / "ref"))


def test_torchrun_two_processes_still_mask(tiny_model, demo_data, tmp_path):
    # with sorted micro-batches: a step is 2 rows x 2 micro-batches x 2 ranks, drawn by one sampler on both ranks
    cfg, out = _train(tmp_path, "ddp", model=tiny_model, data=demo_data, per_device_train_batch_size=2, max_steps=2,
                      ddp_backend="gloo", gradient_accumulation_steps=2, sort_micro_batches=True,
                      share_prefix=True, disable_gradient_checkpointing=True)
    proc = run_afm_sft(["train", str(cfg)], env={"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2",
                                                 "MASTER_PORT": "29531", "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    logs = proc.stdout + proc.stderr
    assert "Initializing 2 distributed tasks" in logs
    # both ranks parsed ignore_observation: stock LLaMA-Factory workers would reject the unknown key
    assert "process rank: 1, world size: 2" in logs.lower()
    assert "each step's 8 rows longest first, in micro-batches of 2" in logs
    assert "[afm] share_prefix: a micro-batch's 2 rows share their first" in logs  # under DDP's forward
    single = {k: v for k, v in yaml.safe_load(cfg.read_text()).items() if k != "ddp_backend"}
    assert _report(out) == _expected_report(single)  # both ranks' work counted once


def test_bad_cli_input_gives_clear_errors(tiny_model, demo_data, tmp_path):
    proc = run_afm_sft(["train", str(tmp_path / "missing.yaml")])
    assert proc.returncode == 2 and "config file not found" in proc.stderr
    proc = run_afm_sft(["frobnicate"])
    assert proc.returncode == 2 and "unknown command 'frobnicate'" in proc.stderr
    cfg, _ = _train(tmp_path, "bad", model=tiny_model, data=demo_data)
    proc = run_afm_sft(["train", str(cfg), "ignore_observation_check=bogus"])
    assert proc.returncode != 0 and "ignore_observation_check" in proc.stderr
    proc = run_afm_sft(["train", str(cfg), "--ignore_observation_token", "<observation>"])
    assert proc.returncode != 0 and "bare tag name" in proc.stderr
    proc = run_afm_sft(["mask-report"])
    assert proc.returncode == 2 and "training config" in proc.stderr


def test_mask_report_command(tiny_model, demo_data, tmp_path):
    cfg, _ = _train(tmp_path, "rep", model=tiny_model, data=demo_data, ignore_observation=False)
    proc = run_afm_sft(["mask-report", str(cfg), "--show", "1", "--json", str(tmp_path / "r.json")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "would" in proc.stdout and "unclosed_observation" in proc.stdout and "⟦<observation>" in proc.stdout
    assert json.loads((tmp_path / "r.json").read_text())["train"]["samples_dropped"] == 2


def test_sft_script_logs_to_swanlab_offline(tiny_model, demo_data, tmp_path):
    """REPORT_TO=swanlab through the SFT script, in SwanLab's local mode: no account, no network."""
    pytest.importorskip("swanlab")
    import os
    import shutil
    import socket
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, logdir = tmp_path / "sft", tmp_path / "swanlog"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "AFM_SFT": f"{sys.executable} -m afm.sft.cli", "MODEL_PATH": str(tiny_model), "DATASET_DIR": str(demo_data),
        "DATASET": "afm_demo_sft", "OUTPUT_DIR": str(out), "PRECISION": "fp32", "DEEPSPEED_CONFIG": "",
        "CUTOFF_LEN": "1024", "PREPROCESSING_NUM_WORKERS": "1", "GRADIENT_ACCUMULATION": "1", "EPOCHS": "1",
        "CUDA_VISIBLE_DEVICES": "", "MASTER_PORT": str(port), "EXTRA_ARGS": "--max_steps 2 --logging_steps 1",
        "SAVE_STRATEGY": "no", "REPORT_TO": "swanlab", "SWANLAB_MODE": "local", "SWANLAB_LOG_DIR": str(logdir),
        "SWANLAB_PROJECT": "afm-test",
    }
    proc = subprocess.run([shutil.which("bash") or "/bin/bash", str(repo / "sft_scripts/web_agent/sft_qwen2.5_7b.sh")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    log = (out / "training.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    assert "--use_swanlab true" in log and "--swanlab_mode local" in log
    runs = list(logdir.glob("run-*/run-*.swanlab"))
    assert len(runs) == 1, sorted(p.name for p in logdir.rglob("*"))
    data = runs[0].read_bytes()
    assert b"loss" in data  # the trainer's metrics were logged
    assert "afm-test" in (runs[0].parent / "debug" / "debug.log").read_text() or b"afm-test" in data
