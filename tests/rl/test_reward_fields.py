"""What the agent loop records reaches the reward (issue 26, items 3 and 4).

``afm_agent`` runs in verl's real ``AgentLoopWorker`` (tiny model's tokenizer, scripted turns, the real sandboxed
code tool) with streaming reward on, as in training: verl's worker scores each trajectory as it finishes by calling
``compute_score.remote`` on a reward worker handle. Here the handle is verl's real ``RewardLoopWorker``, built from
the config the DAPO script prints and called in this process instead of through Ray. The reward function is afm's
``compute_score``; the data source is a scorer registered by the test, as a user would, which records the
``extra_info`` it is given.
"""

from __future__ import annotations

import asyncio
import json
import socket
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from test_agent_loop import (
    TOOLS,
    F,
    TinyServer,
    afm_tools_from_verl,
    agent_loops_yaml,
    compose_config,
    row,
    unpad,
)
from test_agent_loop import batch as rows_batch
from test_rl_rewards import script_config
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

from afm.rewards import register_scorer, unregister_scorer

MANAGERS = ["dapo", "naive", "rate_limited"]
SEEN: list[dict[str, Any]] = []


def probe(solution_str: str, ground_truth: Any, *, data_source: str, extra_info: dict, **options: Any) -> dict:
    """A user's scorer: reads what the rollout recorded."""
    SEEN.append(dict(extra_info))
    return {"acc": 1.0 if "42" in solution_str else 0.0}


@pytest.fixture
def probe_source():
    SEEN.clear()
    register_scorer("fields_probe", probe, overwrite=True)
    yield "fields_probe"
    unregister_scorer("fields_probe")


class InProcessRewardWorker:
    """A reward worker handle as verl's agent-loop worker uses it (``handle.compute_score.remote(data)``), running
    verl's ``RewardLoopWorker`` in this process, built on the first call inside the running event loop like the Ray
    actor's."""

    def __init__(self, cfg: Any) -> None:
        self.cfg, self.worker = cfg, None
        self.compute_score = SimpleNamespace(remote=self._compute_score)

    async def _compute_score(self, data: DataProto) -> dict:
        if self.worker is None:
            self.worker = RewardLoopWorker(self.cfg)
        return await self.worker.compute_score(data)


def reward_config(tiny_model, manager: str, **env: str):
    return script_config("code", MODEL_PATH=str(tiny_model), REWARD_MANAGER=manager, REWARD_FN="compute_score",
                         MAX_RESPONSE_LENGTH="512", **env)


def run_with_streaming_reward(tiny_model, tmp_path, server: TinyServer, rows: list[dict], reward_cfg: Any,
                              tool_config=TOOLS / "code.yaml") -> DataProto:
    cfg = compose_config(tiny_model, agent_loops_yaml(tmp_path), tool_config, response_length=512,
                         extra=("actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",))
    worker = AgentLoopWorker(cfg, llm_client=server, reward_loop_worker_handles=[InProcessRewardWorker(reward_cfg)])
    data = rows_batch(rows)
    data.non_tensor_batch["priority"] = np.arange(len(rows), dtype=np.int64)

    async def go() -> DataProto:
        try:
            return await worker.generate_sequences(data)
        finally:
            for tool in afm_tools_from_verl(worker.tools).values():
                await tool.aclose()

    return asyncio.run(go())


def scored_row(question: str, data_source: str, **extra_info: Any) -> dict:
    r = row(question, **extra_info)
    r["data_source"] = data_source
    r["reward_model"] = {"style": "rule", "ground_truth": "42"}
    return r


