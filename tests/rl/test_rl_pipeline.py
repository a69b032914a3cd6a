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


def test_parquet_to_rollout_to_reward(tiny_model, tmp_path, tokenizer):
    """The whole CPU-reachable RL data path: `afm data rl` rows -> verl's RLHFDataset and collate_fn -> afm_agent in
    verl's AgentLoopWorker (real sandboxed code tool) -> verl's RewardLoopWorker grading the final program with the
    row's tests in the sandbox."""
    from test_rl_dataset import data_config
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from afm.data.rl_parquet import build_rl_rows, write_rl_parquet

    problems = [{"id": "sum", "question": "SUMQ: print the sum of two integers read from stdin.", "stdin": True,
                 "tests": {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}},
                {"id": "bad", "question": "BADQ: print the sum of two integers read from stdin.", "stdin": True,
                 "tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}}]
    rows, report = build_rl_rows(problems, data_source="codecontests", prompt_key="code_agent", ability="code",
                                 a_key="tests", tools=["code"])
    assert report.kept == 2
    path = write_rl_parquet(rows, tmp_path / "code.parquet")
    dcfg = data_config("code", str(path))
    ds = RLHFDataset(dcfg.data.train_files, tokenizer, dcfg.data)
    batch = DataProto.from_single_dict(collate_fn([ds[i] for i in range(len(ds))]))
    batch.non_tensor_batch["priority"] = np.arange(len(ds), dtype=np.int64)

    program = f"{F}py\na, b = map(int, input().split())\nprint(a + b)\n{F}"
    server = TinyServer(tiny_model, {
        "SUMQ": [f"<think>try it</think>\n<code>\n{F}py\nprint(1 + 2)\n{F}\n</code>",
                 f"<think>works</think>\n<answer>\n{program}\n</answer>"],
        "BADQ": [f"<answer>\n{F}py\nprint(0)\n{F}\n</answer>"]})
    worker = make_worker(tiny_model, tmp_path, server, tool_config=TOOLS / "code.yaml", prompt_length=4096,
                         response_length=512)
    try:
        import asyncio

        out = asyncio.run(worker.generate_sequences(batch))
    finally:
        close_tools(worker)
    assert list(out.non_tensor_batch["finish_reason"]) == ["answer", "answer"]
    assert list(out.non_tensor_batch["tools"]) == [["code"], ["code"]]  # from the parquet's tools_kwargs
    first = unpad(out, 0)
    assert first["mask"].count(0) > 0  # the code observation, masked
    for key in ("data_source", "reward_model", "extra_info"):  # the trainer unions the batch with its output
        out.non_tensor_batch[key] = batch.non_tensor_batch[key]

    cfg = script_config("code", MODEL_PATH=str(tiny_model), REWARD_MANAGER="dapo", REWARD_FN="compute_score",
                        MAX_RESPONSE_LENGTH="512")
    scored = score_all(cfg, out)
    assert [o["reward_score"] for o in scored] == [1.0, 0.0]
    assert scored[0]["reward_extra_info"]["method"] == "code_tests"
