"""afm's reward entry inside verl's reward loop: the config the DAPO scripts print is composed, verl's own
RewardLoopWorker (the class verl runs as a Ray actor, built here without Ray) loads ``reward.custom_reward_function``
through ``get_custom_reward_fn`` and the configured manager (naive, dapo with overlong buffer, rate_limited), and
scores DataProto batches built with the tiny tokenizer, exactly."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import verl
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

ROOT = Path(__file__).resolve().parents[2]
VERL_CONFIG = Path(verl.__file__).parent / "trainer" / "config"
PROMPT = "Question: who wrote frankenstein?"


def script_config(task: str, **env: str):
    """The config of `experiments/train_dapo_<task>_agent.sh --dry-run` with ``env`` knobs, composed by Hydra."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("REWARD_", "OVERLONG_", "MAX_"))}
    full.update(env)
    res = subprocess.run(["bash", str(ROOT / f"experiments/train_dapo_{task}_agent.sh"), "--dry-run"],
                         capture_output=True, text=True, env=full, timeout=60, check=True)
    overrides = shlex.split(res.stdout.split("[afm] command:\n", 1)[1].replace("\\\n", " "))[3:]
    with initialize_config_dir(config_dir=str(VERL_CONFIG), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def batch(tokenizer, samples: list[dict], response_length: int) -> DataProto:
    """A right-padded DataProto like the agent loop's output: prompts | responses, attention over both."""
    prompt_ids = tokenizer.encode(PROMPT)
    n = len(samples)
    prompts = torch.tensor([prompt_ids] * n)
    responses = torch.full((n, response_length), tokenizer.pad_token_id or 0, dtype=torch.long)
    mask = torch.zeros((n, len(prompt_ids) + response_length), dtype=torch.long)
    mask[:, : len(prompt_ids)] = 1
    for i, s in enumerate(samples):
        ids = s["ids"] if "ids" in s else tokenizer.encode(s["response"])
        assert len(ids) <= response_length
        responses[i, : len(ids)] = torch.tensor(ids)
        mask[i, len(prompt_ids): len(prompt_ids) + len(ids)] = 1
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": mask,
                 "input_ids": torch.cat([prompts, responses], dim=1)},
        non_tensors={
            "data_source": np.array([s["data_source"] for s in samples], dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": s["gt"]} for s in samples], dtype=object),
            "extra_info": np.array([{"question": "q", "index": f"i{k}"} for k in range(n)], dtype=object),
        },
    )