@pytest.mark.parametrize("manager", MANAGERS)
def test_user_scorer_sees_the_agent_loop_fields(tiny_model, tmp_path, probe_source, manager):
    """Under every REWARD_MANAGER the scripts offer, the scorer's extra_info holds the dataset row's extra_info, the
    fields afm_agent recorded and verl's num_turns. verl 0.9.1's own dapo manager passes none of them."""
    server = TinyServer(tiny_model, {
        "QTOOL": [f"<think>compute</think>\n<code>\n{F}py\nprint(6*7)\n{F}\n</code>",
                  "<think>the tool says 42</think>\n<answer>\\boxed{42}</answer>"],
        "QDIRECT": ["<answer>\\boxed{41}</answer>"],
    })
    cfg = reward_config(tiny_model, manager)
    assert cfg.reward.reward_manager.name == f"afm_{manager}"
    rows = [scored_row("QTOOL: 6*7?", probe_source, tool_selection=["code"]),
            scored_row("QDIRECT: 6*7?", probe_source, tool_selection=["code"])]
    out = run_with_streaming_reward(tiny_model, tmp_path, server, rows, cfg)

    seen = {info["index"]: info for info in SEEN}
    assert sorted(seen) == ["QDIRECT: 6*7?", "QTOOL: 6*7?"]
    tool, direct = seen["QTOOL: 6*7?"], seen["QDIRECT: 6*7?"]
    # the dataset row's own extra_info is still there
    assert list(tool["tool_selection"]) == ["code"]
    # what afm_agent recorded
    assert tool["finish_reason"] == "answer" and tool["turns"] == 2
    assert tool["tool_calls"] == {"code": 1} and tool["tool_status"] == {"ok": 1} and tool["tool_errors"] == {}
    assert tool["tool_infra_errors"] == {} and tool["infra_error"] is False
    assert tool["tools"] == ["code"] and tool["observation_tokens"] > 0
    assert direct["finish_reason"] == "answer" and direct["turns"] == 1 and direct["tool_calls"] == {}
    # verl's turn count: prompt + generations + observations
    assert tool["num_turns"] == 4 and direct["num_turns"] == 2
    # the rewards were computed and written back by verl as usual
    scores = out.batch["rm_scores"].sum(dim=1).tolist()
    assert scores == [1.0, 0.0]
    assert list(out.non_tensor_batch["infra_error"]) == [0.0, 0.0]  # compute_score's key, stacked by verl


def test_verls_dapo_manager_alone_drops_the_fields(tiny_model, tmp_path, probe_source):
    """Why afm registers its own managers: the same run through verl's own ``dapo`` manager."""
    from omegaconf import open_dict

    server = TinyServer(tiny_model, {"QDIRECT": ["<answer>\\boxed{42}</answer>"]})
    cfg = reward_config(tiny_model, "dapo")
    with open_dict(cfg):
        cfg.reward.reward_manager.name = "dapo"
    run_with_streaming_reward(tiny_model, tmp_path, server, [scored_row("QDIRECT: 6*7?", probe_source)], cfg)
    assert len(SEEN) == 1 and "finish_reason" not in SEEN[0] and "num_turns" not in SEEN[0]


def test_afm_managers_are_verls_classes():
    from verl.experimental.reward_loop.reward_manager import (
        DAPORewardManager,
        NaiveRewardManager,
        RateLimitedRewardManager,
    )

    assert issubclass(get_reward_manager_cls("afm_dapo"), DAPORewardManager)
    assert issubclass(get_reward_manager_cls("afm_naive"), NaiveRewardManager)
    assert issubclass(get_reward_manager_cls("afm_rate_limited"), RateLimitedRewardManager)
    # verl's own names still resolve to verl's own classes
    assert get_reward_manager_cls("dapo") is DAPORewardManager


# ---- tool infrastructure failures ------------------------------------------------------------------------------
def trajectory_data(tokenizer, response: str, fields: dict, num_turns: int, data_source: str = "nq",
                    ground_truth: str = "Mary Shelley") -> DataProto:
    """One trajectory as verl's agent-loop worker hands it to the reward worker (``_compute_score``)."""
    prompt = torch.tensor(tokenizer.encode("Question: who wrote frankenstein?"))
    resp = torch.tensor(tokenizer.encode(response))
    ids = torch.cat([prompt, resp])
    return DataProto.from_dict(
        tensors={"prompts": prompt[None], "responses": resp[None], "input_ids": ids[None],
                 "attention_mask": torch.ones_like(ids)[None],
                 "position_ids": torch.arange(len(ids))[None]},
        non_tensors={"data_source": np.array([data_source]),
                     "reward_model": np.array([{"style": "rule", "ground_truth": ground_truth}]),
                     "extra_info": np.array([{"index": "i0", "question": "who wrote frankenstein?"}]),
                     "tool_extra_fields": np.array([fields], dtype=object),
                     "__num_turns__": np.array([num_turns]),
                     "prompt_len": np.array([len(prompt)]), "response_len": np.array([len(resp)])},
    )


