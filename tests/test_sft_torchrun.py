"""``afm-sft train`` under FORCE_TORCHRUN starts torchrun itself (afm/sft/torchrun.py), with LLaMA-Factory's flags,
without importing the training stack. The real multi-rank runs: tests/test_sft_runs.py (two ranks),
tests/test_sft_two_nodes.py, tests/test_sft_scripts.py (DPO with torchrun)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from afm.sft.torchrun import LAUNCHER, torchrun_plan

REPO = Path(__file__).resolve().parents[1]
BASE = {"FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2", "PATH": os.environ.get("PATH", "")}


def test_only_an_environment_that_fixes_the_start_bypasses_llamafactory():
    assert torchrun_plan(["c.yaml"], {"NPROC_PER_NODE": "2"}) is None  # LLaMA-Factory decides (device count)
    assert torchrun_plan(["c.yaml"], {**BASE, "FORCE_TORCHRUN": "0"}) is None
    assert torchrun_plan(["c.yaml"], {"FORCE_TORCHRUN": "1"}) is None  # the devices must be counted: torch
    assert torchrun_plan(["c.yaml"], {**BASE, "NPROC_PER_NODE": "auto"}) is None
    assert torchrun_plan(["c.yaml"], {**BASE, "USE_MCA": "1"}) is None  # Megatron's own path
    for value in ("1", "true", "TRUE", "y"):
        assert torchrun_plan(["c.yaml"], {**BASE, "FORCE_TORCHRUN": value}) is not None


def test_static_rendezvous_command_and_environment():
    env = {**BASE, "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    plan = torchrun_plan(["c.yaml", "--run_name", "a b"], env)
    assert plan is not None
    assert plan.command[1:] == ["--nnodes", "2", "--node_rank", "1", "--nproc_per_node", "2",
                                "--master_addr", "10.0.0.1", "--master_port", "29500", LAUNCHER,
                                "c.yaml", "--run_name", "a b"]  # a value with a space stays one argument
    assert Path(plan.command[0]).name == "torchrun"
    assert plan.env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert plan.env["TORCH_NCCL_AVOID_RECORD_STREAMS"] == "1" and plan.env["NODE_RANK"] == "1"
    assert "2 distributed tasks at: 10.0.0.1:29500" in plan.banner
    assert "Multi-node training enabled: num nodes: 2, node rank: 1" in plan.banner  # LLaMA-Factory's words
    off = torchrun_plan(["c.yaml"], {**env, "OPTIM_TORCH": "0"})
    assert off is not None and "PYTORCH_CUDA_ALLOC_CONF" not in off.env


def test_defaults_and_the_elastic_rendezvous():
    plan = torchrun_plan(["c.yaml"], BASE)
    assert plan is not None
    flags = dict(zip(plan.command[1:-2:2], plan.command[2:-2:2], strict=True))
    assert flags["--nnodes"] == "1" and flags["--node_rank"] == "0" and flags["--master_addr"] == "127.0.0.1"
    assert 0 < int(flags["--master_port"]) < 65536  # a free port, as LLaMA-Factory picks one
    elastic = torchrun_plan(["c.yaml"], {**BASE, "RDZV_ID": "job7", "MIN_NNODES": "1", "MAX_NNODES": "4",
                                         "MASTER_ADDR": "h0", "MASTER_PORT": "29400", "MAX_RESTARTS": "3"})
    assert elastic is not None
    assert elastic.command[1:-2] == ["--nnodes", "1:4", "--nproc-per-node", "2", "--rdzv-id", "job7",
                                     "--rdzv-backend", "c10d", "--rdzv-endpoint", "h0:29400", "--max-restarts", "3"]


FAKE_TORCHRUN = """#!{python}
import json, os, sys
with open(os.environ["FAKE_TORCHRUN_OUT"], "w") as f:
    json.dump({{"argv": sys.argv[1:], "nccl": os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS")}}, f)
sys.exit(3)
"""


def test_afm_sft_starts_torchrun_without_importing_the_training_stack(tmp_path):
    """The process that only waits for torchrun imports neither torch nor transformers nor LLaMA-Factory, hands
    the arguments on unchanged and exits with torchrun's status (a fake torchrun stands in for the ranks)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "torchrun"
    fake.write_text(FAKE_TORCHRUN.format(python=sys.executable))
    fake.chmod(0o755)
    out = tmp_path / "torchrun.json"
    env = {**os.environ, "FORCE_TORCHRUN": "1", "NPROC_PER_NODE": "2", "MASTER_PORT": "29533",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "FAKE_TORCHRUN_OUT": str(out)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "afm.sft.cli", "train",
                           "--model_name_or_path", "m", "--run_name", "two words"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    assert "[afm-sft] Initializing 2 distributed tasks at: 127.0.0.1:29533" in proc.stdout
    seen = json.loads(out.read_text())
    assert seen["argv"][-5:] == [LAUNCHER, "--model_name_or_path", "m", "--run_name", "two words"]
    assert seen["nccl"] == "1"
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    assert imported and not imported & {"torch", "transformers", "peft", "llamafactory", "datasets"}, \
        sorted(imported & {"torch", "transformers", "peft", "llamafactory", "datasets"})
