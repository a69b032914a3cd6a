"""Two DAPO steps of the toy code agent through verl's real ``main_ppo`` on the CPU, launched the way a user does
(``bash experiments/train_dapo_code_agent.sh --local``): the hf rollout, ``afm_agent`` with the nsjail code tool,
``compute_score`` through verl's dapo reward manager, DAPO's group filter, checkpoints, and a resume after the run
is killed following step 1.

What is checked, from the run's own outputs (the console metrics, verl's rollout dump, afm's traces of trajectories
and of the weights the rollout server holds, and the checkpoints):
* every trajectory's mask is 0 exactly on the observation tokens, which decode to the code tool's observations;
* the rewards are compute_score's (Math-Verify on the boxed answer), and the group filter dropped uniform groups;
* the actor's weights changed, and after each step the rollout server's weights equal the checkpoint's;
* the log-probability of a fixed response moved between the starting policy and the step-2 policy;
* the run killed after step 1 resumes at step 2.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from resumed_run import killed_then_resumed

from afm.common.ray_scope import private_ray_tmpdir, stop_ray_in
from afm.rl.local.hf_engine import weights_checksum
from afm.trajectory import format_observation

REPO = Path(__file__).resolve().parents[2]
OBS_OPEN, OBS_CLOSE = "\n\n<observation>\n", "\n</observation>\n\n"
SCRIPT = REPO / "experiments" / "train_dapo_code_agent.sh"


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(AFM_LOCAL_DIR=str(work / "toy"), CKPT_DIR=str(work / "ckpt"), AFM_RL_TRACE_DIR=str(work / "trace"),
               ROLLOUT_DATA_DIR=str(work / "rollouts"), TOTAL_TRAINING_STEPS="2", SAVE_FREQ="1",
               PYTHON=str(Path(os.sys.executable)), RAY_DEDUP_LOGS="0", RAY_TMPDIR=str(RAY_TMP))
    # LR: --local's own (1e-4). At 1e-3 one step broke the toy policy (after step 1, 85 of 92 MIX rollouts wrote
    # neither program) and the group filter's capped refills found no mixed group in step 2 (TooManyFilteredGroups)
    for key in ("RAY_ADDRESS", "VERL_PLATFORM", "VERL_ENGINE_DEVICE"):
        env.pop(key, None)
    return env


RAY_TMP = private_ray_tmpdir()  # this module's runs' own Ray folder: stopping it ends no other cluster


def _stop_ray() -> None:
    stop_ray_in(RAY_TMP, remove=False)


def _steps(log: Path) -> list[dict[str, str]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"step:(\d+) - (.*)", line)
        if m:
            metrics = dict(kv.split(":", 1) for kv in m.group(2).split(" - ") if ":" in kv)
            out.append({"step": m.group(1), **metrics})
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("rl_local")
    os.chmod(work, 0o755)
    # A third of the questions are WRONG (gold 43: every group all-0), so the 8+ prompts two steps draw without
    # replacement from 12 include one with near certainty (1 - 1/495) and DAPO's filter has groups to drop.
    from afm.rl.local.toy import write_parquet

    write_parquet(work / "toy" / "toy_train.parquet", counts={"RIGHT": 2, "WRONG": 4, "MIX": 6})
    # the first run is killed (the whole process group, Ray included) once step 1's checkpoint is complete; the same
    # command again continues from global_step_1 (resume_mode=auto)
    log1, log2 = killed_then_resumed(_env(work), work, _stop_ray)
    return work, log1, log2


def _traces(work: Path, name: str) -> list[dict]:
    return [json.loads(line) for p in sorted((work / "trace").glob(f"{name}.*.jsonl"))
            for line in p.read_text().splitlines()]


def test_resumes_at_step_2_and_writes_checkpoints(run):
    work, log1, log2 = run
    # The kill lands as soon as step 1's checkpoint is complete, possibly before its metrics line is printed.
    assert [s["step"] for s in _steps(log1)] in ([], ["1"])
    assert [s["step"] for s in _steps(log2)] == ["2"]  # step 1 is not redone
    for step in (1, 2):
        actor = work / "ckpt" / f"global_step_{step}" / "actor"
        assert any(actor.glob("model_world_size_1_rank_0.pt")), sorted(actor.iterdir())
        assert (actor / "huggingface" / "model.safetensors").exists()
    assert (work / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"


def test_the_workers_were_forked_from_the_zygote(run):
    """WORKER_ZYGOTE=auto on the CPU (afm/rl/local/zygote.py): the resumed run's workers (the task runner, the FSDP
    worker, the rollout server, the agent-loop and reward workers, the transfer queue's) were forks of one process
    that had imported torch and transformers, and none was refused (a refusal says why in the train log)."""
    work, log1, log2 = run
    zygote_log = (work / "ckpt" / "worker_zygote.log").read_text()
    forked = [int(m) for m in re.findall(r"(\d+) workers forked", zygote_log)]
    assert forked and forked[-1] >= 5, zygote_log
    for log in (log1, log2):
        text = log.read_text(errors="replace")
        assert "WORKER_ZYGOTE=auto" in text and "[afm] worker zygote:" not in text


def test_observations_are_masked_exactly(run):
    work, _, _ = run
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(work / "toy" / "toy_policy")
    records = _traces(work, "afm_agent")
    assert len(records) >= 2 * 4 * 4  # two steps of 4 prompts x 4 rollouts at least
    ran: dict[int, list[bool]] = {}  # step -> whether each rollout ran a program in the sandbox
    for r in records:
        ids, mask = r["response_ids"], r["response_mask"]
        assert len(ids) == len(mask) and set(mask) <= {0, 1}
        spans, start = [], None
        for i, m in enumerate([*mask, 1]):
            if m == 0 and start is None:
                start = i
            elif m == 1 and start is not None:
                spans.append(tok.decode(ids[start:i]))
                start = None
        # The masked spans are exactly the observation segments, each the engine's wrapper around a tool's text.
        assert spans == r["observations"]
        for obs in spans:
            inner = obs.removeprefix(OBS_OPEN).removesuffix(OBS_CLOSE)
            assert obs == format_observation(inner) and obs != inner
        ran.setdefault(r["global_steps"], []).append(any("Code exited with status" in o for o in spans))
    # The toy policy as built calls the tool in ~80% of its first step's rollouts (32 of 40 measured); one update
    # (at LR 1e-3 it left it calling in 22 of 42, 46 of 98 over both steps in CI) may change that, so the bar is on
    # the first step, where it tests the masking rather than the policy's drift.
    first = ran[min(ran)]
    assert sum(first) >= len(first) // 2, {step: (sum(v), len(v)) for step, v in ran.items()}


def test_rewards_are_compute_scores_and_groups_are_filtered(run):
    work, log1, log2 = run
    from transformers import AutoTokenizer

    from afm.rewards import compute_score
    from afm.rl.local.toy import DATA_SOURCE

    tok = AutoTokenizer.from_pretrained(work / "toy" / "toy_policy")
    dumps = [json.loads(line) for p in sorted((work / "rollouts").glob("*.jsonl")) for line in p.read_text().splitlines()]
    assert {d["step"] for d in dumps} >= {2}, "verl wrote no rollout dump"
    exact = 0
    for d in dumps:
        result = compute_score(DATA_SOURCE, d["output"], d["gts"])
        ours, d["_acc"] = result["score"], result["acc"]
        # dapo's overlong penalty (factor 1.0) applies past 128 - 16 response tokens and only lowers the reward;
        # below that the reward is ours alone. Re-encoding the text may not give the sampled token count, hence 100.
        assert ours - 1.0 - 1e-6 <= d["score"] <= ours + 1e-6, d["output"]
        if "overlong_reward" in d:
            assert d["score"] == pytest.approx(ours + d["overlong_reward"]), d["output"]
        if len(tok.encode(d["output"], add_special_tokens=False)) <= 100:
            assert d["score"] == ours, d["output"]
            exact += 1
    assert exact >= 1
    scores = [d["score"] for d in dumps]
    assert min(scores) < 0.5 < max(scores)
    metrics = _steps(log1) + _steps(log2)
    assert all(float(m["actor/pg_loss"]) != 0 for m in metrics)  # the kept groups carry signal
    # DAPO's filter (FILTER_METRIC=acc): every kept group has mixed answers (acc, not the score: an overlong right
    # answer scores below 0.5); the WRONG questions (always all-0) were generated and dropped: none reaches the
    # trainer.
    groups: dict[tuple[int, str], list[bool]] = {}
    for d in dumps:
        groups.setdefault((d["step"], d["uid"].rsplit("_", 2)[0]), []).append(d["_acc"] > 0.5)
    assert groups and all(len(set(v)) == 2 for v in groups.values())
    generated = [tok.decode(r["prompt_ids"]) for r in _traces(work, "afm_agent")]
    assert any("WRONG" in p for p in generated)
    assert not any("WRONG" in d["input"] for d in dumps)


def test_weights_move_and_reach_the_rollout(run):
    work, _, _ = run
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def load(path: Path):
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    start = load(work / "toy" / "toy_policy")
    steps = {k: load(work / "ckpt" / f"global_step_{k}" / "actor" / "huggingface") for k in (1, 2)}
    sums = {0: weights_checksum(start), **{k: weights_checksum(m) for k, m in steps.items()}}
    assert len(set(sums.values())) == 3  # every step changed the actor
    events = _traces(work, "hf_rollout")
    assert [e["checksum"] for e in events if e["event"] == "launch"] == [sums[0], sums[0]]  # both runs' servers
    runs: list[list[tuple[int, str]]] = []  # each launch's pushes, in order
    for e in events:
        if e["event"] == "launch":
            runs.append([])
        elif e["event"] == "weights":
            runs[-1].append((e["global_steps"], e["checksum"]))
    # Each push after step k (and the push of the resumed step-1 actor) is exactly that step's checkpoint. The first
    # run is killed as soon as step 1's checkpoint is complete: verl pushes the step's weights after saving them, so
    # on a busy machine the kill can land before that push (the whole suite on a fresh clone, 2026-11-30).
    assert runs[0] in ([(0, sums[0])], [(0, sums[0]), (1, sums[1])]), runs[0]
    assert runs[1] == [(1, sums[1]), (2, sums[2])], runs[1]

    tok = AutoTokenizer.from_pretrained(work / "toy" / "toy_policy")
    fixed = tok.encode("<think>use the tool</think>\n<code>\n```py\nprint(6*7)\n```\n</code>", add_special_tokens=False)
    prompt = tok.apply_chat_template([{"role": "user", "content": "MIX 0: compute 6*7."}], add_generation_prompt=True,
                                     tokenize=False)
    ids = torch.tensor([tok.encode(prompt, add_special_tokens=False) + fixed])

    def logprob(model) -> float:
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
        tgt = ids[0, 1:]
        return float(lp[torch.arange(len(tgt)), tgt][-len(fixed):].sum())

    assert abs(logprob(steps[2]) - logprob(start)) > 1e-3


def test_one_step_off_policy_async_trainer(tmp_path, run):
    """TRAINER_MODE=colocate_async (verl's one-step off-policy trainer) with the same local backend: 2 steps, the
    second trained partly on samples generated before the first update, and every push reaches the rollout."""
    work = tmp_path
    os.chmod(work, 0o755)
    # the toy task and the starting policy of the synchronous runs (built once: --local keeps what it finds)
    shutil.copytree(run[0] / "toy", work / "toy")
    assert (work / "toy" / "toy_policy" / "afm_toy_policy.json").exists()
    env = _env(work)
    env.update(TRAINER_MODE="colocate_async", SAVE_FREQ="-1", SAVE_HF_MODEL="false")
    log = work / "async.log"
    _stop_ray()
    try:
        res = subprocess.run(["bash", str(SCRIPT), "--local"], cwd=REPO, env=env, stdout=log.open("w"),
                             stderr=subprocess.STDOUT, timeout=600, start_new_session=True)
    finally:
        _stop_ray()
    text = log.read_text(errors="replace")
    assert res.returncode == 0, text[-4000:]
    assert "trainer.v1.trainer_mode=colocate_async" in text
    steps = _steps(log)
    assert [s["step"] for s in steps] == ["1", "2"]
    assert all("training/off_policy/trajectory_staleness/mean" in s for s in steps)
    pushes = [e["global_steps"] for e in _traces(work, "hf_rollout") if e["event"] == "weights"]
    assert pushes[:1] == [0] and 1 in pushes
    assert all(float(s["actor/pg_loss"]) != 0 for s in steps)
