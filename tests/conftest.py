"""Shared fixtures: a tiny Qwen2 model + tokenizer and demo data, built once per test session (offline)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

# Ray runs its workers at niceness 15 (its RAY_worker_niceness, read by each worker; 0 for Ray's own job
# supervisor): next to processes at niceness 0 - the other suite, xdist's other worker, a busy machine's jobs - a
# verl worker then gets a few percent of a core (weight 36 against 1024 each) and a two-node launch made no progress
# in 15 minutes beside 4 busy loops (benchmarks/RESULTS.md, twenty-second session). The tests check what verl and afm
# do, not how Ray yields the CPU, so their Ray workers compete at the default niceness. Every launch inherits it (the
# suite's processes, ray_cluster.sh's nodes, the quickstart's DAPO stage); a value in the environment is kept.
os.environ.setdefault("RAY_worker_niceness", "0")


def _cuda_missing() -> str | None:
    """Why a ``gpu`` test cannot run here, or None when a CUDA device is visible to torch."""
    try:
        import torch
    except ImportError:
        return "needs a CUDA device: torch is not installed"
    if not torch.cuda.is_available():
        return f"needs a CUDA device: none visible to torch {torch.__version__}"
    return None


# The files that took longest in a whole-suite run on 2 cores (benchmarks/RESULTS.md, twentieth session), heaviest
# first. An ordering hint for pytest-xdist's workers only: a file missing here runs after these, in collection order
# (tests/test_suite_order.py checks that every name is a file).
HEAVY_FILES = (
    "tests/test_sft_runs.py", "tests/test_sft_two_nodes.py", "tests/rl/test_two_nodes.py", "tests/test_sft_overlay.py",
    "tests/rl/test_local_trainer.py", "tests/test_model_gemma.py", "tests/rl/test_vllm_rollout.py",
    "tests/test_eval_run.py", "tests/test_infer.py", "tests/test_shell_scripts.py", "tests/test_eval_outages.py",
    "tests/test_view.py", "tests/test_run_lock.py", "tests/test_sft_scripts.py", "tests/test_vllm_engine.py",
    "tests/test_engines.py", "tests/rl/test_dapo_scripts.py",
)


def under_xdist(config) -> bool:
    """Whether this process is one of pytest-xdist's workers (``-n N``)."""
    return hasattr(config, "workerinput")


def run_shared_dir(tmp_path_factory, name: str) -> tuple[Path, Any]:
    """A folder for ``name`` that every pytest-xdist worker of this run shares (the parent of the workers' base
    temporary folders; a folder of this process's own without xdist), and a file lock to build it under: inputs that
    two files on different workers both need are built once a run, not once a worker."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / name
    return folder, FileLock(str(root / f"{name}.lock"))


def _file_of(item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items) -> None:
    """Skip the tests marked ``gpu`` (pyproject markers) with a reason when no CUDA device is visible. Order: in one
    process, the tests marked ``last`` run after every other one; on pytest-xdist's workers (``--dist loadfile``, as
    scripts/test.sh runs the suites), the longest first: the files of ``last`` tests, then :data:`HEAVY_FILES`, then
    the rest, so that no worker starts a long file when the others are nearly done."""
    if under_xdist(config):
        # with --no-loadscope-reorder the scheduler hands out files in this order (its default sorts by test count)
        last_files = {_file_of(item) for item in items if item.get_closest_marker("last") is not None}
        rank = {name: i for i, name in enumerate(HEAVY_FILES)}

        def weight(item) -> tuple[int, int, int]:
            name = _file_of(item)
            # inside a file the ``last`` test comes first: it is the file's (and the run's) longest
            return (0 if name in last_files else 1, rank.get(name, len(rank)),
                    0 if item.get_closest_marker("last") is not None else 1)

        items.sort(key=weight)  # stable: the rest keeps its collection order
    else:
        # the miniature recipe (``last``) is the heaviest test of the suite: in one process, at the end
        items.sort(key=lambda item: item.get_closest_marker("last") is not None)  # stable
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    reason = _cuda_missing() if gpu_items else None
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from afm.demo_content.samples import tokenizer_corpus
    from afm.model.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-qwen2", tokenizer_corpus(0))


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="session")
def qwen_tokenizer_dir(request, tmp_path_factory) -> Path:
    """Qwen2.5's 151k vocabulary, built offline from the dashscope wheel once and kept in .pytest_cache."""
    from afm.offline.qwen_tokenizer import build_qwen25_tokenizer

    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    base = cache.mkdir("afm-qwen2.5-tokenizer") if cache is not None else tmp_path_factory.mktemp("qwen2.5")
    return build_qwen25_tokenizer(base / "tokenizer")


@pytest.fixture(scope="session")
def qwen_tokenizer(qwen_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_tokenizer_dir)


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> Path:
    from afm.demo_content.samples import write_demo_data

    return write_demo_data(tmp_path_factory.mktemp("data"), n_sft=24, n_dpo=12, broken=2)


def lf_config(model: Path, data: Path, out: Path, **overrides: Any) -> dict[str, Any]:
    """A small LLaMA-Factory training config for the tiny model."""
    cfg: dict[str, Any] = {
        "model_name_or_path": str(model),
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "full",
        "dataset": "afm_demo_sft",
        "dataset_dir": str(data),
        "template": "qwen",
        "cutoff_len": 1024,
        "per_device_train_batch_size": 4,
        "max_steps": 3,
        "learning_rate": 1.0e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "overwrite_cache": True,
        "preprocessing_num_workers": 1,
        "output_dir": str(out),
        "overwrite_output_dir": True,
        "ignore_observation": True,
        "seed": 0,
        "cache_dir": str(out.parent / "hf-cache"),
    }
    cfg.update(overrides)
    return cfg


def run_afm_sft(args: list[str], env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``afm-sft`` in a subprocess, as a user would (venv's bin first on PATH for torchrun)."""
    full_env = dict(os.environ)
    full_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{full_env.get('PATH', '')}"
    full_env.setdefault("HF_HUB_OFFLINE", "1")
    full_env.update(env or {})
    exe = shutil.which("afm-sft", path=full_env["PATH"])
    cmd = [exe] if exe else [sys.executable, "-m", "afm.sft.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=REPO)


def tiny_qwen2_lm():
    """A random 2-layer Qwen2 causal LM (vocabulary 97, 32 wide, grouped key/value heads) for loss-equality tests."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return Qwen2ForCausalLM(cfg)


def prefix_rows(seed: int, width: int, prefix: int, pad_from: int) -> dict[str, Any]:
    """Three right-padded rows of tiny_*_lm ids that share their first ``prefix`` tokens (untrained, with the one
    after), the last row padded from ``pad_from``: a training micro-batch for the attention and prefix tests."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 97, (3, width), generator=g)
    ids[:, :prefix] = ids[0, :prefix]
    attention = torch.ones_like(ids)
    attention[2, pad_from:] = 0
    labels = ids.clone()
    labels[:, :prefix + 1] = -100
    labels[attention == 0] = -100
    return {"input_ids": ids, "attention_mask": attention, "labels": labels}


def tiny_gemma3_lm():
    """A random 2-layer Gemma 3 causal LM: soft-capped logits (an element-wise op after the head) and a sliding
    window of 8 on its local layers."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                           final_logit_softcapping=5.0, sliding_window=8)
    return Gemma3ForCausalLM(cfg)
