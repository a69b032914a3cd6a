"""SFT on two torchrun "nodes" on this machine, launched as a user launches a multi-node run: the same
sft_scripts/ script started once per node with NNODES=2, NODE_RANK (or a scheduler's RANK), MASTER_ADDR and
MASTER_PORT; the tiny model, observation masking, gloo, one process per node (CPU).

What each rank trained on and ended with comes from afm's per-rank trace (AFM_SFT_TRACE_DIR, afm/sft/trace.py):
* the two nodes trained on disjoint shards that together are the masked dataset, every sample once per epoch;
* both ranks end with the same weights, and the saved model is exactly those weights;
* the mask report (written once, by rank 0) counts every sample once: its trained tokens are what both ranks
  trained;
* RANK instead of NODE_RANK forms the same world and trains the same model;
* a node that never joins, a node with another afm, a rank killed mid-step, and a rank that hangs mid-step
  (HANG_TIMEOUT, afm's watchdog) stop every node within a bounded time with one clear line.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import lf_config

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "sft_scripts" / "code_agent" / "sft_qwen2.5_7b.sh"
STEPS = 3  # 24 kept samples / (2 nodes x batch 4) = 3 steps: exactly one epoch
JOIN_TIMEOUT = 20


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tiny_model: Path, demo_data: Path, out: Path, port: int, rank: dict[str, str], **extra: str) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("RANK", "NODE_RANK", "LOCAL_RANK",
                                                                          "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", AFM_SFT=f"{sys.executable} -m afm.sft.cli",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        MODEL_PATH=str(tiny_model), DATASET_DIR=str(demo_data), DATASET="afm_demo_sft", OUTPUT_DIR=str(out),
        PRECISION="fp32", DEEPSPEED_CONFIG="", CUTOFF_LEN="1024", PREPROCESSING_NUM_WORKERS="1", BATCH_SIZE="4",
        GRADIENT_ACCUMULATION="1", CUDA_VISIBLE_DEVICES="", SAVE_STRATEGY="no", LOGGING_STEPS="1",
        NNODES="2", NPROC_PER_NODE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
        JOIN_TIMEOUT=str(JOIN_TIMEOUT), AFM_SFT_TRACE_DIR=str(out / "trace"), OMP_NUM_THREADS="1",
        EXTRA_ARGS=f"--max_steps {STEPS} --ddp_backend gloo --learning_rate 1e-3 --seed 0 --overwrite_output_dir true "
                   f"--cache_dir {out.parent / 'hf-cache'}",
    )
    env.update(rank)
    env.update(extra)
    return env


def _start(env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(["bash", str(SCRIPT)], env=env, cwd=log.parent, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _finish(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    """Exit statuses; anything still running at the deadline is killed, with its descendants (torchrun starts its
    workers in sessions of their own): a hang fails the test, never blocks it or outlives it."""
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                for pid in [p.pid, *_descendants(p.pid)]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                p.wait(timeout=30)


def _two_nodes(tiny_model, demo_data, out: Path, rank_var: str, timeout: float = 600, **extra: str) -> list[str]:
    port = _port()
    logs = [out.parent / f"{out.name}.node{r}.log" for r in (0, 1)]
    procs = [_start(_env(tiny_model, demo_data, out, port, {rank_var: str(r)}, **extra), logs[r]) for r in (0, 1)]
    codes = _finish(procs, timeout)
    texts = [log.read_text(errors="replace") for log in logs]
    assert codes == [0, 0], "\n".join(t[-3000:] for t in texts)
    return texts


def _trace(out: Path, rank: int) -> list[dict]:
    return [json.loads(line) for line in (out / "trace" / f"sft_rank{rank}.jsonl").read_text().splitlines()]


def _saved_weights(out: Path) -> str:
    from transformers import AutoModelForCausalLM

    from afm.sft.trace import weights_digest

    return weights_digest(AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32))


def _dataset_rows(tiny_model, demo_data, tmp_path) -> collections.Counter:
    """The rows LLaMA-Factory builds from this data (afm-sft mask-report's pipeline), by digest."""
    from afm.sft.report import preprocess
    from afm.sft.trace import row_digest

    cfg = lf_config(tiny_model, demo_data, tmp_path / "reference")
    rows = preprocess(cfg).dataset_module["train_dataset"]
    return collections.Counter(row_digest(row["input_ids"]) for row in rows)


@pytest.fixture(scope="module")
def node_rank_run(tiny_model, demo_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft2") / "out"
    return out, _two_nodes(tiny_model, demo_data, out, "NODE_RANK")


def test_two_nodes_train_disjoint_shards_of_the_masked_data(node_rank_run, tiny_model, demo_data, tmp_path):
    out, logs = node_rank_run
    assert "Multi-node training enabled: num nodes: 2, node rank: 1" in logs[1]
    assert "process rank: 1, world size: 2" in logs[1].lower()
    assert "warning: NNODES=2 but MASTER_ADDR" not in logs[0]  # given on purpose: no warning
    batches = {r: [e for e in _trace(out, r) if e["event"] == "batch"] for r in (0, 1)}
    assert [b["step"] for b in batches[0]] == [b["step"] for b in batches[1]] == list(range(STEPS))
    for step in range(STEPS):  # each step, the two nodes hold different samples
        assert sorted(batches[0][step]["rows"]) != sorted(batches[1][step]["rows"])
    # Together, one epoch: every row of the masked dataset exactly as often as the dataset holds it (two of its
    # samples are the same text twice), which also says the shards are disjoint.
    trained = collections.Counter(row for r in (0, 1) for b in batches[r] for row in b["rows"])
    assert trained == _dataset_rows(tiny_model, demo_data, tmp_path)
    # the mask report (rank 0's) counts every sample once: its trained tokens are the labels both ranks trained
    report = json.loads((out / "afm_mask_report_train.json").read_text())
    assert report["samples_kept"] == sum(trained.values())
    assert report["tokens_trained"] == sum(b["trained_labels"] for r in (0, 1) for b in batches[r])


def test_the_saved_model_is_what_both_ranks_hold(node_rank_run, tiny_model):
    out, _ = node_rank_run
    from transformers import AutoModelForCausalLM

    from afm.sft.trace import weights_digest

    ends = [[e for e in _trace(out, r) if e["event"] == "end"] for r in (0, 1)]
    assert [len(e) for e in ends] == [1, 1] and ends[0][0]["step"] == ends[1][0]["step"] == STEPS
    assert ends[0][0]["weights"] == ends[1][0]["weights"]
    assert _saved_weights(out) == ends[0][0]["weights"]
    start = weights_digest(AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32))
    assert start != ends[0][0]["weights"]  # it trained
    assert (out / "training.log").exists() and (out / "training.node1.log").exists()


def test_rank_from_the_scheduler_forms_the_same_world(node_rank_run, tiny_model, demo_data, tmp_path):
    """RANK (what schedulers export per node) instead of NODE_RANK: the same world, the same trained model."""
    out_node_rank, _ = node_rank_run
    out = tmp_path / "rank"
    logs = _two_nodes(tiny_model, demo_data, out, "RANK")
    assert "node_rank=1" in logs[1] and "process rank: 1, world size: 2" in logs[1].lower()
    assert _saved_weights(out) == _saved_weights(out_node_rank)


def test_a_node_that_never_joins_stops_with_one_line(tiny_model, demo_data, tmp_path):
    """Node 0 alone, and node 1 alone (against a port nobody serves): each stops after JOIN_TIMEOUT with one line."""
    logs = [tmp_path / "alone0.log", tmp_path / "alone1.log"]
    wait = 10  # nothing will join: the shortest wait
    procs = [_start(_env(tiny_model, demo_data, tmp_path / f"alone{r}", _port(), {"NODE_RANK": str(r)},
                         JOIN_TIMEOUT=str(wait)), logs[r]) for r in (0, 1)]
    codes = _finish(procs, timeout=wait * 3 + 240)
    texts = [log.read_text(errors="replace") for log in logs]
    assert all(code != 0 for code in codes), codes
    errors = [[line for line in t.splitlines() if line.startswith("[afm] error:")] for t in texts]
    assert len(errors[0]) == 1 and "only 1 of 2 nodes joined the rendezvous at 127.0.0.1:" in errors[0][0], texts[0]
    assert len(errors[1]) == 1 and "node 1: node 0 was not reachable at 127.0.0.1:" in errors[1][0], texts[1]
    assert all(f"within JOIN_TIMEOUT={wait} s" in e[0] for e in errors)


def test_a_rank_killed_mid_step_stops_both_nodes_with_one_line(tiny_model, demo_data, tmp_path):
    out = tmp_path / "killed"
    port = _port()
    logs = [tmp_path / f"killed{r}.log" for r in (0, 1)]
    extra = {"EXTRA_ARGS": "--max_steps 1000 --ddp_backend gloo --seed 0 --overwrite_output_dir true"}
    procs = [_start(_env(tiny_model, demo_data, out, port, {"NODE_RANK": str(r)}, **extra), logs[r]) for r in (0, 1)]
    trace = out / "trace" / "sft_rank1.jsonl"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        if trace.exists() and len(trace.read_text().splitlines()) >= 2:  # training is under way on both nodes
            break
        time.sleep(0.5)
    worker = _rank_process(procs[1].pid, rank="1")
    assert worker is not None, logs[1].read_text(errors="replace")[-3000:]
    os.kill(worker, signal.SIGKILL)
    codes = _finish(procs, timeout=300)
    texts = [log.read_text(errors="replace") for log in logs]
    assert codes[0] != 0 and codes[1] != 0, codes
    errors = [[line for line in t.splitlines() if line.startswith("[afm] error:")] for t in texts]
    assert len(errors[1]) == 1 and "node 1: rank 1 was killed by SIGKILL" in errors[1][0], texts[1][-3000:]
    assert len(errors[0]) == 1 and "node 0: a rank on another node died" in errors[0][0], texts[0][-3000:]


# The hang: a test-only sitecustomize makes rank 1 stop before its step-2 forward pass (as a stuck read or a deadlock
# would), inside transformers' own Trainer.compute_loss - nothing of afm is replaced. Rank 0 then waits inside its
# own forward (DDP syncs buffers there), at the same point of the step: the watchdog tells them apart by where each
# training thread is.
HANG_SITE = """
import os


def _hang():
    try:
        argv = open("/proc/self/cmdline", "rb").read().split(b"\\0")
    except OSError:
        return
    if not any(a.endswith(b"afm/sft/launcher.py") for a in argv) or os.environ.get("RANK") != "1":
        return
    import time

    from transformers import Trainer

    loss = Trainer.compute_loss

    def compute_loss(self, *args, **kwargs):
        if self.state.global_step == 1 and self.model.training:
            time.sleep(3600)
        return loss(self, *args, **kwargs)

    Trainer.compute_loss = compute_loss


_hang()
"""


def test_a_rank_that_hangs_mid_step_stops_both_nodes_with_one_line(tiny_model, demo_data, tmp_path):
    """Rank 1 (node 1) never starts its step-2 forward pass: after HANG_TIMEOUT both nodes stop, each with one line
    naming rank 1, what it was doing and what to check - not after DDP_TIMEOUT (years)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HANG_SITE)
    out, port, hang = tmp_path / "hung", _port(), 20
    logs = [tmp_path / f"hung{r}.log" for r in (0, 1)]
    extra = {"EXTRA_ARGS": "--max_steps 1000 --ddp_backend gloo --seed 0 --overwrite_output_dir true",
             "HANG_TIMEOUT": str(hang), "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [_start(_env(tiny_model, demo_data, out, port, {"NODE_RANK": str(r)}, **extra), logs[r]) for r in (0, 1)]
    codes = _finish(procs, timeout=600)  # the start (both nodes load and preprocess) + HANG_TIMEOUT, with headroom
    texts = [log.read_text(errors="replace") for log in logs]
    assert codes[0] != 0 and codes[1] != 0, codes
    errors = [[line for line in t.splitlines() if line.startswith("[afm] error:")] for t in texts]
    for node in (0, 1):
        assert len(errors[node]) == 1, texts[node][-3000:]
        line = errors[node][0]
        assert f"[afm] error: node {node}: rank 1 (node 1, " in line, line
        assert "made no progress for" in line and "in the forward pass of step 2, at " in line
        assert "sitecustomize.py:" in line and "in compute_loss, while 1 other rank(s) wait in the forward pass of " \
            "step 2 (in a collective)" in line
        assert f"(HANG_TIMEOUT={hang} s): check that process and its device" in line
    # rank 1 trained step 1, got its step-2 batch (afm's trace records it before the loss) and never finished
    assert [(e["event"], e["step"]) for e in _trace(out, 1)] == [("batch", 0), ("batch", 1)]


def _descendants(root: int) -> list[int]:
    """Every process below ``root``, followed by parent id (torchrun's workers are in sessions of their own)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[ppid].append(int(entry.name))
    found, todo = [], list(children[root])
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children[pid]
    return found


# Another checkout on node 1: a test-only sitecustomize gives that node's training process another afm version.
OTHER_AFM_SITE = """
import os

if os.environ.get("RANK") == "1":
    import afm

    afm.__version__ = "0.0.0-other"
"""


def test_a_node_with_another_afm_stops_both_nodes_with_one_line(tiny_model, demo_data, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(OTHER_AFM_SITE)
    out, port = tmp_path / "other", _port()
    logs = [tmp_path / f"other{r}.log" for r in (0, 1)]
    node1 = {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [_start(_env(tiny_model, demo_data, out, port, {"NODE_RANK": str(r)}, **(node1 if r else {})), logs[r])
             for r in (0, 1)]
    codes = _finish(procs, timeout=300)
    texts = [log.read_text(errors="replace") for log in logs]
    assert codes[0] != 0 and codes[1] != 0, codes
    import afm

    for node in (0, 1):
        errors = [line for line in texts[node].splitlines() if line.startswith("[afm] error:")]
        assert len(errors) == 1, texts[node][-3000:]
        assert f"[afm] error: node {node}: rank 1 (node 1, " in errors[0]
        assert f"runs afm 0.0.0-other, rank 0 (node 0, {socket.gethostname()}) afm {afm.__version__}: install the " \
               "same afm" in errors[0]
    assert not (out / "trace").exists()  # stopped before training


def _rank_process(root: int, rank: str) -> int | None:
    """The training process of global rank ``rank`` among the descendants of one node's script."""
    for pid in _descendants(root):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"afm/sft/launcher.py") for arg in cmdline) and f"RANK={rank}".encode() in environ:
            return pid
    return None


@pytest.mark.skipif(shutil.which("g++") is None, reason="DeepSpeed builds its CPU communication op with g++")
def test_zero3_on_two_cpu_nodes(node_rank_run, tiny_model, demo_data, tmp_path):
    """DeepSpeed ZeRO-3 (the scripts' default config) on two CPU nodes where the deepspeed extra is installed
    (DeepSpeed picks its CPU accelerator): the losses and the model rank 0 gathers and saves are plain DDP's."""
    pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed (pip install -e '.[deepspeed]')")
    from transformers import AutoModelForCausalLM

    out_ddp, _ = node_rank_run
    out = tmp_path / "zero3"
    logs = _two_nodes(tiny_model, demo_data, out, "NODE_RANK",
                      DEEPSPEED_CONFIG=str(REPO / "configs" / "deepspeed" / "ds_z3_config.json"))
    assert "Detected DeepSpeed ZeRO-3" in logs[0]

    def losses(path: Path) -> list[float]:
        history = json.loads((path / "trainer_state.json").read_text())["log_history"]
        return [h["loss"] for h in history if "loss" in h]

    assert losses(out) == pytest.approx(losses(out_ddp), rel=1e-4)
    zero3, ddp = (AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).state_dict() for p in (out, out_ddp))
    assert zero3.keys() == ddp.keys()
    for name, tensor in ddp.items():
        torch.testing.assert_close(zero3[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