INFRA_FIELDS = {"finish_reason": "answer", "turns": 2, "tool_calls": {"web_search": 2},
                "tool_errors": {"web_search": 2}, "tool_status": {"error": 2},
                "tool_infra_errors": {"web_search": 2}, "infra_error": True}


def score_one(cfg, data: DataProto) -> dict:
    async def go() -> dict:
        return await RewardLoopWorker(cfg).compute_score(data)
    return asyncio.run(go())


@pytest.mark.parametrize("manager", MANAGERS)
def test_tool_infra_failure_is_an_infrastructure_failure_not_a_wrong_answer(tiny_model, tokenizer, manager):
    """A correct answer given after the search server died is neither graded right nor wrong: infra_error 1, not
    graded; and INFRA_FAIL_LIMIT of them in a row stop the step under every manager (rate_limited included, which
    would otherwise turn the error into a 0 reward)."""
    answer = "<think>search failed</think>\n<answer>Mary Shelley</answer>"
    cfg = reward_config(tiny_model, manager, INFRA_FAIL_LIMIT="8")
    out = score_one(cfg, trajectory_data(tokenizer, answer, INFRA_FIELDS, num_turns=4))
    info = out["reward_extra_info"]
    assert info["infra_error"] == 1.0 and info["acc"] == 0.0 and info["method"] == "tool_infra"
    assert info["error"] == "tool infrastructure failure: web_search x2"
    # the same answer with working tools is graded as usual
    ok = dict(INFRA_FIELDS, tool_errors={}, tool_status={"ok": 2}, tool_infra_errors={}, infra_error=False)
    good = score_one(cfg, trajectory_data(tokenizer, answer, ok, num_turns=4))["reward_extra_info"]
    assert good["infra_error"] == 0.0 and good["acc"] == 1.0 and good["method"] == "em"

    cfg = reward_config(tiny_model, manager, INFRA_FAIL_LIMIT="2")

    async def two_in_a_row() -> None:
        worker = RewardLoopWorker(cfg)
        await worker.compute_score(trajectory_data(tokenizer, answer, INFRA_FIELDS, num_turns=4))
        await worker.compute_score(trajectory_data(tokenizer, answer, INFRA_FIELDS, num_turns=4))

    with pytest.raises(Exception, match=r"2 infrastructure failures in a row \(last: nq: tool infrastructure "
                                        r"failure: web_search x2\); a tool server"):
        asyncio.run(two_in_a_row())


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rollout_with_a_dead_search_server_carries_no_gradient(tiny_model, tmp_path, monkeypatch, probe_source):
    """The search server is down (nothing listens on its port): afm_agent records the infrastructure failure, zeroes
    the trajectory's response mask, and the reward is an infrastructure failure."""
    monkeypatch.setenv("SERVER_HOST", "127.0.0.1")
    monkeypatch.setenv("WEBSEARCH_PORT", str(_dead_port()))
    monkeypatch.delenv("AFM_SERVER_TOKEN", raising=False)
    monkeypatch.setenv("AFM_RL_TRACE_DIR", str(tmp_path / "trace"))
    server = TinyServer(tiny_model, {
        "QSEARCH": ["<web_search>who wrote frankenstein</web_search>", "<answer>42</answer>"],
        "QPLAIN": ["<answer>42</answer>"],
    })
    rows = [scored_row("QSEARCH: who?", probe_source, tool_selection=["web_search"]),
            scored_row("QPLAIN: who?", probe_source, tool_selection=["web_search"])]
    out = run_with_streaming_reward(tiny_model, tmp_path, server, rows, reward_config(tiny_model, "dapo"),
                                    tool_config=TOOLS / "afm.yaml")
    searched, plain = unpad(out, 0), unpad(out, 1)
    assert out.non_tensor_batch["tool_infra_errors"][0] == {"web_search": 1}
    assert bool(out.non_tensor_batch["infra_error"][0]) is True
    assert searched["mask"] == [0] * len(searched["mask"]) and len(searched["mask"]) > 0
    assert bool(out.non_tensor_batch["infra_error"][1]) is False and 1 in plain["mask"]
    assert list(out.non_tensor_batch["method"]) == ["tool_infra", "qa"]  # "qa": the probe names no method
    assert [float(x) for x in out.non_tensor_batch["infra_error"]] == [1.0, 0.0]
    # the user's scorer was not even called for the failed rollout
    assert [info["index"] for info in SEEN] == ["QPLAIN: who?"]
    # the trace shows what RL trains on
    traces = [json.loads(line) for p in (tmp_path / "trace").glob("afm_agent.*.jsonl") for line in p.open()]
    failed = [t for t in traces if t["tool_infra_errors"]]
    assert len(traces) == 2 and len(failed) == 1
    assert failed[0]["tool_infra_errors"] == {"web_search": 1} and set(failed[0]["response_mask"]) == {0}


