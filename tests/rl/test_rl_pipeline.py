"""Rollout to reward, as verl chains them: ``afm_agent`` trajectories from verl's real ``AgentLoopWorker`` (tiny
model's tokenizer, scripted turns, the real sandboxed code tool) are scored by verl's real ``RewardLoopWorker``
configured by the code-agent DAPO script (our ``compute_score``, ``naive`` and ``dapo`` managers)."""

from __future__ import annotations

import numpy as np
import pytest
from test_agent_loop import TOOLS, F, TinyServer, close_tools, make_worker, row, run_worker, unpad
from test_rl_rewards import score_all, script_config


@pytest.mark.parametrize("manager", ["naive", "dapo"])
def test_agent_loop_outputs_scored_by_verl_reward_managers(tiny_model, tmp_path, manager):
    script = {
        "QRIGHT": [f"<think>compute</think>\n<code>\n{F}py\nprint(6*7)\n{F}\n</code>",
                   "<think>the tool says 42</think>\n<answer>\\boxed{42}</answer>"],
        "QWRONG": [f"<code>\n{F}py\nprint(6*7)\n{F}\n</code>", "<answer>\\boxed{41}</answer>"],
        "QNOANS": [f"<code>\n{F}py\nprint(1)\n{F}\n</code>"] * 3,
    }
    server = TinyServer(tiny_model, script)
    worker = make_worker(tiny_model, tmp_path, server, tool_config=TOOLS / "code.yaml", response_length=512,
                         extra=("actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",))
    questions = ["QRIGHT: 6*7?", "QWRONG: 6*7?", "QNOANS: 6*7?"]
    try:
        out = run_worker(worker, [row(q, tool_selection=["code"]) for q in questions])
    finally:
        close_tools(worker)
    assert list(out.non_tensor_batch["finish_reason"]) == ["answer", "answer", "max_turns"]
    for i in range(3):  # observations are in the scored response, masked out of the loss
        s = unpad(out, i)
        assert 0 in s["mask"] and s["mask"][0] == 1
    n = len(questions)
    out.non_tensor_batch["data_source"] = np.array(["aime24"] * n, dtype=object)
    out.non_tensor_batch["reward_model"] = np.array([{"style": "rule", "ground_truth": "42"}] * n, dtype=object)
    out.non_tensor_batch["extra_info"] = np.array([{"question": q, "index": q} for q in questions], dtype=object)

    cfg = script_config("code", MODEL_PATH=str(tiny_model), REWARD_MANAGER=manager, REWARD_FN="compute_score",
                        MAX_RESPONSE_LENGTH="512")
    scored = score_all(cfg, out)
    assert [o["reward_extra_info"]["acc"] for o in scored] == [1.0, 0.0, 0.0]
    assert [o["reward_score"] for o in scored] == [1.0, 0.0, 0.0]
    assert scored[0]["reward_extra_info"]["pred"] == "\\boxed{42}"  # the last <answer>, graded by Math-Verify
    if manager == "dapo":  # far below the overlong buffer: no penalty
        assert all(o["reward_extra_info"]["overlong_reward"] == 0 for o in scored)