def score_all(cfg, data: DataProto) -> list[dict]:
    """Like the Ray actor: one event loop, current while the worker (and its manager) is built and while it runs."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        worker = RewardLoopWorker(cfg)
        return loop.run_until_complete(worker.compute_score_batch(data))
    finally:
        asyncio.set_event_loop(None)
        loop.close()


SAMPLES = [
    # QA (EM against any alias of a JSON-list ground truth, as afm data rl stores it)
    {"data_source": "nq", "response": "<think>easy</think>\n<answer>Mary Shelley</answer>",
     "gt": '["Mary Wollstonecraft Shelley", "Mary Shelley"]', "acc": 1.0},
    {"data_source": "nq", "response": "<think>guess</think>\n<answer>Bram Stoker</answer>",
     "gt": '["Mary Shelley"]', "acc": 0.0},
    # math (Math-Verify on the last <answer>)
    {"data_source": "aime24", "response": "<think>6*7</think>\n<answer>\\boxed{42}</answer>", "gt": "42",
     "acc": 1.0},
    {"data_source": "aime24", "response": "<answer>\\boxed{41}</answer>", "gt": "42", "acc": 0.0},
]


@pytest.mark.parametrize(("manager", "fn"), [("naive", "compute_score"), ("naive", "compute_score_async"),
                                             ("dapo", "compute_score"), ("rate_limited", "compute_score_async")])
def test_managers_call_afm_compute_score(tiny_model, tokenizer, manager, fn):
    cfg = script_config("mhqa", MODEL_PATH=str(tiny_model), REWARD_MANAGER=manager, REWARD_FN=fn,
                        MAX_RESPONSE_LENGTH="64")
    assert cfg.reward.custom_reward_function.path == str(ROOT / "afm/rewards/score.py")
    out = score_all(cfg, batch(tokenizer, SAMPLES, response_length=64))
    assert [o["reward_score"] for o in out] == [s["acc"] for s in SAMPLES]
    for o, s in zip(out, SAMPLES, strict=True):
        info = o["reward_extra_info"]
        assert info["acc"] == s["acc"] and info["score"] == s["acc"]
        assert info["data_source"] in ("nq", "aime24")
        assert info["method"] in ("em", "math_verify")
        if manager == "dapo":  # short responses: no overlong penalty, and it is logged
            assert info["overlong_reward"] == 0 and not info["overlong"]
    assert out[0]["reward_extra_info"]["pred"] == "Mary Shelley"


def test_dapo_overlong_buffer_penalty_exact(tiny_model, tokenizer):
    """max_resp_len 64, buffer 16: no penalty up to 48 tokens, then -(len-48)/16 x factor 1.0."""
    cfg = script_config("mhqa", MODEL_PATH=str(tiny_model), REWARD_MANAGER="dapo", MAX_RESPONSE_LENGTH="64",
                        OVERLONG_BUFFER_LEN="16")
    ob = cfg.reward.reward_kwargs.overlong_buffer_cfg
    assert (cfg.reward.reward_kwargs.max_resp_len, ob.len, ob.penalty_factor) == (64, 16, 1.0)
    head = tokenizer.encode("<think>")
    tail = tokenizer.encode("</think>\n<answer>Mary Shelley</answer>")
    filler = tokenizer.encode("x")
    assert len(filler) == 1  # one token per filler step, so lengths are exact

    def sample(length: int) -> dict:
        ids = head + filler * (length - len(head) - len(tail)) + tail
        assert len(ids) == length
        return {"data_source": "nq", "ids": ids, "gt": "Mary Shelley"}

    out = score_all(cfg, batch(tokenizer, [sample(40), sample(48), sample(56), sample(64)], response_length=64))
    assert [o["reward_extra_info"]["acc"] for o in out] == [1.0] * 4
    assert [o["reward_extra_info"]["overlong_reward"] for o in out] == [0.0, 0.0, -0.5, -1.0]
    assert [o["reward_score"] for o in out] == [1.0, 1.0, 0.5, 0.0]
    assert [bool(o["reward_extra_info"]["overlong"]) for o in out] == [False, False, True, True]


def test_reward_kwargs_reach_compute_score(tiny_model, tokenizer):
    """+reward.custom_reward_function.reward_kwargs (FORMAT_MODE) arrive as compute_score options."""
    cfg = script_config("mhqa", MODEL_PATH=str(tiny_model), REWARD_MANAGER="naive", FORMAT_MODE="multiply",
                        MAX_RESPONSE_LENGTH="64")
    broken = {"data_source": "nq", "response": "<answer>Mary Shelley</answer> trailing text <think>",
              "gt": "Mary Shelley"}
    out = score_all(cfg, batch(tokenizer, [broken], response_length=64))
    info = out[0]["reward_extra_info"]
    assert info["acc"] == 1.0 and info["format_ok"] == 0.0
    assert out[0]["reward_score"] == 0.0  # multiply: a broken format zeroes the reward


def test_code_ground_truth_from_parquet_reaches_the_code_scorer(tiny_model, tokenizer, tmp_path):
    """A dict ground truth (tests) stored as JSON by afm data rl is read by the code scorer intact."""
    from afm.data.rl_parquet import build_rl_rows

    rows, _ = build_rl_rows([{"id": "c1", "question": "Print the sum of two integers.", "stdin": True,
                              "tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}}],
                            data_source="codecontests", prompt_key="code_agent", ability="code", a_key="tests")
    gt = rows[0]["reward_model"]["ground_truth"]
    cfg = script_config("code", MODEL_PATH=str(tiny_model), REWARD_MANAGER="naive", MAX_RESPONSE_LENGTH="128",
                        MAX_PROMPT_LENGTH="64")
    good = "<answer>\n```py\na, b = map(int, input().split())\nprint(a + b)\n```\n</answer>"
    bad = "<answer>\n```py\nprint(0)\n```\n</answer>"
    data = batch(tokenizer, [{"data_source": "codecontests", "response": r, "gt": gt} for r in (good, bad)],
                 response_length=128)
    out = score_all(cfg, data)  # the sandbox is part of the rl test environment (extra sandbox)
    assert not out[0]["reward_extra_info"].get("error")
    assert [o["reward_score"] for o in out] == [1.0, 0.0]


def broken_sandbox(tmp_path: Path) -> dict:
    """A sandbox whose interpreter passes the start-up probe but cannot be mounted in the jail: every program
    ends in sandbox_error, as when the sandbox breaks under a running training job."""
    import sys

    fake = tmp_path / "broken-python" / "python3"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f'#!/bin/sh\ncase "$*" in *sys.version_info*) exec {os.path.realpath(sys.executable)} "$@";; '
                    "esac\nexit 3\n")
    fake.chmod(0o755)
    return {"python": str(fake), "mode": "oneshot"}


CODE_GT = '{"stdin": ["1 2\\n"], "expected_output": ["3\\n"], "question_id": "abc100_a"}'
GOOD_CODE = "<answer>\n```py\na, b = map(int, input().split())\nprint(a + b)\n```\n</answer>"


def code_config(tiny_model, tmp_path, limit: str):
    from omegaconf import open_dict

    cfg = script_config("code", MODEL_PATH=str(tiny_model), REWARD_MANAGER="naive", MAX_RESPONSE_LENGTH="128",
                        MAX_PROMPT_LENGTH="64", INFRA_FAIL_LIMIT=limit)
    assert cfg.reward.custom_reward_function.reward_kwargs.infra_fail_limit == int(limit)
    with open_dict(cfg):
        cfg.reward.custom_reward_function.reward_kwargs.code_sandbox = broken_sandbox(tmp_path)
    return cfg


def test_infrastructure_failures_are_flagged_then_stop_the_step(tiny_model, tokenizer, tmp_path):
    """A dead sandbox: below INFRA_FAIL_LIMIT the samples score 0 with infra_error=1 (a logged metric, not a
    silent wrong answer); at the limit verl's reward worker raises and the training step fails loudly.

    verl loads afm/rewards/score.py afresh for each reward worker, so each worker counts its own streak."""
    samples = [{"data_source": "livecodebench_v5", "response": GOOD_CODE, "gt": CODE_GT}] * 3
    out = score_all(code_config(tiny_model, tmp_path, "8"), batch(tokenizer, samples, response_length=128))
    assert [o["reward_score"] for o in out] == [0.0] * 3
    for o in out:
        info = o["reward_extra_info"]
        assert info["infra_error"] == 1.0 and info["error"].startswith("sandbox failure"), info
    with pytest.raises(Exception, match=r"(?s)3 infrastructure failures in a row .*the sandbox or the judge is down"):
        score_all(code_config(tiny_model, tmp_path, "3"), batch(tokenizer, samples, response_length=128))