# ---- GRPO without the rows that carry no gradient ---------------------------------------------------------------
def grpo_data(scores: list[float], groups: list[str], masked: set[int]) -> DataProto:
    n, length = len(scores), 4
    rewards = torch.zeros(n, length)
    rewards[:, -1] = torch.tensor(scores)
    mask = torch.ones(n, length, dtype=torch.long)
    for i in masked:
        mask[i] = 0
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": np.array(groups, dtype=object)})
    return data


def _v1_advantages(data: DataProto) -> torch.Tensor:
    """verl's V1 trainer path (trainer.use_v1=true, what the scripts run): compute_advantage_for_multi_trajectories."""
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    keys = [f"{uid}_{i}_0" for i, uid in enumerate(data.non_tensor_batch["uid"])]
    out = compute_advantage_for_multi_trajectories(data, batch_keys=keys, adv_estimator="grpo", num_repeat=4)
    return out.batch["advantages"][:, 0]


def test_grpo_leaves_masked_rows_out_of_their_group():
    from verl.trainer.ppo import core_algos

    original = core_algos.compute_grpo_outcome_advantage.__wrapped__
    # group a: row 1 (an infra failure) is masked; group b untouched; group c cut down to a single row
    scores = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    groups = ["a", "a", "a", "a", "b", "b", "b", "b", "c", "c"]
    adv = _v1_advantages(grpo_data(scores, groups, masked={1, 8}))

    def verl_grpo(rows: list[int]) -> list[float]:
        r = grpo_data([scores[i] for i in rows], [groups[i] for i in rows], set())
        a, _ = original(r.batch["token_level_rewards"], r.batch["response_mask"], r.non_tensor_batch["uid"])
        return a[:, 0].tolist()

    assert adv[[0, 2, 3]].tolist() == pytest.approx(verl_grpo([0, 2, 3]))  # group a without row 1
    assert adv[4:8].tolist() == pytest.approx(verl_grpo([4, 5, 6, 7]))  # group b as before
    assert adv[1].item() == 0.0 and adv[8].item() == 0.0 and adv[9].item() == 0.0
    # without the masked row, row 1's 0 no longer lowers group a's mean: the right answers gain less
    with_row = verl_grpo([0, 1, 2, 3])
    assert adv[0].item() < with_row[0]

    # nothing masked: exactly verl's result
    plain = _v1_advantages(grpo_data(scores, groups, masked=set()))
    assert plain.tolist() == pytest.approx(verl_grpo(list(range(len(scores)))))


FRESH_PROCESS = """
from verl.trainer.ppo.reward import resolve_reward_manager_cls
from omegaconf import OmegaConf
import sys
cls = resolve_reward_manager_cls(OmegaConf.create({"reward": {"reward_manager": {"source": "register",
                                                                                 "name": "afm_dapo"}}}))
import verl.trainer.ppo.core_algos as core_algos
print(cls.__module__, cls.__name__, getattr(core_algos.compute_grpo_outcome_advantage, "__afm_patched__", False),
      core_algos.ADV_ESTIMATOR_REGISTRY["grpo"] is core_algos.compute_grpo_outcome_advantage,
      "afm.rl.reward_manager" in sys.modules)
"""


def test_a_fresh_verl_process_resolves_the_afm_managers_and_the_grpo_patch():
    """What a Ray worker does: import verl (its plugin entry point loads afm's plugin) and resolve the configured
    manager by name; nothing of afm is imported first."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["afm.rl.reward_manager", "AfmDAPORewardManager", "True", "True", "True"]
